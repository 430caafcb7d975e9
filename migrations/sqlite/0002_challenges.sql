-- Challenges, phases, team members and revocable team tokens; submissions belong to a phase.
-- SQLite dialect (keep in step with ../postgres/0002_challenges.sql). Times are unix milliseconds.

CREATE TABLE challenges (
    id           TEXT PRIMARY KEY,      -- slug, e.g. "g1-cup-2026"
    title        TEXT NOT NULL,
    description  TEXT NOT NULL,
    created_at   INTEGER NOT NULL
);

CREATE TABLE phases (
    id                  TEXT PRIMARY KEY,   -- slug, unique across challenges (agents name it in Connect)
    challenge_id        TEXT NOT NULL REFERENCES challenges (id),
    benchmark           TEXT NOT NULL,
    starts_at           INTEGER NOT NULL,   -- open for submissions in [starts_at, ends_at)
    ends_at             INTEGER NOT NULL,
    leaderboard         TEXT NOT NULL,      -- public | private (results hidden from teams until ends_at)
    max_per_day         INTEGER,            -- submissions per team per UTC day; NULL = no limit
    max_total           INTEGER,            -- submissions per team in the phase; NULL = no limit
    observation_groups  TEXT,               -- JSON array of allowed groups; NULL = the benchmark's
    created_at          INTEGER NOT NULL
);

CREATE INDEX phases_challenge ON phases (challenge_id);
CREATE INDEX phases_benchmark ON phases (benchmark);

CREATE TABLE team_members (
    team_id     INTEGER NOT NULL REFERENCES teams (id),
    name        TEXT NOT NULL,
    email       TEXT NOT NULL,
    created_at  INTEGER NOT NULL
);

CREATE INDEX team_members_team ON team_members (team_id);

-- Authentication reads this table only. teams.token_hash stays (NOT NULL UNIQUE in 0001) and
-- holds the hash of the team's first token; nothing reads it any more.
CREATE TABLE team_tokens (
    id          TEXT PRIMARY KEY,       -- "tok-" + 16 hex digits: names a token without revealing it
    team_id     INTEGER NOT NULL REFERENCES teams (id),
    token_hash  TEXT NOT NULL UNIQUE,   -- hex sha256 of the bearer token; the token itself is never stored
    label       TEXT NOT NULL,
    created_at  INTEGER NOT NULL,
    expires_at  INTEGER,                -- NULL = never
    revoked_at  INTEGER                 -- NULL = valid
);

CREATE INDEX team_tokens_team ON team_tokens (team_id);

-- Existing teams keep their token.
INSERT INTO team_tokens (id, team_id, token_hash, label, created_at)
SELECT 'tok-' || substr('0000000000000000' || id, -16, 16), id, token_hash, 'initial', created_at FROM teams;

ALTER TABLE submissions ADD COLUMN phase_id TEXT REFERENCES phases (id);

CREATE INDEX submissions_phase_team ON submissions (phase_id, team_id, created_at);
