-- The agent that ran each episode: a submission resumed by another agent keeps its earlier
-- episodes' agent, and the submission's agent_name becomes the last session's (issue 30).
-- PostgreSQL dialect (keep in step with ../sqlite/).
ALTER TABLE episodes ADD COLUMN agent_name TEXT;
