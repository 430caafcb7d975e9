//! Metadata storage: teams (members, hashed tokens), challenges and their phases, submissions
//! and their episodes in SQL, on embedded SQLite or on PostgreSQL, behind one API.
//!
//! One set of SQL strings (with `$1, $2, ...` placeholders, which both engines accept) runs through
//! sqlx's `Any` driver; the schema lives in `migrations/sqlite` and `migrations/postgres` (same
//! logical schema, one dialect each), embedded in the binary and applied by [`Storage::connect`].
//! Columns use only types the `Any` driver maps on both engines: `i64` (INTEGER / BIGINT), `f64`
//! (REAL / DOUBLE PRECISION) and `String` (TEXT); times are unix milliseconds ([`now_ms`]), seeds
//! (`u64`) are decimal text, metrics are a JSON object in which non-finite values are written as
//! the strings `"NaN"`, `"inf"` and `"-inf"` so that they survive the round trip.
//!
//! Episode state changes are guarded by the state they leave (`PENDING → RUNNING`,
//! `RUNNING → final`), so an episode is never claimed or counted twice, even with several
//! writers. A phase's submission quota is checked in the transaction that inserts the
//! submission, after locking the team's row, so concurrent requests cannot exceed it.

use std::collections::{BTreeMap, HashSet};
use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::Migrator;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqliteSynchronous};
use sqlx::{AnyPool, ConnectOptions, Connection, Executor, Row};

mod episodes;
pub use episodes::{Expired, LEASE_EXPIRED, Lease};

// Cargo notices edits to existing migration files only: after ADDING one, touch this file.
static SQLITE_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/sqlite");
static POSTGRES_MIGRATIONS: Migrator = sqlx::migrate!("../migrations/postgres");

/// How long [`Storage::connect`] waits for a database that refuses connections.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(30);

/// Episodes inserted per statement by [`Storage::create_submission`] (9 parameters each).
const INSERT_CHUNK: usize = 100;

/// Everything that can go wrong in the storage layer; each message says what was being done and
/// includes the underlying error's text, so the underlying error is kept as a field (`cause`),
/// not exposed as `source()`: printers that walk the chain would print it twice.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A database operation failed.
    #[error("database: {context}: {cause}")]
    Database { context: String, cause: sqlx::Error },
    /// Applying the schema migrations failed.
    #[error("database: migrating the {engine:?} schema: {cause}")]
    Migrate {
        engine: Engine,
        cause: sqlx::migrate::MigrateError,
    },
    /// A file system operation (creating the SQLite file's directory) failed.
    #[error("storage: {context}: {cause}")]
    Io { context: String, cause: std::io::Error },
    /// The database URL names no supported engine.
    #[error("storage: unsupported database URL {0:?} (expected sqlite://PATH or postgres://...)")]
    UnsupportedUrl(String),
    /// The row already exists (duplicate team name or token, duplicate submission id) or is in a
    /// state that forbids the change.
    #[error("conflict: {0}")]
    Conflict(String),
    /// The row to change does not exist.
    #[error("not found: {0}")]
    NotFound(String),
    /// The caller passed an argument the operation cannot accept.
    #[error("invalid argument: {0}")]
    Invalid(String),
    /// A stored value could not be read back (unknown status, bad seed or metrics JSON).
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// A new submission would exceed a phase's quota ([`Quota`]); nothing was stored.
    #[error(
        "quota exceeded: {used} of {limit} submission(s) {}",
        if *.daily { "today (UTC)" } else { "in total" }
    )]
    QuotaExceeded {
        /// The limit that was reached.
        limit: u32,
        /// Submissions already counted against it.
        used: i64,
        /// The per-day limit (true) or the total one (false).
        daily: bool,
    },
}

impl StorageError {
    /// Whether trying again later may succeed: the database could not be reached, dropped the
    /// connection, or is shutting down or starting up (a PostgreSQL restart, a failover).
    pub fn is_transient(&self) -> bool {
        let StorageError::Database { cause, .. } = self else {
            return false;
        };
        match cause {
            sqlx::Error::Io(_) | sqlx::Error::PoolTimedOut | sqlx::Error::PoolClosed => true,
            sqlx::Error::Protocol(_) | sqlx::Error::WorkerCrashed => true,
            // SQLSTATE 08 (connection exception), 57P01-57P03 (admin shutdown, crash shutdown,
            // cannot connect now); SQLite's busy/locked come back as 5 and 6.
            sqlx::Error::Database(db) => db
                .code()
                .is_some_and(|code| code.starts_with("08") || code.starts_with("57P") || code == "5" || code == "6"),
            _ => false,
        }
    }
}

/// Attaches "what was being done" to a sqlx error.
trait Context<T> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StorageError>;
}

impl<T> Context<T> for Result<T, sqlx::Error> {
    fn ctx(self, context: impl FnOnce() -> String) -> Result<T, StorageError> {
        self.map_err(|cause| StorageError::Database {
            context: context(),
            cause,
        })
    }
}

fn is_unique_violation(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|d| d.is_unique_violation())
}

fn is_foreign_key_violation(e: &sqlx::Error) -> bool {
    e.as_database_error().is_some_and(|d| d.is_foreign_key_violation())
}

/// The SQL engine behind a [`Storage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// Embedded SQLite (a file).
    Sqlite,
    /// A PostgreSQL server.
    Postgres,
}

/// A team: submits agents, authenticated by a bearer token whose hash only is stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Team {
    /// Database id.
    pub id: i64,
    /// Unique display name.
    pub name: String,
    /// Creation time, unix milliseconds.
    pub created_at: i64,
}

/// Lifecycle of a submission.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum SubmissionStatus {
    /// Created, no episode started yet.
    Pending,
    /// Episodes are being run.
    Running,
    /// Every episode reached a final state; the report is stored.
    Completed,
    /// The submission was abandoned; `error` says why.
    Failed,
}

impl SubmissionStatus {
    /// The stored (and serialised) form: "PENDING", "RUNNING", "COMPLETED", "FAILED".
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Running => "RUNNING",
            Self::Completed => "COMPLETED",
            Self::Failed => "FAILED",
        }
    }

    /// Whether the submission is COMPLETED or FAILED.
    pub fn is_final(&self) -> bool {
        matches!(self, Self::Completed | Self::Failed)
    }
}

impl fmt::Display for SubmissionStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for SubmissionStatus {
    type Err = StorageError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "PENDING" => Self::Pending,
            "RUNNING" => Self::Running,
            "COMPLETED" => Self::Completed,
            "FAILED" => Self::Failed,
            _ => {
                return Err(StorageError::Corrupt(format!(
                    "unknown submission status {s:?} (expected PENDING, RUNNING, COMPLETED or FAILED)"
                )));
            }
        })
    }
}

/// What [`Storage::create_submission`] needs to create a submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NewSubmission {
    /// Unique id chosen by the caller (e.g. a UUID).
    pub id: String,
    /// The submitting team.
    pub team_id: i64,
    /// Benchmark name.
    pub benchmark: String,
    /// The agent's self-reported name.
    pub agent_name: String,
    /// The challenge phase it is submitted to, if any.
    pub phase_id: Option<String>,
}

/// A stored submission.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Submission {
    /// Unique id.
    pub id: String,
    /// The submitting team's id.
    pub team_id: i64,
    /// The submitting team's name.
    pub team_name: String,
    /// Benchmark name.
    pub benchmark: String,
    /// The agent's self-reported name.
    pub agent_name: String,
    /// Lifecycle state.
    pub status: SubmissionStatus,
    /// Number of episodes the benchmark defines.
    pub episodes_total: i64,
    /// Creation time, unix milliseconds.
    pub created_at: i64,
    /// When it first became RUNNING, unix milliseconds.
    pub started_at: Option<i64>,
    /// When it became COMPLETED or FAILED, unix milliseconds.
    pub finished_at: Option<i64>,
    /// The report (JSON text), once COMPLETED; served separately, so not serialised here. Lists
    /// (`submissions`, `completed_submissions*`) leave it out.
    #[serde(skip)]
    pub report_json: Option<String>,
    /// Why it FAILED.
    pub error: Option<String>,
    /// The challenge phase it belongs to, if any.
    #[serde(rename = "phase")]
    pub phase_id: Option<String>,
    /// Marked by an organiser as a baseline (a badge on leaderboards).
    pub baseline: bool,
    /// The leaderboard summary of a COMPLETED submission (JSON, `leaderboard::ReportSummary`);
    /// not serialised.
    #[serde(skip)]
    pub summary_json: Option<String>,
}

/// One episode of a new submission, as the benchmark defines it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NewEpisode {
    /// Index within the submission (unique).
    pub idx: i64,
    /// Motion name.
    pub motion: String,
    /// Motion category.
    pub category: String,
    /// Start time within the motion, seconds.
    pub start_s: f64,
    /// Episode length, seconds.
    pub duration_s: f64,
    /// Simulation seed.
    pub seed: u64,
    /// Domain-randomisation level.
    pub dr_level: i64,
}

/// State of one episode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum EpisodeState {
    /// Waiting for an agent.
    Pending,
    /// Claimed by an agent connection.
    Running,
    /// Ran to the end.
    Completed,
    /// The robot fell (terminated early).
    Fell,
    /// Could not be run (agent error, attempts exhausted).
    Failed,
    /// The agent was too slow.
    Timeout,
}

impl EpisodeState {
    /// The stored (and serialised) form: "PENDING", "RUNNING", "COMPLETED", "FELL", "FAILED", "TIMEOUT".
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "PENDING",
            Self::Running => "RUNNING",
            Self::Completed => "COMPLETED",
            Self::Fell => "FELL",
            Self::Failed => "FAILED",
            Self::Timeout => "TIMEOUT",
        }
    }

    /// The lower-case word of reports and exports: "pending", …, "completed", "fell", "failed", "timeout".
    pub fn word(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Running => "running",
            Self::Completed => "completed",
            Self::Fell => "fell",
            Self::Failed => "failed",
            Self::Timeout => "timeout",
        }
    }

    /// Whether the episode is done (COMPLETED, FELL, FAILED or TIMEOUT).
    pub fn is_final(&self) -> bool {
        !matches!(self, Self::Pending | Self::Running)
    }
}

impl fmt::Display for EpisodeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for EpisodeState {
    type Err = StorageError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "PENDING" => Self::Pending,
            "RUNNING" => Self::Running,
            "COMPLETED" => Self::Completed,
            "FELL" => Self::Fell,
            "FAILED" => Self::Failed,
            "TIMEOUT" => Self::Timeout,
            _ => {
                return Err(StorageError::Corrupt(format!(
                    "unknown episode status {s:?} (expected PENDING, RUNNING, COMPLETED, FELL, FAILED or TIMEOUT)"
                )));
            }
        })
    }
}

/// A stored episode.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EpisodeRow {
    /// Index within the submission.
    pub idx: i64,
    /// Motion name.
    pub motion: String,
    /// Motion category.
    pub category: String,
    /// Start time within the motion, seconds.
    pub start_s: f64,
    /// Episode length, seconds.
    pub duration_s: f64,
    /// Simulation seed.
    pub seed: u64,
    /// Domain-randomisation level.
    pub dr_level: i64,
    /// Current state.
    pub status: EpisodeState,
    /// How many times it was started.
    pub attempts: i64,
    /// Control steps run (final states only).
    pub steps: i64,
    /// Metric values (final states only; may hold NaN).
    pub metrics: BTreeMap<String, f64>,
    /// Why it ended as it did (or why it was last requeued).
    pub reason: Option<String>,
    /// Last change, unix milliseconds.
    pub updated_at: i64,
    /// The server (replica id) that committed this final episode's result, and so stored its
    /// run's trajectory; None for an episode that is not final, or that was given up on
    /// (lost connections, an expired lease, a cancel) without a stored run. Internal: not in
    /// the API's JSON.
    #[serde(skip)]
    pub committed_by: Option<String>,
}

/// The result of a finished episode, for [`Storage::finish_episode`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EpisodeOutcome {
    /// Final state (COMPLETED, FELL, FAILED or TIMEOUT).
    pub status: EpisodeState,
    /// Control steps run.
    pub steps: i64,
    /// Metric values (NaN allowed).
    pub metrics: BTreeMap<String, f64>,
    /// Why it ended as it did.
    pub reason: Option<String>,
}

/// A challenge: a competition made of phases.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Challenge {
    /// Slug, unique.
    pub id: String,
    pub title: String,
    pub description: String,
    /// Creation time, unix milliseconds.
    pub created_at: i64,
}

/// Who may see a phase's leaderboard and per-episode results before the phase ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Visibility {
    /// Everyone, at any time.
    Public,
    /// Only the administrator until the phase ends; everyone afterwards.
    Private,
}

impl Visibility {
    /// The stored (and serialised) form: "public" or "private".
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Public => "public",
            Self::Private => "private",
        }
    }
}

impl FromStr for Visibility {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "public" => Ok(Self::Public),
            "private" => Ok(Self::Private),
            _ => Err(format!("expected \"public\" or \"private\", got {s:?}")),
        }
    }
}

/// A phase of a challenge: one benchmark, a time window, a leaderboard visibility, submission
/// quotas and the observation groups agents get.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Phase {
    /// Slug, unique across challenges.
    pub id: String,
    pub challenge_id: String,
    /// Benchmark name.
    pub benchmark: String,
    /// Open for submissions in `[starts_at, ends_at)`, unix milliseconds.
    pub starts_at: i64,
    pub ends_at: i64,
    pub leaderboard: Visibility,
    /// Submissions per team per UTC day; `None` = no limit.
    #[serde(rename = "max_submissions_per_day")]
    pub max_per_day: Option<u32>,
    /// Submissions per team in the whole phase; `None` = no limit.
    #[serde(rename = "max_submissions_total")]
    pub max_total: Option<u32>,
    /// Observation groups agents may receive (`reference` for reference frames); `None` = the
    /// benchmark's own.
    pub observation_groups: Option<Vec<String>>,
    /// Creation time, unix milliseconds.
    pub created_at: i64,
}

/// A member of a team (contact information; members do not authenticate).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    pub name: String,
    pub email: String,
    /// When added, unix milliseconds.
    pub created_at: i64,
}

/// A team token's metadata; the token itself is never stored, only its hash (never shown).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TeamToken {
    /// "tok-…": names the token in lists, logs and messages without revealing it.
    pub id: String,
    pub team_id: i64,
    pub label: String,
    /// Unix milliseconds.
    pub created_at: i64,
    /// The token stops working at this time; `None` = never.
    pub expires_at: Option<i64>,
    /// When it was revoked; `None` = not revoked.
    pub revoked_at: Option<i64>,
}

/// A phase's submission limits for one new submission (see [`Storage::create_submission_within`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota<'a> {
    /// The phase the submission counts against.
    pub phase_id: &'a str,
    pub max_per_day: Option<u32>,
    pub max_total: Option<u32>,
    /// Start of the current day (UTC), unix milliseconds: submissions from then on count as today's.
    pub day_start: i64,
}

/// Hex SHA-256 of a bearer token: what the `team_tokens` table stores instead of the token.
pub fn hash_token(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Now, in unix milliseconds.
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Metrics as a JSON object; non-finite values become the strings "NaN", "inf", "-inf".
fn metrics_to_json(metrics: &BTreeMap<String, f64>) -> String {
    let map: serde_json::Map<String, serde_json::Value> = metrics
        .iter()
        .map(|(k, &v)| {
            let value = if v.is_finite() {
                serde_json::Value::from(v)
            } else if v.is_nan() {
                serde_json::Value::from("NaN")
            } else if v > 0.0 {
                serde_json::Value::from("inf")
            } else {
                serde_json::Value::from("-inf")
            };
            (k.clone(), value)
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Inverse of [`metrics_to_json`]; `null` also reads as NaN.
fn metrics_from_json(text: &str) -> Result<BTreeMap<String, f64>, String> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| format!("metrics JSON {text:?}: {e}"))?;
    map.into_iter()
        .map(|(k, v)| {
            let x = match &v {
                serde_json::Value::Number(n) => n.as_f64(),
                serde_json::Value::Null => Some(f64::NAN),
                serde_json::Value::String(s) => match s.as_str() {
                    "NaN" => Some(f64::NAN),
                    "inf" => Some(f64::INFINITY),
                    "-inf" => Some(f64::NEG_INFINITY),
                    _ => None,
                },
                _ => None,
            };
            x.map(|x| (k.clone(), x))
                .ok_or_else(|| format!("metric {k:?} has the non-numeric value {v}"))
        })
        .collect()
}

/// Removes the password from a URL for error messages.
fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (authority, path) = rest.split_once('/').map_or((rest, None), |(a, p)| (a, Some(p)));
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _password)) => format!("{user}:***@{host}"),
            None => authority.to_string(),
        },
        None => authority.to_string(),
    };
    match path {
        Some(path) => format!("{scheme}://{authority}/{path}"),
        None => format!("{scheme}://{authority}"),
    }
}

const SUBMISSION_COLUMNS: &str = "s.id, s.team_id, t.name AS team_name, s.benchmark, s.agent_name, s.status, \
     s.episodes_total, s.created_at, s.started_at, s.finished_at, s.report_json, s.error, s.phase_id, s.baseline, \
     s.summary_json";

/// [`SUBMISSION_COLUMNS`] without the report (lists and leaderboards: a report is tens of KB).
const SUBMISSION_LIST_COLUMNS: &str = "s.id, s.team_id, t.name AS team_name, s.benchmark, s.agent_name, s.status, \
     s.episodes_total, s.created_at, s.started_at, s.finished_at, CAST(NULL AS TEXT) AS report_json, s.error, \
     s.phase_id, s.baseline, s.summary_json";

const PHASE_COLUMNS: &str = "id, challenge_id, benchmark, starts_at, ends_at, leaderboard, max_per_day, max_total, \
     observation_groups, created_at";

const TOKEN_COLUMNS: &str = "id, team_id, label, created_at, expires_at, revoked_at";

const EPISODE_COLUMNS: &str = "idx, motion, category, start_s, duration_s, seed, dr_level, status, attempts, steps, \
     metrics_json, reason, updated_at, lease_owner";

fn get<'r, T>(row: &'r AnyRow, column: &str, what: &str) -> Result<T, StorageError>
where
    T: sqlx::Decode<'r, sqlx::Any> + sqlx::Type<sqlx::Any>,
{
    row.try_get::<T, _>(column)
        .ctx(|| format!("reading column {column} of {what}"))
}

fn team_from_row(row: &AnyRow) -> Result<Team, StorageError> {
    Ok(Team {
        id: get(row, "id", "a team")?,
        name: get(row, "name", "a team")?,
        created_at: get(row, "created_at", "a team")?,
    })
}

fn submission_from_row(row: &AnyRow) -> Result<Submission, StorageError> {
    let id: String = get(row, "id", "a submission")?;
    let what = format!("submission {id}");
    let status: String = get(row, "status", &what)?;
    Ok(Submission {
        team_id: get(row, "team_id", &what)?,
        team_name: get(row, "team_name", &what)?,
        benchmark: get(row, "benchmark", &what)?,
        agent_name: get(row, "agent_name", &what)?,
        status: status
            .parse()
            .map_err(|e| StorageError::Corrupt(format!("{what}: {e}")))?,
        episodes_total: get(row, "episodes_total", &what)?,
        created_at: get(row, "created_at", &what)?,
        started_at: get(row, "started_at", &what)?,
        finished_at: get(row, "finished_at", &what)?,
        report_json: get(row, "report_json", &what)?,
        error: get(row, "error", &what)?,
        phase_id: get(row, "phase_id", &what)?,
        baseline: get::<i64>(row, "baseline", &what)? != 0,
        summary_json: get(row, "summary_json", &what)?,
        id,
    })
}

fn challenge_from_row(row: &AnyRow) -> Result<Challenge, StorageError> {
    Ok(Challenge {
        id: get(row, "id", "a challenge")?,
        title: get(row, "title", "a challenge")?,
        description: get(row, "description", "a challenge")?,
        created_at: get(row, "created_at", "a challenge")?,
    })
}

fn phase_from_row(row: &AnyRow) -> Result<Phase, StorageError> {
    let id: String = get(row, "id", "a phase")?;
    let what = format!("phase {id}");
    let corrupt = |msg: String| StorageError::Corrupt(format!("{what}: {msg}"));
    let leaderboard: String = get(row, "leaderboard", &what)?;
    let limit = |column: &str| -> Result<Option<u32>, StorageError> {
        get::<Option<i64>>(row, column, &what)?
            .map(|n| u32::try_from(n).map_err(|_| corrupt(format!("{column} = {n} is out of range"))))
            .transpose()
    };
    let groups: Option<String> = get(row, "observation_groups", &what)?;
    Ok(Phase {
        challenge_id: get(row, "challenge_id", &what)?,
        benchmark: get(row, "benchmark", &what)?,
        starts_at: get(row, "starts_at", &what)?,
        ends_at: get(row, "ends_at", &what)?,
        leaderboard: leaderboard.parse().map_err(|e| corrupt(format!("leaderboard: {e}")))?,
        max_per_day: limit("max_per_day")?,
        max_total: limit("max_total")?,
        observation_groups: groups
            .map(|g| serde_json::from_str(&g).map_err(|e| corrupt(format!("observation_groups {g:?}: {e}"))))
            .transpose()?,
        created_at: get(row, "created_at", &what)?,
        id,
    })
}

fn token_from_row(row: &AnyRow) -> Result<TeamToken, StorageError> {
    Ok(TeamToken {
        id: get(row, "id", "a team token")?,
        team_id: get(row, "team_id", "a team token")?,
        label: get(row, "label", "a team token")?,
        created_at: get(row, "created_at", "a team token")?,
        expires_at: get(row, "expires_at", "a team token")?,
        revoked_at: get(row, "revoked_at", "a team token")?,
    })
}

/// A new token id: names a token without revealing anything about it.
fn new_token_id() -> String {
    let u = uuid::Uuid::new_v4().simple().to_string();
    format!("tok-{}", &u[..16])
}

/// Maps a unique violation on `team_tokens.token_hash` or `teams.token_hash` to a conflict.
fn is_token_conflict(e: &sqlx::Error) -> bool {
    let Some(d) = e.as_database_error() else {
        return false;
    };
    d.is_unique_violation()
        && (d.message().contains("token_hash") || d.constraint().is_some_and(|c| c.contains("token_hash")))
}

fn episode_from_row(row: &AnyRow, submission: &str) -> Result<EpisodeRow, StorageError> {
    let idx: i64 = get(row, "idx", "an episode")?;
    let what = format!("episode {idx} of submission {submission}");
    let corrupt = |msg: String| StorageError::Corrupt(format!("{what}: {msg}"));
    let status: String = get(row, "status", &what)?;
    let seed: String = get(row, "seed", &what)?;
    let metrics_json: Option<String> = get(row, "metrics_json", &what)?;
    Ok(EpisodeRow {
        idx,
        motion: get(row, "motion", &what)?,
        category: get(row, "category", &what)?,
        start_s: get(row, "start_s", &what)?,
        duration_s: get(row, "duration_s", &what)?,
        seed: seed.parse().map_err(|e| corrupt(format!("seed {seed:?}: {e}")))?,
        dr_level: get(row, "dr_level", &what)?,
        status: status.parse().map_err(|e: StorageError| corrupt(e.to_string()))?,
        attempts: get(row, "attempts", &what)?,
        steps: get(row, "steps", &what)?,
        metrics: match metrics_json {
            Some(text) => metrics_from_json(&text).map_err(corrupt)?,
            None => BTreeMap::new(),
        },
        reason: get(row, "reason", &what)?,
        updated_at: get(row, "updated_at", &what)?,
        committed_by: if status_is_final(&status) {
            get(row, "lease_owner", &what)?
        } else {
            None
        },
    })
}

fn status_is_final(status: &str) -> bool {
    status.parse::<EpisodeState>().is_ok_and(|s| s.is_final())
}

/// Opens a pool. A refused connection is retried until [`CONNECT_TIMEOUT`] (the database may be
/// starting, e.g. next to the server in docker compose); the error then says why the last try failed.
async fn pool_connect(options: AnyPoolOptions, url: &str, shown: &str) -> Result<AnyPool, StorageError> {
    // Say at once when nothing listens, rather than waiting out the timeout in silence.
    if let Err(sqlx::Error::Io(e)) = sqlx::AnyConnection::connect(url).await
        && e.kind() == std::io::ErrorKind::ConnectionRefused
    {
        eprintln!("note: {shown} refused the connection ({e}); waiting up to {CONNECT_TIMEOUT:?} for it to start");
    }
    match options.connect(url).await {
        Ok(pool) => Ok(pool),
        Err(sqlx::Error::PoolTimedOut) => {
            let last = match sqlx::AnyConnection::connect(url).await {
                Ok(conn) => {
                    conn.close().await.ok();
                    "none (it answers now)".to_string()
                }
                Err(e) => e.to_string(),
            };
            Err(StorageError::Database {
                context: format!("connecting to {shown} (gave up after {CONNECT_TIMEOUT:?}; last error: {last})"),
                cause: sqlx::Error::PoolTimedOut,
            })
        }
        Err(e) => Err(e).ctx(|| format!("connecting to {shown}")),
    }
}

/// Bumps a leaderboard generation when dropped ([`Storage::leaderboard_generation`]).
struct GenerationBump<'a>(&'a AtomicU64);

impl Drop for GenerationBump<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

/// Handle on the metadata database (cheap to clone: it wraps a connection pool).
#[derive(Debug, Clone)]
pub struct Storage {
    pool: AnyPool,
    engine: Engine,
    /// Bumped by every write that can change a leaderboard (a submission finishing, its summary,
    /// report or baseline flag), so derived views can be cached until it moves. Counts this
    /// process's writes; on PostgreSQL, where replicas share the database, the same writes also
    /// move the `counters` row that [`Storage::leaderboard_generation`] adds in.
    leaderboard_generation: Arc<AtomicU64>,
    /// The claims this handle makes (all clones share it).
    lease: Arc<Lease>,
    /// The episodes this handle claimed and has not committed or given back, by submission:
    /// the ones [`Storage::renew_leases`] renews. An episode dropped from here (a commit given
    /// up on) is no longer renewed, so its lease runs out and it is claimed again.
    held: Arc<std::sync::Mutex<std::collections::HashMap<String, std::collections::BTreeSet<i64>>>>,
}

impl Storage {
    /// The current leaderboard generation ([`Storage`]'s field, plus the shared counter on
    /// PostgreSQL, where other replicas write): read it before reading the rows a cached view is
    /// built from.
    pub async fn leaderboard_generation(&self) -> Result<u64, StorageError> {
        let local = self.leaderboard_generation.load(Ordering::SeqCst);
        if self.engine == Engine::Sqlite {
            return Ok(local);
        }
        let row = sqlx::query("SELECT value FROM counters WHERE name = 'leaderboard'")
            .fetch_one(&self.pool)
            .await
            .ctx(|| "reading the leaderboard generation".to_string())?;
        let shared: i64 = get(&row, "value", "the leaderboard generation")?;
        Ok(local.wrapping_add(shared as u64))
    }

    /// After a write that can change a leaderboard, on PostgreSQL: moves the shared counter so
    /// that other replicas drop their cached boards (SQLite has one server per database).
    async fn bump_shared_generation(&self) -> Result<(), StorageError> {
        if self.engine == Engine::Postgres {
            sqlx::query("UPDATE counters SET value = value + 1 WHERE name = 'leaderboard'")
                .execute(&self.pool)
                .await
                .ctx(|| "moving the leaderboard generation".to_string())?;
        }
        Ok(())
    }

    /// This handle's claims: who holds them and for how long without renewal.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The same database, claiming as `owner` with leases of `duration` (a server sets its replica
    /// id here; tests make two "replicas" on one database this way).
    pub fn with_lease(mut self, owner: impl Into<String>, duration: Duration) -> Self {
        self.lease = Arc::new(Lease {
            owner: owner.into(),
            duration,
        });
        self.held = Default::default();
        self
    }

    /// Bumps the generation when the returned guard drops, at the end of the write: a reader
    /// that read the old generation and then the new rows only caches them under the old one.
    fn leaderboards_changed(&self) -> GenerationBump<'_> {
        GenerationBump(&self.leaderboard_generation)
    }

    /// Opens the database and applies the migrations. `url`: "sqlite://PATH" (file and directory
    /// created if missing; journal_mode=WAL, synchronous=NORMAL, foreign_keys=ON, busy_timeout
    /// 5 s; "sqlite::memory:" keeps one private in-memory database) or "postgres://...".
    pub async fn connect(url: &str) -> Result<Storage, StorageError> {
        sqlx::any::install_default_drivers();
        let shown = redact_url(url);
        let (engine, pool) = if url.starts_with("sqlite:") {
            (Engine::Sqlite, Self::connect_sqlite(url, &shown).await?)
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            let options = AnyPoolOptions::new()
                .max_connections(10)
                .acquire_timeout(CONNECT_TIMEOUT);
            (Engine::Postgres, pool_connect(options, url, &shown).await?)
        } else {
            return Err(StorageError::UnsupportedUrl(shown));
        };
        let migrator = match engine {
            Engine::Sqlite => &SQLITE_MIGRATIONS,
            Engine::Postgres => &POSTGRES_MIGRATIONS,
        };
        migrator
            .run(&pool)
            .await
            .map_err(|cause| StorageError::Migrate { engine, cause })?;
        Ok(Storage {
            pool,
            engine,
            leaderboard_generation: Arc::new(AtomicU64::new(0)),
            lease: Arc::new(Lease::for_this_process()),
            held: Default::default(),
        })
    }

    /// SQLite: one native connection creates the file and switches it to WAL (a persistent
    /// setting); the pooled `Any` connections then get sqlx's defaults (foreign_keys=ON,
    /// busy_timeout 5 s) plus synchronous=NORMAL, which is per connection.
    async fn connect_sqlite(url: &str, shown: &str) -> Result<AnyPool, StorageError> {
        let path = url.trim_start_matches("sqlite:").trim_start_matches("//");
        if path.split('?').next().unwrap_or_default().is_empty() {
            // sqlx would open a private temporary database per connection: no shared schema.
            return Err(StorageError::UnsupportedUrl(format!("{shown} (no file path)")));
        }
        let in_memory = url.contains(":memory:") || url.contains("mode=memory");
        let options = SqliteConnectOptions::from_str(url)
            .ctx(|| format!("parsing the SQLite URL {shown}"))?
            .create_if_missing(true)
            .foreign_keys(true)
            .busy_timeout(Duration::from_secs(5))
            .synchronous(SqliteSynchronous::Normal);
        let mut pool_options = AnyPoolOptions::new()
            .acquire_timeout(CONNECT_TIMEOUT)
            .after_connect(|conn, _meta| {
                Box::pin(async move {
                    conn.execute("PRAGMA synchronous = NORMAL").await?;
                    Ok(())
                })
            });
        if in_memory {
            // Every new connection to ":memory:" would open its own empty database: keep one.
            pool_options = pool_options
                .max_connections(1)
                .min_connections(1)
                .idle_timeout(None)
                .max_lifetime(None);
        } else {
            let path = options.get_filename();
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir).map_err(|cause| StorageError::Io {
                    context: format!("creating the directory {} for the SQLite database", dir.display()),
                    cause,
                })?;
            }
            let conn = options
                .journal_mode(SqliteJournalMode::Wal)
                .connect()
                .await
                .ctx(|| format!("opening {shown} (creating it if missing, WAL journal)"))?;
            conn.close()
                .await
                .ctx(|| format!("closing the set-up connection to {shown}"))?;
            pool_options = pool_options.max_connections(8);
        }
        pool_connect(pool_options, url, shown).await
    }

    /// The engine behind this storage.
    pub fn engine(&self) -> Engine {
        self.engine
    }

    /// Creates a team and its first token (label "initial", no expiry); a duplicate name (or
    /// token) is [`StorageError::Conflict`].
    pub async fn create_team(&self, name: &str, token_hash: &str) -> Result<Team, StorageError> {
        Ok(self.create_team_with(name, &[], token_hash).await?.0)
    }

    /// Creates a team with its members (name, email) and its first token (label "initial", no
    /// expiry), in one transaction; a duplicate name (or token) is [`StorageError::Conflict`].
    pub async fn create_team_with(
        &self,
        name: &str,
        members: &[(String, String)],
        token_hash: &str,
    ) -> Result<(Team, TeamToken), StorageError> {
        let context = || format!("creating team {name:?}");
        let now = now_ms();
        let mut tx = self.pool.begin().await.ctx(context)?;
        // teams.token_hash (schema 0001) is NOT NULL UNIQUE: it keeps the first token's hash,
        // but authentication reads team_tokens only.
        let row = sqlx::query(
            "INSERT INTO teams (name, token_hash, created_at) VALUES ($1, $2, $3) RETURNING id, name, created_at",
        )
        .bind(name)
        .bind(token_hash)
        .bind(now)
        .fetch_one(&mut *tx)
        .await
        .map_err(|e| {
            if is_token_conflict(&e) {
                StorageError::Conflict("a team with this token already exists".to_string())
            } else if is_unique_violation(&e) {
                StorageError::Conflict(format!("team {name:?} already exists"))
            } else {
                StorageError::Database {
                    context: context(),
                    cause: e,
                }
            }
        })?;
        let team = team_from_row(&row)?;
        for (member, email) in members {
            sqlx::query("INSERT INTO team_members (team_id, name, email, created_at) VALUES ($1, $2, $3, $4)")
                .bind(team.id)
                .bind(member)
                .bind(email)
                .bind(now)
                .execute(&mut *tx)
                .await
                .ctx(|| format!("adding member {member:?} to team {name:?}"))?;
        }
        let token = Self::insert_token(&mut tx, team.id, token_hash, "initial", None, now).await?;
        tx.commit().await.ctx(context)?;
        Ok((team, token))
    }

    async fn insert_token(
        conn: &mut sqlx::AnyConnection,
        team_id: i64,
        token_hash: &str,
        label: &str,
        expires_at: Option<i64>,
        now: i64,
    ) -> Result<TeamToken, StorageError> {
        let row = sqlx::query(&format!(
            "INSERT INTO team_tokens (id, team_id, token_hash, label, created_at, expires_at) \
             VALUES ($1, $2, $3, $4, $5, $6) RETURNING {TOKEN_COLUMNS}"
        ))
        .bind(new_token_id())
        .bind(team_id)
        .bind(token_hash)
        .bind(label)
        .bind(now)
        .bind(expires_at)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| {
            if is_token_conflict(&e) {
                StorageError::Conflict("a token with this hash already exists".to_string())
            } else if is_foreign_key_violation(&e) {
                StorageError::NotFound(format!("team {team_id}"))
            } else {
                StorageError::Database {
                    context: format!("creating a token for team {team_id}"),
                    cause: e,
                }
            }
        })?;
        token_from_row(&row)
    }

    /// The token whose hash is `token_hash` and its team, whatever the token's state (revoked,
    /// expired): the caller decides, so that it can say why a token is refused.
    pub async fn token_by_hash(&self, token_hash: &str) -> Result<Option<(Team, TeamToken)>, StorageError> {
        let row = sqlx::query(
            "SELECT k.id, k.team_id, k.label, k.created_at, k.expires_at, k.revoked_at, \
             t.name AS team_name, t.created_at AS team_created_at \
             FROM team_tokens k JOIN teams t ON t.id = k.team_id WHERE k.token_hash = $1",
        )
        .bind(token_hash)
        .fetch_optional(&self.pool)
        .await
        .ctx(|| "looking up a team token".to_string())?;
        let Some(row) = row else { return Ok(None) };
        let token = token_from_row(&row)?;
        let team = Team {
            id: token.team_id,
            name: get(&row, "team_name", "a team")?,
            created_at: get(&row, "team_created_at", "a team")?,
        };
        Ok(Some((team, token)))
    }

    /// Adds a token to a team; an unknown team is [`StorageError::NotFound`].
    pub async fn create_token(
        &self,
        team_id: i64,
        token_hash: &str,
        label: &str,
        expires_at: Option<i64>,
    ) -> Result<TeamToken, StorageError> {
        let mut conn = self
            .pool
            .acquire()
            .await
            .ctx(|| format!("creating a token for team {team_id}"))?;
        Self::insert_token(&mut conn, team_id, token_hash, label, expires_at, now_ms()).await
    }

    /// A team's tokens (metadata only), oldest first.
    pub async fn tokens(&self, team_id: i64) -> Result<Vec<TeamToken>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {TOKEN_COLUMNS} FROM team_tokens WHERE team_id = $1 ORDER BY created_at, id"
        ))
        .bind(team_id)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the tokens of team {team_id}"))?;
        rows.iter().map(token_from_row).collect()
    }

    /// Revokes a team's token at `now` (a token revoked earlier keeps its first time); a token
    /// that is not this team's is [`StorageError::NotFound`].
    pub async fn revoke_token(&self, team_id: i64, token_id: &str, now: i64) -> Result<TeamToken, StorageError> {
        let row = sqlx::query(&format!(
            "UPDATE team_tokens SET revoked_at = COALESCE(revoked_at, $3) WHERE id = $1 AND team_id = $2 \
             RETURNING {TOKEN_COLUMNS}"
        ))
        .bind(token_id)
        .bind(team_id)
        .bind(now)
        .fetch_optional(&self.pool)
        .await
        .ctx(|| format!("revoking token {token_id} of team {team_id}"))?;
        match row {
            Some(row) => token_from_row(&row),
            None => Err(StorageError::NotFound(format!("token {token_id:?} of team {team_id}"))),
        }
    }

    /// One team, if it exists.
    pub async fn team(&self, id: i64) -> Result<Option<Team>, StorageError> {
        let row = sqlx::query("SELECT id, name, created_at FROM teams WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("reading team {id}"))?;
        row.as_ref().map(team_from_row).transpose()
    }

    /// All teams, by id.
    pub async fn teams(&self) -> Result<Vec<Team>, StorageError> {
        let rows = sqlx::query("SELECT id, name, created_at FROM teams ORDER BY id")
            .fetch_all(&self.pool)
            .await
            .ctx(|| "listing teams".to_string())?;
        rows.iter().map(team_from_row).collect()
    }

    /// Adds a member to a team; an unknown team is [`StorageError::NotFound`].
    pub async fn add_member(&self, team_id: i64, name: &str, email: &str) -> Result<Member, StorageError> {
        let now = now_ms();
        sqlx::query("INSERT INTO team_members (team_id, name, email, created_at) VALUES ($1, $2, $3, $4)")
            .bind(team_id)
            .bind(name)
            .bind(email)
            .bind(now)
            .execute(&self.pool)
            .await
            .map_err(|e| {
                if is_foreign_key_violation(&e) {
                    StorageError::NotFound(format!("team {team_id}"))
                } else {
                    StorageError::Database {
                        context: format!("adding member {name:?} to team {team_id}"),
                        cause: e,
                    }
                }
            })?;
        Ok(Member {
            name: name.to_string(),
            email: email.to_string(),
            created_at: now,
        })
    }

    /// A team's members, in the order they were added.
    pub async fn members(&self, team_id: i64) -> Result<Vec<Member>, StorageError> {
        let rows = sqlx::query(
            "SELECT name, email, created_at FROM team_members WHERE team_id = $1 ORDER BY created_at, name",
        )
        .bind(team_id)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the members of team {team_id}"))?;
        let what = format!("a member of team {team_id}");
        rows.iter()
            .map(|row| {
                Ok(Member {
                    name: get(row, "name", &what)?,
                    email: get(row, "email", &what)?,
                    created_at: get(row, "created_at", &what)?,
                })
            })
            .collect()
    }

    /// Creates a challenge; a duplicate id is [`StorageError::Conflict`].
    pub async fn create_challenge(&self, id: &str, title: &str, description: &str) -> Result<Challenge, StorageError> {
        let row = sqlx::query(
            "INSERT INTO challenges (id, title, description, created_at) VALUES ($1, $2, $3, $4) \
             RETURNING id, title, description, created_at",
        )
        .bind(id)
        .bind(title)
        .bind(description)
        .bind(now_ms())
        .fetch_one(&self.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StorageError::Conflict(format!("challenge {id:?} already exists"))
            } else {
                StorageError::Database {
                    context: format!("creating challenge {id:?}"),
                    cause: e,
                }
            }
        })?;
        challenge_from_row(&row)
    }

    /// One challenge, if it exists.
    pub async fn challenge(&self, id: &str) -> Result<Option<Challenge>, StorageError> {
        let row = sqlx::query("SELECT id, title, description, created_at FROM challenges WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("reading challenge {id:?}"))?;
        row.as_ref().map(challenge_from_row).transpose()
    }

    /// All challenges, oldest first.
    pub async fn challenges(&self) -> Result<Vec<Challenge>, StorageError> {
        let rows = sqlx::query("SELECT id, title, description, created_at FROM challenges ORDER BY created_at, id")
            .fetch_all(&self.pool)
            .await
            .ctx(|| "listing challenges".to_string())?;
        rows.iter().map(challenge_from_row).collect()
    }

    /// Stores a new phase as given; a duplicate id is [`StorageError::Conflict`], an unknown
    /// challenge [`StorageError::NotFound`]. Validation is the caller's (see `access`).
    pub async fn create_phase(&self, phase: &Phase) -> Result<Phase, StorageError> {
        let id = &phase.id;
        let groups = phase
            .observation_groups
            .as_ref()
            .map(|g| serde_json::Value::from(g.clone()).to_string());
        sqlx::query(&format!(
            "INSERT INTO phases ({PHASE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
        ))
        .bind(id)
        .bind(&phase.challenge_id)
        .bind(&phase.benchmark)
        .bind(phase.starts_at)
        .bind(phase.ends_at)
        .bind(phase.leaderboard.as_str())
        .bind(phase.max_per_day.map(i64::from))
        .bind(phase.max_total.map(i64::from))
        .bind(groups)
        .bind(phase.created_at)
        .execute(&self.pool)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StorageError::Conflict(format!("phase {id:?} already exists"))
            } else if is_foreign_key_violation(&e) {
                StorageError::NotFound(format!("challenge {:?} (for phase {id:?})", phase.challenge_id))
            } else {
                StorageError::Database {
                    context: format!("creating phase {id:?}"),
                    cause: e,
                }
            }
        })?;
        Ok(phase.clone())
    }

    /// Changes a phase's window, visibility, quotas and observation groups (its id, challenge,
    /// benchmark and creation time stay); a missing phase is [`StorageError::NotFound`].
    pub async fn update_phase(&self, phase: &Phase) -> Result<Phase, StorageError> {
        let id = &phase.id;
        let groups = phase
            .observation_groups
            .as_ref()
            .map(|g| serde_json::Value::from(g.clone()).to_string());
        let done = sqlx::query(
            "UPDATE phases SET starts_at = $2, ends_at = $3, leaderboard = $4, max_per_day = $5, max_total = $6, \
             observation_groups = $7 WHERE id = $1",
        )
        .bind(id)
        .bind(phase.starts_at)
        .bind(phase.ends_at)
        .bind(phase.leaderboard.as_str())
        .bind(phase.max_per_day.map(i64::from))
        .bind(phase.max_total.map(i64::from))
        .bind(groups)
        .execute(&self.pool)
        .await
        .ctx(|| format!("updating phase {id:?}"))?;
        if done.rows_affected() == 0 {
            return Err(StorageError::NotFound(format!("phase {id:?}")));
        }
        self.phase(id)
            .await?
            .ok_or_else(|| StorageError::NotFound(format!("phase {id:?}")))
    }

    /// One phase, if it exists.
    pub async fn phase(&self, id: &str) -> Result<Option<Phase>, StorageError> {
        let row = sqlx::query(&format!("SELECT {PHASE_COLUMNS} FROM phases WHERE id = $1"))
            .bind(id)
            .fetch_optional(&self.pool)
            .await
            .ctx(|| format!("reading phase {id:?}"))?;
        row.as_ref().map(phase_from_row).transpose()
    }

    /// The phases of a challenge, by start time.
    pub async fn phases_of_challenge(&self, challenge_id: &str) -> Result<Vec<Phase>, StorageError> {
        self.phases_where("challenge_id", challenge_id).await
    }

    /// The phases that run a benchmark, by start time.
    pub async fn phases_of_benchmark(&self, benchmark: &str) -> Result<Vec<Phase>, StorageError> {
        self.phases_where("benchmark", benchmark).await
    }

    /// The phases whose `column` (a fixed column name, never user input) equals `value`.
    async fn phases_where(&self, column: &'static str, value: &str) -> Result<Vec<Phase>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {PHASE_COLUMNS} FROM phases WHERE {column} = $1 ORDER BY starts_at, id"
        ))
        .bind(value)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the phases with {column} {value:?}"))?;
        rows.iter().map(phase_from_row).collect()
    }

    /// Inserts the submission (status PENDING) and all its episodes (PENDING, attempts 0) in ONE
    /// transaction; a duplicate id is [`StorageError::Conflict`], an unknown team
    /// [`StorageError::NotFound`], duplicate episode indices [`StorageError::Invalid`].
    pub async fn create_submission(
        &self,
        sub: &NewSubmission,
        episodes: &[NewEpisode],
    ) -> Result<Submission, StorageError> {
        self.create_submission_within(sub, episodes, None).await
    }

    /// [`Storage::create_submission`], refused with [`StorageError::QuotaExceeded`] (nothing
    /// stored) when the team already has `quota.max_total` submissions in the phase, or
    /// `quota.max_per_day` created since `quota.day_start`. The total limit is checked first
    /// (it never resets). The count and the insert share one transaction that first locks the
    /// team's row (PostgreSQL: a row lock; SQLite: the database write lock), so concurrent
    /// requests of one team are counted one after the other and cannot exceed the quota.
    pub async fn create_submission_within(
        &self,
        sub: &NewSubmission,
        episodes: &[NewEpisode],
        quota: Option<&Quota<'_>>,
    ) -> Result<Submission, StorageError> {
        let id = &sub.id;
        let mut seen = HashSet::with_capacity(episodes.len());
        if let Some(e) = episodes.iter().find(|e| !seen.insert(e.idx)) {
            return Err(StorageError::Invalid(format!(
                "submission {id}: episode index {} appears twice",
                e.idx
            )));
        }
        let context = || format!("creating submission {id}");
        let now = now_ms();
        let mut tx = self.pool.begin().await.ctx(context)?;
        if let Some(quota) = quota {
            // A write first: it serialises this team's submissions until the commit.
            sqlx::query("UPDATE teams SET name = name WHERE id = $1")
                .bind(sub.team_id)
                .execute(&mut *tx)
                .await
                .ctx(context)?;
            let row = sqlx::query(
                "SELECT COUNT(*) AS total, COALESCE(SUM(CASE WHEN created_at >= $3 THEN 1 ELSE 0 END), 0) AS today \
                 FROM submissions WHERE team_id = $1 AND phase_id = $2",
            )
            .bind(sub.team_id)
            .bind(quota.phase_id)
            .bind(quota.day_start)
            .fetch_one(&mut *tx)
            .await
            .ctx(|| {
                format!(
                    "counting the submissions of team {} in phase {}",
                    sub.team_id, quota.phase_id
                )
            })?;
            let what = format!("submission counts of team {}", sub.team_id);
            let total: i64 = get(&row, "total", &what)?;
            let today: i64 = get(&row, "today", &what)?;
            let over = |limit: Option<u32>, used: i64| limit.filter(|&l| used >= i64::from(l));
            if let Some(limit) = over(quota.max_total, total) {
                return Err(StorageError::QuotaExceeded {
                    limit,
                    used: total,
                    daily: false,
                });
            }
            if let Some(limit) = over(quota.max_per_day, today) {
                return Err(StorageError::QuotaExceeded {
                    limit,
                    used: today,
                    daily: true,
                });
            }
        }
        sqlx::query(
            "INSERT INTO submissions (id, team_id, benchmark, agent_name, status, episodes_total, created_at, phase_id) \
             VALUES ($1, $2, $3, $4, 'PENDING', $5, $6, $7)",
        )
        .bind(id)
        .bind(sub.team_id)
        .bind(&sub.benchmark)
        .bind(&sub.agent_name)
        .bind(episodes.len() as i64)
        .bind(now)
        .bind(sub.phase_id.as_deref())
        .execute(&mut *tx)
        .await
        .map_err(|e| {
            if is_unique_violation(&e) {
                StorageError::Conflict(format!("submission {id} already exists"))
            } else if is_foreign_key_violation(&e) {
                let phase = sub.phase_id.as_deref().map(|p| format!(" or phase {p:?}")).unwrap_or_default();
                StorageError::NotFound(format!("team {}{phase} (for submission {id})", sub.team_id))
            } else {
                StorageError::Database {
                    context: context(),
                    cause: e,
                }
            }
        })?;
        for chunk in episodes.chunks(INSERT_CHUNK) {
            let mut sql = String::from(
                "INSERT INTO episodes (submission_id, idx, motion, category, start_s, duration_s, seed, dr_level, \
                 status, attempts, steps, updated_at) VALUES ",
            );
            for i in 0..chunk.len() {
                let p = i * 9;
                if i > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!(
                    "(${}, ${}, ${}, ${}, ${}, ${}, ${}, ${}, 'PENDING', 0, 0, ${})",
                    p + 1,
                    p + 2,
                    p + 3,
                    p + 4,
                    p + 5,
                    p + 6,
                    p + 7,
                    p + 8,
                    p + 9
                ));
            }
            let mut query = sqlx::query(&sql);
            for e in chunk {
                query = query
                    .bind(id)
                    .bind(e.idx)
                    .bind(&e.motion)
                    .bind(&e.category)
                    .bind(e.start_s)
                    .bind(e.duration_s)
                    .bind(e.seed.to_string())
                    .bind(e.dr_level)
                    .bind(now);
            }
            query
                .execute(&mut *tx)
                .await
                .ctx(|| format!("creating the episodes of submission {id}"))?;
        }
        let row = sqlx::query(&format!(
            "SELECT {SUBMISSION_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id WHERE s.id = $1"
        ))
        .bind(id)
        .fetch_one(&mut *tx)
        .await
        .ctx(context)?;
        let submission = submission_from_row(&row)?;
        tx.commit().await.ctx(context)?;
        Ok(submission)
    }

    /// One submission, if it exists.
    pub async fn submission(&self, id: &str) -> Result<Option<Submission>, StorageError> {
        let row = sqlx::query(&format!(
            "SELECT {SUBMISSION_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id WHERE s.id = $1"
        ))
        .bind(id)
        .fetch_optional(&self.pool)
        .await
        .ctx(|| format!("reading submission {id}"))?;
        row.as_ref().map(submission_from_row).transpose()
    }

    /// Submissions, newest first; `team` keeps only that team's.
    pub async fn submissions(&self, team: Option<i64>) -> Result<Vec<Submission>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {SUBMISSION_LIST_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id \
             WHERE ($1 IS NULL OR s.team_id = $1) ORDER BY s.created_at DESC, s.id DESC"
        ))
        .bind(team)
        .fetch_all(&self.pool)
        .await
        .ctx(|| match team {
            Some(team) => format!("listing the submissions of team {team}"),
            None => "listing submissions".to_string(),
        })?;
        rows.iter().map(submission_from_row).collect()
    }

    /// COMPLETED submissions of a benchmark (for leaderboards), oldest first.
    pub async fn completed_submissions(&self, benchmark: &str) -> Result<Vec<Submission>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {SUBMISSION_LIST_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id \
             WHERE s.benchmark = $1 AND s.status = 'COMPLETED' ORDER BY s.finished_at, s.id"
        ))
        .bind(benchmark)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the completed submissions of benchmark {benchmark:?}"))?;
        rows.iter().map(submission_from_row).collect()
    }

    /// What a leaderboard reads of each COMPLETED submission of a benchmark (`phase`: of that
    /// phase), as one JSON array built by the database: `[{"id", "team_name", "agent_name",
    /// "finished_at", "baseline" (0/1), "phase_id", "summary" (object or null)}]`, in no
    /// particular order. One row instead of thousands: decoding rows one by one through the
    /// driver costs far more than the JSON.
    pub async fn leaderboard_json(&self, benchmark: &str, phase: Option<&str>) -> Result<String, StorageError> {
        let sql = match self.engine {
            Engine::Sqlite => {
                "SELECT COALESCE(json_group_array(json_object('id', s.id, 'team_name', t.name, \
                 'agent_name', s.agent_name, 'finished_at', s.finished_at, 'baseline', s.baseline, \
                 'phase_id', s.phase_id, 'summary', json(s.summary_json))), '[]') AS board \
                 FROM submissions s JOIN teams t ON t.id = s.team_id \
                 WHERE s.benchmark = $1 AND s.status = 'COMPLETED' AND ($2 IS NULL OR s.phase_id = $2)"
            }
            Engine::Postgres => {
                "SELECT COALESCE(json_agg(json_build_object('id', s.id, 'team_name', t.name, \
                 'agent_name', s.agent_name, 'finished_at', s.finished_at, 'baseline', s.baseline, \
                 'phase_id', s.phase_id, 'summary', s.summary_json::json)), '[]'::json)::text AS board \
                 FROM submissions s JOIN teams t ON t.id = s.team_id \
                 WHERE s.benchmark = $1 AND s.status = 'COMPLETED' AND ($2::text IS NULL OR s.phase_id = $2)"
            }
        };
        let row = sqlx::query(sql)
            .bind(benchmark)
            .bind(phase)
            .fetch_one(&self.pool)
            .await
            .ctx(|| format!("reading the leaderboard rows of benchmark {benchmark:?}"))?;
        get(&row, "board", "a leaderboard")
    }

    /// COMPLETED submissions of a phase (for its leaderboard), oldest first.
    pub async fn completed_submissions_of_phase(&self, phase_id: &str) -> Result<Vec<Submission>, StorageError> {
        let rows = sqlx::query(&format!(
            "SELECT {SUBMISSION_LIST_COLUMNS} FROM submissions s JOIN teams t ON t.id = s.team_id \
             WHERE s.phase_id = $1 AND s.status = 'COMPLETED' ORDER BY s.finished_at, s.id"
        ))
        .bind(phase_id)
        .fetch_all(&self.pool)
        .await
        .ctx(|| format!("listing the completed submissions of phase {phase_id:?}"))?;
        rows.iter().map(submission_from_row).collect()
    }

    /// Explains why a guarded submission update changed nothing: missing, or already final.
    async fn submission_not_open(&self, id: &str, action: &str) -> StorageError {
        match self.submission(id).await {
            Ok(Some(s)) => {
                StorageError::Conflict(format!("cannot {action} submission {id}: it is already {}", s.status))
            }
            Ok(None) => StorageError::NotFound(format!("submission {id}")),
            Err(e) => e,
        }
    }

    /// Sets RUNNING (and started_at if unset); a COMPLETED or FAILED submission is a
    /// [`StorageError::Conflict`], a missing one [`StorageError::NotFound`].
    pub async fn mark_submission_running(&self, id: &str) -> Result<(), StorageError> {
        let done = sqlx::query(
            "UPDATE submissions SET status = 'RUNNING', started_at = COALESCE(started_at, $2) \
             WHERE id = $1 AND status IN ('PENDING', 'RUNNING')",
        )
        .bind(id)
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .ctx(|| format!("marking submission {id} running"))?;
        if done.rows_affected() == 0 {
            return Err(self.submission_not_open(id, "start").await);
        }
        Ok(())
    }

    /// Sets COMPLETED (or FAILED with `error`), finished_at, and the report JSON. Only a PENDING or
    /// RUNNING submission can finish ([`StorageError::Conflict`] otherwise).
    pub async fn finish_submission(
        &self,
        id: &str,
        status: SubmissionStatus,
        report_json: Option<&str>,
        error: Option<&str>,
    ) -> Result<(), StorageError> {
        let _changed = self.leaderboards_changed();
        if !status.is_final() {
            return Err(StorageError::Invalid(format!(
                "finishing submission {id} with status {status} (expected COMPLETED or FAILED)"
            )));
        }
        let done = sqlx::query(
            "UPDATE submissions SET status = $2, finished_at = $3, report_json = $4, error = $5 \
             WHERE id = $1 AND status IN ('PENDING', 'RUNNING')",
        )
        .bind(id)
        .bind(status.as_str())
        .bind(now_ms())
        .bind(report_json)
        .bind(error)
        .execute(&self.pool)
        .await
        .ctx(|| format!("finishing submission {id} as {status}"))?;
        if done.rows_affected() == 0 {
            return Err(self.submission_not_open(id, "finish").await);
        }
        self.bump_shared_generation().await
    }

    /// Marks (or unmarks) a submission as a baseline; false if it does not exist.
    pub async fn set_baseline(&self, id: &str, baseline: bool) -> Result<bool, StorageError> {
        let _changed = self.leaderboards_changed();
        let done = sqlx::query("UPDATE submissions SET baseline = $2 WHERE id = $1")
            .bind(id)
            .bind(i64::from(baseline))
            .execute(&self.pool)
            .await
            .ctx(|| format!("marking submission {id} as baseline = {baseline}"))?;
        self.bump_shared_generation().await?;
        Ok(done.rows_affected() > 0)
    }

    /// An organiser's cancel: a PENDING or RUNNING submission becomes FAILED with `reason`, and
    /// its unfinished episodes FAILED with the same reason (results still in flight are then not
    /// counted: `finish_episode` only moves RUNNING episodes). One transaction;
    /// [`StorageError::Conflict`] for a finished submission, [`StorageError::NotFound`] for none.
    pub async fn cancel_submission(&self, id: &str, reason: &str) -> Result<(), StorageError> {
        let _changed = self.leaderboards_changed();
        let context = || format!("cancelling submission {id}");
        let mut tx = self.pool.begin().await.ctx(context)?;
        let now = now_ms();
        let done = sqlx::query(
            "UPDATE submissions SET status = 'FAILED', finished_at = $2, error = $3 \
             WHERE id = $1 AND status IN ('PENDING', 'RUNNING')",
        )
        .bind(id)
        .bind(now)
        .bind(reason)
        .execute(&mut *tx)
        .await
        .ctx(context)?;
        if done.rows_affected() == 0 {
            drop(tx);
            return Err(self.submission_not_open(id, "cancel").await);
        }
        sqlx::query(
            "UPDATE episodes SET status = 'FAILED', reason = $2, updated_at = $3, \
             lease_owner = NULL, lease_expires_at = NULL \
             WHERE submission_id = $1 AND status IN ('PENDING', 'RUNNING')",
        )
        .bind(id)
        .bind(reason)
        .bind(now)
        .execute(&mut *tx)
        .await
        .ctx(context)?;
        tx.commit().await.ctx(context)?;
        self.bump_shared_generation().await
    }

    /// Replaces the metrics of a final episode (a re-score from its stored trajectory).
    pub async fn set_episode_metrics(
        &self,
        submission: &str,
        idx: i64,
        metrics: &BTreeMap<String, f64>,
    ) -> Result<bool, StorageError> {
        let done = sqlx::query(
            "UPDATE episodes SET metrics_json = $3, updated_at = $4 \
             WHERE submission_id = $1 AND idx = $2 AND status IN ('COMPLETED', 'FELL')",
        )
        .bind(submission)
        .bind(idx)
        .bind(metrics_to_json(metrics))
        .bind(now_ms())
        .execute(&self.pool)
        .await
        .ctx(|| format!("re-scoring episode {idx} of submission {submission}"))?;
        Ok(done.rows_affected() > 0)
    }

    /// Sets the leaderboard summary of a submission (with its report, or filled in later).
    pub async fn set_summary(&self, id: &str, summary_json: &str) -> Result<(), StorageError> {
        let _changed = self.leaderboards_changed();
        sqlx::query("UPDATE submissions SET summary_json = $2 WHERE id = $1")
            .bind(id)
            .bind(summary_json)
            .execute(&self.pool)
            .await
            .ctx(|| format!("storing the summary of submission {id}"))?;
        self.bump_shared_generation().await
    }

    /// COMPLETED submissions that have a report but no summary yet (stored by an older version),
    /// as (id, report JSON).
    pub async fn reports_without_summary(&self) -> Result<Vec<(String, String)>, StorageError> {
        let rows = sqlx::query(
            "SELECT id, report_json FROM submissions \
             WHERE status = 'COMPLETED' AND summary_json IS NULL AND report_json IS NOT NULL",
        )
        .fetch_all(&self.pool)
        .await
        .ctx(|| "listing the reports without a summary".to_string())?;
        rows.iter()
            .map(|r| Ok((get(r, "id", "a submission")?, get(r, "report_json", "a submission")?)))
            .collect()
    }

    /// Replaces the report of a COMPLETED submission (after a re-score).
    pub async fn replace_report(&self, id: &str, report_json: &str) -> Result<(), StorageError> {
        let _changed = self.leaderboards_changed();
        let done = sqlx::query("UPDATE submissions SET report_json = $2 WHERE id = $1 AND status = 'COMPLETED'")
            .bind(id)
            .bind(report_json)
            .execute(&self.pool)
            .await
            .ctx(|| format!("replacing the report of submission {id}"))?;
        if done.rows_affected() == 0 {
            return Err(StorageError::Conflict(format!("submission {id} is not COMPLETED")));
        }
        self.bump_shared_generation().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metrics_keep_non_finite_values() {
        let metrics: BTreeMap<String, f64> = [
            ("a".into(), 1.5),
            ("b".into(), f64::NAN),
            ("c".into(), f64::INFINITY),
            ("d".into(), f64::NEG_INFINITY),
        ]
        .into_iter()
        .collect();
        let back = metrics_from_json(&metrics_to_json(&metrics)).unwrap();
        assert_eq!(back["a"], 1.5);
        assert!(back["b"].is_nan());
        assert_eq!(back["c"], f64::INFINITY);
        assert_eq!(back["d"], f64::NEG_INFINITY);
        assert!(metrics_from_json(r#"{"x": null}"#).unwrap()["x"].is_nan());
        assert!(metrics_from_json(r#"{"x": "oops"}"#).is_err());
    }

    #[test]
    fn urls_lose_their_password() {
        assert_eq!(
            redact_url("postgres://u:secret@h:5432/db"),
            "postgres://u:***@h:5432/db"
        );
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("sqlite://a/b.db"), "sqlite://a/b.db");
    }

    #[test]
    fn statuses_round_trip() {
        for s in [
            SubmissionStatus::Pending,
            SubmissionStatus::Running,
            SubmissionStatus::Completed,
            SubmissionStatus::Failed,
        ] {
            assert_eq!(s.as_str().parse::<SubmissionStatus>().unwrap(), s);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.as_str()));
        }
        for s in [
            EpisodeState::Pending,
            EpisodeState::Running,
            EpisodeState::Completed,
            EpisodeState::Fell,
            EpisodeState::Failed,
            EpisodeState::Timeout,
        ] {
            assert_eq!(s.as_str().parse::<EpisodeState>().unwrap(), s);
            assert_eq!(serde_json::to_string(&s).unwrap(), format!("\"{}\"", s.as_str()));
        }
        assert_eq!(serde_json::to_string(&Engine::Postgres).unwrap(), "\"postgres\"");
        assert_eq!(hash_token("abc").len(), 64);
    }

    #[test]
    fn a_database_error_reads_once_whoever_prints_it() {
        let e = StorageError::Database {
            context: "reading the teams".into(),
            cause: sqlx::Error::PoolTimedOut,
        };
        let cause = sqlx::Error::PoolTimedOut.to_string();
        for text in [e.to_string(), format!("{:#}", anyhow::Error::from(e))] {
            assert_eq!(text.matches(&cause).count(), 1, "{text}");
            assert!(text.starts_with("database: reading the teams: "), "{text}");
        }
    }
}
