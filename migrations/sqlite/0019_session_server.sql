-- The server process running a session (its lease owner, NONCE@replica): a server restarted
-- under its replica id ends the sessions its killed predecessor left open (outcome
-- 'server_lost'), which otherwise showed as running for good. NULL for sessions recorded before.
-- SQLite dialect (keep in step with ../postgres/).
ALTER TABLE submission_sessions ADD COLUMN server TEXT;
