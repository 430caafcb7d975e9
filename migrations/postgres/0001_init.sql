-- MimicArena metadata schema, PostgreSQL dialect (keep in step with ../sqlite/0001_init.sql).
-- Column types are chosen so that sqlx's `Any` driver decodes them as i64 (BIGINT), f64
-- (DOUBLE PRECISION) or String (TEXT) on both engines. Times are unix milliseconds.

CREATE TABLE teams (
    id          BIGSERIAL PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    token_hash  TEXT NOT NULL UNIQUE,   -- hex sha256 of the bearer token; the token itself is never stored
    created_at  BIGINT NOT NULL
);

CREATE TABLE submissions (
    id              TEXT PRIMARY KEY,
    team_id         BIGINT NOT NULL REFERENCES teams (id),
    benchmark       TEXT NOT NULL,
    agent_name      TEXT NOT NULL,
    status          TEXT NOT NULL,       -- PENDING | RUNNING | COMPLETED | FAILED
    episodes_total  BIGINT NOT NULL,
    created_at      BIGINT NOT NULL,
    started_at      BIGINT,
    finished_at     BIGINT,
    report_json     TEXT,
    error           TEXT
);

CREATE INDEX submissions_benchmark_status ON submissions (benchmark, status);
CREATE INDEX submissions_team ON submissions (team_id);

CREATE TABLE episodes (
    submission_id  TEXT NOT NULL REFERENCES submissions (id),
    idx            BIGINT NOT NULL,
    motion         TEXT NOT NULL,
    category       TEXT NOT NULL,
    start_s        DOUBLE PRECISION NOT NULL,
    duration_s     DOUBLE PRECISION NOT NULL,
    seed           TEXT NOT NULL,        -- u64 as decimal text (BIGINT is signed)
    dr_level       BIGINT NOT NULL,
    status         TEXT NOT NULL,        -- PENDING | RUNNING | COMPLETED | FELL | FAILED | TIMEOUT
    attempts       BIGINT NOT NULL DEFAULT 0,
    steps          BIGINT NOT NULL DEFAULT 0,
    metrics_json   TEXT,
    reason         TEXT,
    updated_at     BIGINT NOT NULL,
    PRIMARY KEY (submission_id, idx)
);

CREATE INDEX episodes_status ON episodes (status);
