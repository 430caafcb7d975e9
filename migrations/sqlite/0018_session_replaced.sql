-- When a client's new connection, on another server of the same database, named this session
-- as the one it lost (Connect.previous_session_id): the server running it then ends it as a
-- lost connection at its next missed step deadline (its running episodes run again, attempt
-- + 1) instead of timing them out for good. A hand-over on one server needs no row: it is told
-- in memory.
-- SQLite dialect (keep in step with ../postgres/).
ALTER TABLE submission_sessions ADD COLUMN replaced_at BIGINT;
