-- What each version of a benchmark file defined when its first submission was created: a
-- digest of its rules and its motions' content. A file changed without a version bump would
-- rank incomparable results on one board, so a submission under the same version and another
-- digest is refused (the organisers bump the version).
-- PostgreSQL dialect (keep in step with ../sqlite/).
CREATE TABLE benchmark_definitions (
    benchmark TEXT NOT NULL,
    version BIGINT NOT NULL,
    definition TEXT NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (benchmark, version)
);
