-- How many of an episode's runs the server lost (its restart, a lane's error, a store that
-- failed, another replica's lease running out): each started run counts in `attempts` (it
-- stays the run's number), but only `attempts - server_faults` are charged to the agent
-- against max_attempts. An episode the server keeps losing fails at MAX_SERVER_FAULTS, so a
-- poison episode that kills every replica in turn still ends.
-- SQLite dialect (keep in step with ../postgres/).
ALTER TABLE episodes ADD COLUMN server_faults INTEGER NOT NULL DEFAULT 0;
