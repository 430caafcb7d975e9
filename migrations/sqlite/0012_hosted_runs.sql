-- Hosted submissions (issue 40): how the policy maps onto the arena (JSON, what
-- `arena-agent onnx --show` prints, shown on the submission page), and which server runs it.
-- A replica claims a hosted run as it claims episodes (runner, runner_expires_at in unix
-- milliseconds) and renews the claim while it runs; when it dies, another replica takes the run
-- over once the claim expires, and a restarted replica takes back its own at once.
-- SQLite dialect (keep in step with ../postgres/).
ALTER TABLE hosted_policies ADD COLUMN mapping TEXT NOT NULL DEFAULT '{}';
ALTER TABLE hosted_policies ADD COLUMN runner TEXT;
ALTER TABLE hosted_policies ADD COLUMN runner_expires_at INTEGER;
