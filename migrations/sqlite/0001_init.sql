-- MimicArena metadata schema, SQLite dialect (keep in step with ../postgres/0001_init.sql).
-- Column types are chosen so that sqlx's `Any` driver decodes them as i64 (INTEGER), f64 (REAL)
-- or String (TEXT) on both engines. Times are unix milliseconds.

CREATE TABLE teams (
    id          INTEGER PRIMARY KEY,
    name        TEXT NOT NULL UNIQUE,
    token_hash  TEXT NOT NULL UNIQUE,   -- hex sha256 of the bearer token; the token itself is never stored
    created_at  INTEGER NOT NULL
);

CREATE TABLE submissions (
    id              TEXT PRIMARY KEY,
    team_id         INTEGER NOT NULL REFERENCES teams (id),
    benchmark       TEXT NOT NULL,
    agent_name      TEXT NOT NULL,
    status          TEXT NOT NULL,       -- PENDING | RUNNING | COMPLETED | FAILED
    episodes_total  INTEGER NOT NULL,
    created_at      INTEGER NOT NULL,
    started_at      INTEGER,
    finished_at     INTEGER,
    report_json     TEXT,
    error           TEXT
);

CREATE INDEX submissions_benchmark_status ON submissions (benchmark, status);
CREATE INDEX submissions_team ON submissions (team_id);

CREATE TABLE episodes (
    submission_id  TEXT NOT NULL REFERENCES submissions (id),
    idx            INTEGER NOT NULL,
    motion         TEXT NOT NULL,
    category       TEXT NOT NULL,
    start_s        REAL NOT NULL,
    duration_s     REAL NOT NULL,
    seed           TEXT NOT NULL,        -- u64 as decimal text (INTEGER is signed)
    dr_level       INTEGER NOT NULL,
    status         TEXT NOT NULL,        -- PENDING | RUNNING | COMPLETED | FELL | FAILED | TIMEOUT
    attempts       INTEGER NOT NULL DEFAULT 0,
    steps          INTEGER NOT NULL DEFAULT 0,
    metrics_json   TEXT,
    reason         TEXT,
    updated_at     INTEGER NOT NULL,
    PRIMARY KEY (submission_id, idx)
);

CREATE INDEX episodes_status ON episodes (status);
