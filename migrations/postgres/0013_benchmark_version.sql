-- The benchmark file's `version` a submission was created under ("bump when a change makes
-- results incomparable"): leaderboards rank only the submissions of the file's current version
-- (NULL: created before this column, taken as the current one).
-- PostgreSQL dialect (keep in step with ../sqlite/).
ALTER TABLE submissions ADD COLUMN benchmark_version BIGINT;
