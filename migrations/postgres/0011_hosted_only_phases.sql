-- Phases that take hosted submissions only (issue 40 §3): their benchmark's motions are never
-- streamed to a participant's agent (no remote sessions, no practice); 1 = hosted only.
-- PostgreSQL dialect (keep in step with ../sqlite/).
ALTER TABLE phases ADD COLUMN hosted_only BIGINT NOT NULL DEFAULT 0;
