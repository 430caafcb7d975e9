-- The key a client sends with the connect that creates a submission (Connect.connect_key): a
-- client whose connection is lost before `connected` arrives never learns the submission's id,
-- and its retry, with the same key, attaches to that submission instead of creating another
-- (which a phase's quota counted too). One key names one submission of its team.
-- PostgreSQL dialect (keep in step with ../sqlite/).
CREATE TABLE connect_keys (
    team_id BIGINT NOT NULL,
    connect_key TEXT NOT NULL,
    submission_id TEXT NOT NULL REFERENCES submissions (id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (team_id, connect_key)
);
