-- Phases that take hosted submissions only (issue 40 §3): their benchmark's motions are never
-- streamed to a participant's agent (no remote sessions, no practice); 1 = hosted only.
-- SQLite dialect (keep in step with ../postgres/).
ALTER TABLE phases ADD COLUMN hosted_only INTEGER NOT NULL DEFAULT 0;
