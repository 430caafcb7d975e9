-- One row per agent session of a submission: which agent connected, when, and how the session
-- ended. A submission resumed by another agent keeps every session's agent (issue 39); the
-- submission's agent_name stays the last session's, and each episode keeps the agent that ran
-- it. ended_at is NULL while a session runs (or when its server stopped without ending it).
-- PostgreSQL dialect (keep in step with ../sqlite/).
CREATE TABLE submission_sessions (
    id             TEXT PRIMARY KEY,
    submission_id  TEXT NOT NULL REFERENCES submissions (id),
    agent_name     TEXT NOT NULL,
    started_at     BIGINT NOT NULL,
    ended_at       BIGINT,
    outcome        TEXT
);

CREATE INDEX submission_sessions_by_submission ON submission_sessions (submission_id, started_at);
