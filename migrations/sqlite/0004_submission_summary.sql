-- A completed submission's leaderboard summary (metric means, success rates, episode counts) as
-- small JSON, so leaderboards never parse whole reports. Set with the report; filled for older
-- rows when the server starts. SQLite dialect (keep in step with ../postgres/).
ALTER TABLE submissions ADD COLUMN summary_json TEXT;
