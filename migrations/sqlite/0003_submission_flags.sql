-- Submissions an organiser marks as baselines (shown with a badge on leaderboards).
-- SQLite dialect (keep in step with ../postgres/0003_submission_flags.sql).
ALTER TABLE submissions ADD COLUMN baseline INTEGER NOT NULL DEFAULT 0;   -- 0 or 1
