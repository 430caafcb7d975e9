//! The records the storage layer reads and writes: teams, tokens, members, challenges, phases,
//! submissions and episodes, with their states and the text forms stored in the database.

use super::*;

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
    /// The benchmark file's `version` it is created under.
    pub benchmark_version: u32,
    /// What that version defines (`LoadedBenchmark::definition`): the first submission of a
    /// version records it, and one under the same version with another is refused
    /// ([`StorageError::BenchmarkChanged`]). `None` checks nothing.
    pub benchmark_definition: Option<String>,
    /// The key of the connect that creates it (`Connect.connect_key`), recorded in the same
    /// transaction: a second submission of the team under one key is
    /// [`StorageError::ConnectKeyTaken`]. `None` for submissions made otherwise.
    #[serde(default)]
    pub connect_key: Option<String>,
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
    /// The benchmark file's `version` it was created under (None: created before versions
    /// were stored; taken as the current one). Leaderboards rank only the current version's.
    pub benchmark_version: Option<i64>,
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

fn seed_as_string<S: serde::Serializer>(seed: &u64, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(seed)
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
    /// Simulation seed. In JSON a decimal string: a u64 exceeds the 2^53 that JavaScript
    /// numbers (the pages) hold exactly.
    #[serde(serialize_with = "seed_as_string")]
    pub seed: u64,
    /// Domain-randomisation level.
    pub dr_level: i64,
    /// Current state.
    pub status: EpisodeState,
    /// How many times it was started (the latest run's number).
    pub attempts: i64,
    /// How many of those runs the server lost by a fault (its crash, a lane's error, a failed
    /// store, another replica's expired lease): not charged to the agent, and capped at
    /// [`crate::storage::MAX_SERVER_FAULTS`].
    pub server_faults: i64,
    /// How many of those runs were charged to nobody and not capped: claims that never
    /// started, runs a server told to stop gave back. The agent's attempts are `attempts -
    /// server_faults - uncharged_runs`.
    pub uncharged_runs: i64,
    /// Control steps run (final states only).
    pub steps: i64,
    /// Metric values (final states only; may hold NaN).
    pub metrics: BTreeMap<String, f64>,
    /// Why it ended as it did (or why it was last requeued).
    pub reason: Option<String>,
    /// Last change, unix milliseconds.
    pub updated_at: i64,
    /// The agent (`connect.agent_name`) of the session that last ran it; None if never run.
    pub agent_name: Option<String>,
    /// The physics engine that ran its committed run ("cpu (MuJoCo 3.17.0)", "gpu (…)"); None
    /// for an episode not final, given up on without a run, or committed before engines were
    /// recorded.
    pub engine: Option<String>,
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
    /// The physics engine that ran it, as the simulator describes itself
    /// (`Handler::describe`: "cpu (MuJoCo 3.17.0)").
    #[serde(default)]
    pub engine: Option<String>,
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
    /// Hosted submissions only (issue 40): no agent of a participant's runs in the phase (no
    /// remote session, no practice), so its motions are never streamed out.
    #[serde(default)]
    pub hosted_only: bool,
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
