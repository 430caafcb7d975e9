-- Incremental leaderboards: every write that can change a leaderboard moves the 'leaderboard'
-- counter and stamps the submission with the new value (one transaction, so stamps follow commit
-- order), and a cached board re-reads only the submissions stamped since (issue 30).
-- PostgreSQL dialect (keep in step with ../sqlite/).
ALTER TABLE submissions ADD COLUMN board_seq BIGINT NOT NULL DEFAULT 0;
CREATE INDEX submissions_board_seq ON submissions (benchmark, board_seq);
