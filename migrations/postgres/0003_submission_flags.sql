-- Submissions an organiser marks as baselines (shown with a badge on leaderboards).
-- PostgreSQL dialect (keep in step with ../sqlite/0003_submission_flags.sql).
ALTER TABLE submissions ADD COLUMN baseline BIGINT NOT NULL DEFAULT 0;   -- 0 or 1
