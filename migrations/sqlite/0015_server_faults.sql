-- Runs of an episode not charged to its agent. Each started run counts in `attempts`, which
-- only grows (a run's number names its trajectory part and its commit), but max_attempts caps
-- the agent's runs only: `attempts - server_faults - uncharged_runs`.
-- server_faults: runs the server lost by a fault (its crash, a lane's error, a store that
-- failed, another replica's lease running out); capped at MAX_SERVER_FAULTS, so an episode
-- that itself breaks the server still ends.
-- uncharged_runs: claims that never started (the agent left before their episode_start) and
-- runs a server that was told to stop gave back; not capped.
-- SQLite dialect (keep in step with ../postgres/).
ALTER TABLE episodes ADD COLUMN server_faults INTEGER NOT NULL DEFAULT 0;
ALTER TABLE episodes ADD COLUMN uncharged_runs INTEGER NOT NULL DEFAULT 0;
