-- Episode claims are leases: the server process that claimed a RUNNING episode (lease_owner)
-- holds it until lease_expires_at (unix ms) and renews it while the episode runs; another
-- replica may claim it again once the lease has run out. A counter row moves whenever a
-- leaderboard can change, so every replica's leaderboard cache sees every replica's writes.
-- PostgreSQL dialect (keep in step with ../sqlite/).
ALTER TABLE episodes ADD COLUMN lease_owner TEXT;
ALTER TABLE episodes ADD COLUMN lease_expires_at BIGINT;
CREATE INDEX episodes_submission_status ON episodes (submission_id, status);
CREATE TABLE counters (
    name   TEXT PRIMARY KEY,
    value  BIGINT NOT NULL
);
INSERT INTO counters (name, value) VALUES ('leaderboard', 0);
