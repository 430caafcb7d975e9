//! Access policy, shared by the REST API and the agent gateway: which team a token belongs to
//! (and why a token is refused), what a team may run (a phase's window, its benchmark, practice),
//! submission quotas, and who may see results. Every refusal is an [`AccessError`]: an HTTP
//! status, a stable code (the same in REST bodies and protocol Errors) and a message that says
//! what was wrong and, where it applies, when that changes. Tokens are never part of a message;
//! a token is named by its id (`tok-…`).

use crate::catalog::LoadedBenchmark;
use crate::storage::{NewEpisode, NewSubmission, Phase, Quota, Storage, StorageError, Submission, Team, Visibility};
use arena_bench::spec::BenchmarkSpec;
use arena_sdk::layout::{REFERENCE_GOAL_GROUP, REFERENCE_GROUP};
use arena_sdk::protocol::{self, codes};
use axum::http::StatusCode;
use std::collections::HashMap;
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, UNIX_EPOCH};

/// One UTC day in milliseconds: per-day quotas reset at UTC midnight.
pub const DAY_MS: i64 = 86_400_000;

/// REST-only code: results or a leaderboard of a private phase before it ends.
pub const HIDDEN: &str = "hidden";

/// A refused request. `code` is one of the protocol's [`codes`] (or [`HIDDEN`], or the REST
/// API's `bad_request` / `not_found`); `limit` and `resets_at_ms` are set for `quota_exceeded`
/// (`resets_at_ms` is `None` for a limit that never resets).
///
/// Deliberately not a `std::error::Error`: it is an answer to send, not a failure to propagate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    pub limit: Option<u32>,
    pub resets_at_ms: Option<i64>,
}

impl fmt::Display for AccessError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code, self.message)
    }
}

impl AccessError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Self {
            status,
            code,
            message: message.into(),
            limit: None,
            resets_at_ms: None,
        }
    }

    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, codes::UNAUTHORIZED, message)
    }

    pub fn forbidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, codes::FORBIDDEN, message)
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "bad_request", message)
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, "not_found", message)
    }

    pub fn hidden(message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, HIDDEN, message)
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, codes::INTERNAL, message)
    }

    /// The protocol Error carrying this refusal. REST-only codes become their protocol
    /// equivalents (`bad_request` → `invalid_message`).
    pub fn to_protocol(&self) -> protocol::Error {
        let code = match self.code {
            "bad_request" => codes::INVALID_MESSAGE,
            other => other,
        };
        protocol::Error {
            code: code.into(),
            message: protocol::clip_message(self.message.clone()),
            step: 0,
            limit: self.limit.unwrap_or(0),
            resets_at: self.resets_at_ms.map(rfc3339).unwrap_or_default(),
            ..Default::default()
        }
    }
}

impl From<StorageError> for AccessError {
    /// The details (the database's own message, table names) go to the log only.
    fn from(e: StorageError) -> Self {
        tracing::error!("storage: {e}");
        Self::internal("the server's database failed (the server's log has the details)")
    }
}

/// The last millisecond RFC 3339's four-digit years can write: 9999-12-31T23:59:59.999Z.
pub const MAX_TIME_MS: i64 = 253_402_300_799_999;

/// `ms` if [`rfc3339`] can write it (1970 to the end of 9999), else why not.
pub fn check_time_ms(ms: i64) -> Result<i64, String> {
    if (0..=MAX_TIME_MS).contains(&ms) {
        Ok(ms)
    } else {
        Err(format!(
            "expected a time from 1970-01-01 to 9999-12-31 (unix milliseconds 0-{MAX_TIME_MS}), got {ms}"
        ))
    }
}

/// A time given as unix milliseconds: as [`check_time_ms`], and one before 1973 (other than 0,
/// "since always") is refused as a time in seconds (`date +%s`), which made a phase of 1970 in
/// silence (closed, and phases are never deleted) or a dataset of everything.
pub fn check_given_ms(ms: i64) -> Result<i64, String> {
    if (1..100_000_000_000).contains(&ms) {
        return Err(format!(
            "{ms} reads as {} in unix milliseconds: give milliseconds (seconds × 1000) or an RFC 3339 time",
            rfc3339(ms)
        ));
    }
    check_time_ms(ms)
}

/// Unix milliseconds as RFC 3339 UTC, to the second (e.g. `2026-05-01T00:00:00Z`). Times
/// outside [`check_time_ms`]'s range, which input checks refuse, are written as its nearest end
/// rather than panicking in humantime.
pub fn rfc3339(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.clamp(0, MAX_TIME_MS) as u64);
    humantime::format_rfc3339_seconds(t).to_string()
}

/// As [`rfc3339`], with the milliseconds where the time has any (`2026-05-01T00:00:00.250Z`):
/// for times that select data by the millisecond (a dataset card's `since`, `until` and the
/// submission times beside them), so that pasting them back selects the same.
pub fn rfc3339_exact(ms: i64) -> String {
    let t = UNIX_EPOCH + Duration::from_millis(ms.clamp(0, MAX_TIME_MS) as u64);
    match ms.clamp(0, MAX_TIME_MS).rem_euclid(1000) {
        0 => humantime::format_rfc3339_seconds(t).to_string(),
        _ => humantime::format_rfc3339_millis(t).to_string(),
    }
}

/// Parses an RFC 3339 time (`2026-05-01T00:00:00Z`, fractional seconds allowed; a numeric
/// offset such as `+02:00` is converted to UTC) into unix milliseconds.
pub fn parse_rfc3339(text: &str) -> Result<i64, String> {
    // RFC 3339 takes `t` and `z` in lower case, and a space for the `T` (its §5.6 note).
    let mut trimmed = text.trim().to_ascii_uppercase();
    if trimmed.as_bytes().get(10) == Some(&b' ') {
        trimmed.replace_range(10..11, "T");
    }
    let trimmed = trimmed.as_str();
    let (utc_text, offset_ms) = match split_utc_offset(trimmed) {
        Some((local, offset_ms)) => (format!("{local}Z"), offset_ms),
        None => (trimmed.to_string(), 0),
    };
    let t = humantime::parse_rfc3339(&utc_text).map_err(|e| {
        // Only a time that would parse with an offset lacks one ("tomorrow" is no time at all).
        let no_offset = humantime::parse_rfc3339(&format!("{trimmed}Z")).is_ok();
        match no_offset {
            true => format!("{text:?} has no offset: add Z for UTC, or one such as +02:00"),
            false => format!("expected an RFC 3339 time such as \"2026-05-01T00:00:00Z\", got {text:?} ({e})"),
        }
    })?;
    let ms = t
        .duration_since(UNIX_EPOCH)
        .map_err(|_| format!("{text:?} is before 1970"))?
        .as_millis();
    let ms = i64::try_from(ms).map_err(|_| format!("{text:?} is too far in the future"))? - offset_ms;
    if ms < 0 {
        return Err(format!("{text:?} is before 1970"));
    }
    // A negative offset can carry the last day of 9999 into year 10000.
    if ms > MAX_TIME_MS {
        return Err(format!("{text:?} is after 9999-12-31 (UTC)"));
    }
    Ok(ms)
}

/// `2026-05-01T14:00:00+02:00` → (`2026-05-01T14:00:00`, +2 h in ms); None without an offset.
fn split_utc_offset(text: &str) -> Option<(&str, i64)> {
    let (local, offset) = text.split_at_checked(text.len().checked_sub(6)?)?;
    let bytes = offset.as_bytes();
    let sign = match bytes[0] {
        b'+' => 1,
        b'-' => -1,
        _ => return None,
    };
    if !local.contains('T') || bytes[3] != b':' {
        return None;
    }
    let hours: i64 = offset.get(1..3)?.parse().ok()?;
    let minutes: i64 = offset.get(4..6)?.parse().ok()?;
    if hours > 23 || minutes > 59 {
        return None;
    }
    Some((local, sign * (hours * 60 + minutes) * 60_000))
}

/// Start of the UTC day containing `now_ms`.
pub fn day_start(now_ms: i64) -> i64 {
    now_ms - now_ms.rem_euclid(DAY_MS)
}

/// The team a token belongs to, if the token is valid now. Unknown, revoked and expired tokens
/// are `unauthorized`, each with its own message (naming the token's id, never the token).
pub async fn authenticate(storage: &Storage, token: &str, now_ms: i64) -> Result<Team, AccessError> {
    if token.is_empty() {
        return Err(AccessError::unauthorized("a team token is required"));
    }
    let Some((team, info)) = storage.token_by_hash(&crate::storage::hash_token(token)).await? else {
        return Err(AccessError::unauthorized("unknown token"));
    };
    let name = || match info.label.as_str() {
        "" => format!("token {} of team {:?}", info.id, team.name),
        label => format!("token {} ({label:?}) of team {:?}", info.id, team.name),
    };
    if let Some(at) = info.revoked_at {
        return Err(AccessError::unauthorized(format!(
            "{} was revoked at {}",
            name(),
            rfc3339(at)
        )));
    }
    if let Some(at) = info.expires_at.filter(|&at| at <= now_ms) {
        return Err(AccessError::unauthorized(format!(
            "{} expired at {}",
            name(),
            rfc3339_exact(at)
        )));
    }
    Ok(team)
}

/// Where a phase stands at a given time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PhaseState {
    Upcoming,
    Open,
    Closed,
}

impl PhaseState {
    pub fn of(phase: &Phase, now_ms: i64) -> Self {
        if now_ms < phase.starts_at {
            Self::Upcoming
        } else if now_ms < phase.ends_at {
            Self::Open
        } else {
            Self::Closed
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Upcoming => "upcoming",
            Self::Open => "open",
            Self::Closed => "closed",
        }
    }
}

/// Whether a phase's results (leaderboard, per-episode results, reports, trajectories) are
/// hidden from teams now: a private phase until it ends. The administrator always sees them.
pub fn results_hidden(phase: &Phase, now_ms: i64) -> bool {
    phase.leaderboard == Visibility::Private && now_ms < phase.ends_at
}

/// What a team may learn of why its own episode ended while its phase hides results, or on a
/// hidden test set: the kind of failure, without steps, values, motions or times (a reason
/// names the step, the joint and its value, which a hidden test set must not give away), so a
/// team can still fix its agent.
pub fn failure_kind(reason: &str) -> &'static str {
    const KINDS: [(&str, &str); 14] = [
        ("after the episode had broken", "a fall, after which the agent erred"),
        // The submission's own end, the same words for each of its unfinished episodes.
        ("cancelled", "the submission was cancelled"),
        (
            "abandoned: no agent ran it",
            "the submission was abandoned (no agent ran it)",
        ),
        ("could not serve this session", "the agent could not serve the session"),
        ("the hosted policy", "the hosted policy could not run or failed"),
        ("(server fault", "the server lost its runs too often"),
        (
            "action out of range",
            "an action out of range (a target far outside a joint's range)",
        ),
        ("non-finite action", "a non-finite action (NaN or infinity)"),
        ("values, expected", "an action of the wrong size"),
        ("two actions for episode", "two actions for one episode in one step"),
        ("no action for episode", "no action for the episode in a step's answer"),
        ("no Action for GetAction", "no action within the step deadline"),
        ("connection lost", "the agent's connection was lost too often"),
        ("simulator", "a simulator failure"),
    ];
    // The agent's own words in a reason are not the server's: they name no kind.
    let reason = reason.split(crate::orchestrator::AGENT_SAID).next().unwrap_or(reason);
    KINDS.iter().find(|(pattern, _)| reason.contains(pattern)).map_or(
        "an error (its details are withheld while the results or motions are hidden)",
        |(_, kind)| kind,
    )
}

/// What a Connect or a REST submission asks to run.
#[derive(Debug, Clone, Copy)]
pub struct RunRequest<'a> {
    /// Benchmark name; may be empty when a phase is given.
    pub benchmark: &'a str,
    /// Phase id; empty for none.
    pub phase: &'a str,
    pub practice: bool,
    /// The server runs it itself (an uploaded policy), rather than a participant's agent.
    pub hosted: bool,
    /// The run of a submission that was accepted inside its phase's window and whose start is
    /// the server's to choose (a hosted upload waiting for a place): it runs even once the
    /// window has closed, as a team's queued upload should.
    pub accepted_in_window: bool,
    /// A resumed submission's agent sessions so far, (started, ended) in unix ms (`None`: still
    /// open, or its server died): one that ran when its phase closed may resume shortly after
    /// the close ([`may_resume_after_close`]).
    pub sessions: &'a [(i64, Option<i64>)],
}

/// How long before its phase's close a resumed submission's last session may have ended and it
/// still resume after the close: a deploy's restart (the SDKs wait up to 300 s for it) or a
/// replica's crash just before the close would otherwise strand it for good.
pub const RESUME_AFTER_CLOSE_SLACK_MS: i64 = 300_000;

/// How long after its phase's close such a submission may resume: long enough for a replica's
/// restart and the SDKs' back-off, short enough that a team cannot bring in another agent at
/// leisure.
pub const RESUME_AFTER_CLOSE_WITHIN_MS: i64 = 900_000;

/// Whether a resumed submission may run after its phase closed: the phase is public (a private
/// one's close reveals its results and its test set, which a later run must not have), the
/// close was at most [`RESUME_AFTER_CLOSE_WITHIN_MS`] ago, and the submission ran at the close
/// (a session open then, or that ended at most [`RESUME_AFTER_CLOSE_SLACK_MS`] before), as a
/// session running at the close may finish. A submission made in time but not running then
/// may not (an agent brought in after the deadline).
pub fn may_resume_after_close(phase: &Phase, sessions: &[(i64, Option<i64>)], now_ms: i64) -> bool {
    phase.leaderboard == Visibility::Public
        && now_ms <= phase.ends_at.saturating_add(RESUME_AFTER_CLOSE_WITHIN_MS)
        && sessions.iter().any(|&(started, ended)| {
            started <= phase.ends_at
                && ended.is_none_or(|e| e >= phase.ends_at.saturating_sub(RESUME_AFTER_CLOSE_SLACK_MS))
        })
}

/// What a request may run: the benchmark and, when it runs in a phase, the phase.
#[derive(Debug, Clone)]
pub struct RunPlan {
    pub benchmark: String,
    pub phase: Option<Phase>,
}

/// Decides what a request may run. With a phase: the phase must exist (`unknown_phase`), a
/// benchmark, if given, must be the phase's, the phase must be open now (`phase_closed`, saying
/// when it opens or closed; not for `accepted_in_window`), and practice is refused in private phases (`forbidden`). Without a
/// phase: a benchmark that a phase uses is refused (`forbidden`), so that phase rules (window,
/// quotas, observation groups, hidden results) cannot be bypassed.
pub async fn resolve_run(storage: &Storage, request: RunRequest<'_>, now_ms: i64) -> Result<RunPlan, AccessError> {
    if request.phase.is_empty() {
        if request.benchmark.is_empty() {
            return Err(AccessError::bad_request("a benchmark or a phase is required"));
        }
        let phases = storage.phases_of_benchmark(request.benchmark).await?;
        if !phases.is_empty() {
            let suggested = phases
                .iter()
                .find(|p| PhaseState::of(p, now_ms) == PhaseState::Open)
                .unwrap_or(&phases[0]);
            let ids: Vec<&str> = phases.iter().map(|p| p.id.as_str()).collect();
            // Where its phase takes files only, an agent cannot run it there either: say so now.
            let how = match suggested.hosted_only {
                true => format!(
                    "phase {} takes hosted submissions only: hand in the policy file (arena-agent submit POLICY.onnx --phase {})",
                    suggested.id, suggested.id
                ),
                false => format!("run it through its phase (phase={})", suggested.id),
            };
            return Err(AccessError::forbidden(format!(
                "benchmark {} belongs to challenge phase(s) {}; {how}",
                request.benchmark,
                ids.join(", "),
            )));
        }
        return Ok(RunPlan {
            benchmark: request.benchmark.to_string(),
            phase: None,
        });
    }
    let Some(phase) = storage.phase(request.phase).await? else {
        return Err(AccessError::new(
            StatusCode::NOT_FOUND,
            codes::UNKNOWN_PHASE,
            format!(
                "no phase {} (a challenge's phases are listed by GET /api/v1/challenges/{{id}})",
                arena_sdk::protocol::quoted(request.phase)
            ),
        ));
    };
    if !request.benchmark.is_empty() && request.benchmark != phase.benchmark {
        return Err(AccessError::bad_request(format!(
            "phase {} runs benchmark {}, not {} (leave the benchmark empty or name {})",
            phase.id, phase.benchmark, request.benchmark, phase.benchmark
        )));
    }
    if request.practice && phase.leaderboard == Visibility::Private {
        return Err(AccessError::forbidden(format!(
            "practice is not available in phase {}: its results are private until {}",
            phase.id,
            rfc3339(phase.ends_at)
        )));
    }
    if phase.hosted_only && !request.hosted {
        return Err(AccessError::forbidden(format!(
            "phase {} takes hosted submissions only, so that its motions never leave the server: hand in the policy file (arena-agent submit POLICY.onnx --phase {}, or POST /api/v1/submissions/hosted?phase={})",
            phase.id, phase.id, phase.id
        )));
    }
    let resumes_a_run_the_close_cut = PhaseState::of(&phase, now_ms) == PhaseState::Closed
        && may_resume_after_close(&phase, request.sessions, now_ms);
    if !request.accepted_in_window && !resumes_a_run_the_close_cut {
        check_open(&phase, now_ms)?;
    }
    Ok(RunPlan {
        benchmark: phase.benchmark.clone(),
        phase: Some(phase),
    })
}

/// `phase_closed` unless the phase accepts runs now.
pub fn check_open(phase: &Phase, now_ms: i64) -> Result<(), AccessError> {
    let closed = |message: String| AccessError::new(StatusCode::FORBIDDEN, codes::PHASE_CLOSED, message);
    match PhaseState::of(phase, now_ms) {
        PhaseState::Open => Ok(()),
        PhaseState::Upcoming => Err(closed(format!(
            "phase {} is not open yet: it opens at {}",
            phase.id,
            rfc3339_exact(phase.starts_at)
        ))),
        PhaseState::Closed => Err(closed(format!(
            "phase {} is closed: it closed at {}",
            phase.id,
            rfc3339_exact(phase.ends_at)
        ))),
    }
}

/// Creates a submission, counted against the phase's quotas (if it has any) in the same
/// transaction, with the uploaded policy of a hosted one. A used-up quota is `quota_exceeded`
/// (HTTP 429) with the limit and, for the per-day limit, the next UTC midnight as
/// `resets_at_ms`.
pub async fn create_submission(
    storage: &Storage,
    team: &Team,
    new: &NewSubmission,
    episodes: &[NewEpisode],
    phase: Option<&Phase>,
    policy: Option<&crate::storage::HostedPolicy>,
    now_ms: i64,
) -> Result<Submission, AccessError> {
    let quota = phase_quota(phase, now_ms);
    storage
        .create_submission_with_policy(new, episodes, quota.as_ref(), policy)
        .await
        .map_err(|e| quota_error(e, team, phase, now_ms))
}

/// `quota_exceeded` when `team` may not create another submission in `phase` now: a check
/// before work a refused submission would waste; [`create_submission`] counts again.
pub async fn check_quota(
    storage: &Storage,
    team: &Team,
    phase: Option<&Phase>,
    now_ms: i64,
) -> Result<(), AccessError> {
    match phase_quota(phase, now_ms) {
        Some(quota) => storage
            .check_quota(team.id, &quota)
            .await
            .map_err(|e| quota_error(e, team, phase, now_ms)),
        None => Ok(()),
    }
}

fn phase_quota(phase: Option<&Phase>, now_ms: i64) -> Option<Quota<'_>> {
    phase
        .filter(|p| p.max_per_day.is_some() || p.max_total.is_some())
        .map(|p| Quota {
            phase_id: &p.id,
            max_per_day: p.max_per_day,
            max_total: p.max_total,
            day_start: day_start(now_ms),
        })
}

/// A storage error of a submission's creation as the team is told it.
fn quota_error(e: StorageError, team: &Team, phase: Option<&Phase>, now_ms: i64) -> AccessError {
    if let StorageError::BenchmarkChanged { benchmark, .. } = &e {
        // The organisers' problem, as a benchmark that cannot load: logged for them.
        tracing::error!(benchmark = %benchmark, "{e}");
        return AccessError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            codes::BENCHMARK_UNAVAILABLE,
            e.to_string(),
        );
    }
    if let StorageError::ConnectKeyTaken(_) = &e {
        // Two connects with one key at once: the other's submission is the one; its retry
        // attaches to it (the SDKs retry `submission_busy`).
        return AccessError::new(
            StatusCode::CONFLICT,
            codes::SUBMISSION_BUSY,
            "another connect with this connect_key is creating its submission; connect again to attach to it",
        );
    }
    let StorageError::QuotaExceeded { limit, used, daily } = e else {
        return e.into();
    };
    let ends_at = phase.map(|p| p.ends_at);
    let phase = phase.map_or("", |p| p.id.as_str());
    let (message, resets_at_ms) = if daily {
        let resets = day_start(now_ms) + DAY_MS;
        // A phase that closes before the reset takes nothing more.
        let closes_first = match ends_at {
            Some(end) if end <= resets => format!(", after the phase closes at {}", rfc3339_exact(end)),
            _ => String::new(),
        };
        (
            format!(
                "team {:?} has used {used} of its {limit} submission(s) per day in phase {phase}; \
                 the daily quota resets at {}{closes_first}",
                team.name,
                rfc3339(resets)
            ),
            Some(resets),
        )
    } else {
        (
            format!(
                "team {:?} has used {used} of its {limit} submission(s) in phase {phase}; \
                 this limit does not reset",
                team.name
            ),
            None,
        )
    };
    AccessError {
        status: StatusCode::TOO_MANY_REQUESTS,
        code: codes::QUOTA_EXCEEDED,
        message,
        limit: Some(limit),
        resets_at_ms,
    }
}

/// Length of a rate-limit window.
pub const RATE_WINDOW_MS: i64 = 60_000;

/// Requests per team per minute (REST calls and agent Connects together), counted in fixed
/// one-minute windows. Keeps one team from flooding the API; submission quotas are separate.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    /// Team id → (window start, requests in it).
    windows: Mutex<HashMap<i64, (i64, u32)>>,
}

impl RateLimiter {
    /// `per_minute` = 0 turns the limit off.
    pub fn new(per_minute: u32) -> Self {
        Self {
            per_minute,
            windows: Mutex::new(HashMap::new()),
        }
    }

    /// Counts one request of `team`; refuses it with `rate_limited` (HTTP 429, the limit and
    /// when the window ends) once the team has used this minute's requests.
    pub fn check(&self, team: &Team, now_ms: i64) -> Result<(), AccessError> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let start = now_ms - now_ms.rem_euclid(RATE_WINDOW_MS);
        let mut windows = self.windows.lock().unwrap_or_else(|p| p.into_inner());
        // Old windows are dropped now and then, so the map holds only active teams.
        if windows.len() > 1024 {
            windows.retain(|_, (s, _)| *s == start);
        }
        let entry = windows.entry(team.id).or_insert((start, 0));
        if entry.0 != start {
            *entry = (start, 0);
        }
        if entry.1 >= self.per_minute {
            let resets = start + RATE_WINDOW_MS;
            return Err(AccessError {
                status: StatusCode::TOO_MANY_REQUESTS,
                code: codes::RATE_LIMITED,
                message: format!(
                    "team {:?} has made {} requests this minute, the limit; retry after {}",
                    team.name,
                    self.per_minute,
                    rfc3339(resets)
                ),
                limit: Some(self.per_minute),
                resets_at_ms: Some(resets),
            });
        }
        entry.1 += 1;
        Ok(())
    }
}

/// The observation groups a phase may allow on a benchmark: the benchmark's own groups, plus
/// `reference` when the benchmark sends reference frames (a horizon or the whole motion), plus
/// `reference_goal` when it sends reference rows (`reference_goal_horizon`).
pub fn allowed_groups(spec: &BenchmarkSpec) -> Vec<String> {
    let mut groups = spec.observations.groups.clone();
    if spec.observations.reference_horizon > 0 || spec.observations.reveal_reference {
        groups.push(REFERENCE_GROUP.to_string());
    }
    if spec.observations.reference_goal_horizon > 0 {
        groups.push(REFERENCE_GOAL_GROUP.to_string());
    }
    groups
}

/// Checks a phase's fields against its benchmark: the window, the quotas and the observation
/// groups. Each message names the field.
pub fn validate_phase(phase: &Phase, spec: &BenchmarkSpec) -> Result<(), AccessError> {
    if phase.starts_at < 0 {
        return Err(AccessError::bad_request("starts_at: must not be before 1970"));
    }
    if phase.starts_at >= phase.ends_at {
        return Err(AccessError::bad_request(format!(
            "ends_at ({}) must be after starts_at ({})",
            rfc3339(phase.ends_at),
            rfc3339(phase.starts_at)
        )));
    }
    for (field, value) in [
        ("max_submissions_per_day", phase.max_per_day),
        ("max_submissions_total", phase.max_total),
    ] {
        if value == Some(0) {
            return Err(AccessError::bad_request(format!(
                "{field}: expected at least 1, or null for no limit"
            )));
        }
    }
    if let Some(groups) = &phase.observation_groups {
        let allowed = allowed_groups(spec);
        if groups.is_empty() {
            return Err(AccessError::bad_request(
                "observation_groups: expected at least one group, or null for the benchmark's",
            ));
        }
        for (i, g) in groups.iter().enumerate() {
            if !allowed.contains(g) {
                return Err(AccessError::bad_request(format!(
                    "observation_groups: benchmark {} does not offer {g:?} (it offers: {})",
                    spec.name,
                    allowed.join(", ")
                )));
            }
            if groups[..i].contains(g) {
                return Err(AccessError::bad_request(format!(
                    "observation_groups: {g:?} is listed twice"
                )));
            }
        }
    }
    Ok(())
}

/// Why a benchmark's motions are hidden from teams now, if they are: its own `motions.hidden`
/// flag, or a private phase that runs it and has not ended (its test set). Hidden motions never
/// reach teams: no names, durations or sources on the benchmark's page, no practice, no names
/// and no revealed reference in `episode_start`; the episodes run as usual (issue 30).
pub async fn motions_hidden(
    storage: &Storage,
    spec: &BenchmarkSpec,
    now_ms: i64,
) -> Result<Option<String>, AccessError> {
    if spec.motions.hidden {
        return Ok(Some(format!(
            "benchmark {} keeps its motions hidden (a test set)",
            spec.name
        )));
    }
    let phases = storage.phases_of_benchmark(&spec.name).await?;
    Ok(phases.iter().find(|p| results_hidden(p, now_ms)).map(|p| {
        format!(
            "benchmark {} is the test set of private phase {} until {}",
            spec.name,
            p.id,
            rfc3339(p.ends_at)
        )
    }))
}

/// A benchmark's view with its motions hidden: no names in `episode_start`, no whole reference.
pub fn hide_motions(spec: &mut BenchmarkSpec) {
    spec.observations.hide_motion_names = true;
    spec.observations.reveal_reference = false;
}

/// The benchmark as a phase runs it: only the phase's observation groups (no reference frames,
/// neither the horizon nor the revealed motion, unless `reference` is allowed; no reference rows
/// unless `reference_goal` is), and, in a private phase, no motion names in EpisodeStart (opaque
/// episode ids only).
pub fn phase_benchmark(benchmark: &LoadedBenchmark, phase: &Phase) -> LoadedBenchmark {
    let mut view = benchmark.clone();
    view.spec = phase_spec(&benchmark.spec, phase);
    view
}

/// The spec part of [`phase_benchmark`].
pub fn phase_spec(spec: &BenchmarkSpec, phase: &Phase) -> BenchmarkSpec {
    let mut spec = spec.clone();
    let observations = &mut spec.observations;
    if let Some(groups) = &phase.observation_groups {
        observations.groups.retain(|g| groups.contains(g));
        if !groups.iter().any(|g| g == REFERENCE_GROUP) {
            observations.reference_horizon = 0;
            observations.reveal_reference = false;
        }
        if !groups.iter().any(|g| g == REFERENCE_GOAL_GROUP) {
            observations.reference_goal_horizon = 0;
        }
    }
    if phase.leaderboard == Visibility::Private {
        observations.hide_motion_names = true;
    }
    spec
}

/// The longest agent name (characters), on every path a name comes in by (REST, `connect`, a
/// hosted upload).
pub const MAX_AGENT_NAME: usize = 128;

/// A name or label as typed (a team, a member, an agent, a token's label, a title): trimmed, at
/// most `max_chars` characters, no control characters (PostgreSQL refuses a NUL; a line break or
/// an escape garbles pages, CSV exports and logs); empty only when `may_be_empty`.
pub fn check_name(field: &str, value: &str, max_chars: usize, may_be_empty: bool) -> Result<String, AccessError> {
    let value = value.trim();
    if value.is_empty() && !may_be_empty {
        return Err(AccessError::bad_request(format!(
            "{field}: expected 1-{max_chars} characters of text, got nothing"
        )));
    }
    check_characters(field, value, max_chars, |_| false)?;
    // A name that reads as another's ("al\u{200b}pha" beside "alpha"), or as nothing.
    if let Some(c) = value.chars().find(|&c| is_invisible(c)) {
        return Err(AccessError::bad_request(format!(
            "{field}: invisible characters are not allowed in a name (found U+{:04X}): a name holding one reads \
             as another name, or as none",
            u32::from(c)
        )));
    }
    Ok(value.to_string())
}

/// Characters that show nothing and join no script: the zero-width space, the word joiner and
/// invisible operators, the byte-order mark, the soft hyphen, the Mongolian vowel separator,
/// the line and paragraph separators and the tag characters. (The zero-width joiner and
/// non-joiner, which Persian, Indic scripts and emoji need, are kept.)
pub fn is_invisible(c: char) -> bool {
    matches!(c,
        '\u{200B}' | '\u{2060}'..='\u{2064}' | '\u{FEFF}' | '\u{00AD}' | '\u{180E}' | '\u{2028}' | '\u{2029}'
        | '\u{E0000}'..='\u{E007F}')
}

/// Free text such as a description: at most `max_chars` characters; line breaks and tabs are
/// kept, other control characters refused.
pub fn check_text(field: &str, value: &str, max_chars: usize) -> Result<String, AccessError> {
    check_characters(field, value, max_chars, |c| matches!(c, '\n' | '\r' | '\t'))?;
    Ok(value.to_string())
}

fn check_characters(
    field: &str,
    value: &str,
    max_chars: usize,
    allowed: impl Fn(char) -> bool,
) -> Result<(), AccessError> {
    let count = value.chars().count();
    if count > max_chars {
        return Err(AccessError::bad_request(format!(
            "{field}: expected at most {max_chars} characters, got {count}"
        )));
    }
    if let Some(c) = value.chars().find(|&c| c.is_control() && !allowed(c)) {
        return Err(AccessError::bad_request(format!(
            "{field}: control characters are not allowed (found U+{:04X})",
            u32::from(c)
        )));
    }
    if let Some(c) = value.chars().find(|&c| is_bidi_control(c)) {
        return Err(AccessError::bad_request(format!(
            "{field}: bidirectional formatting characters are not allowed (found U+{:04X}): they make a \
             name read as another on every page that shows it",
            u32::from(c)
        )));
    }
    Ok(())
}

/// Unicode's explicit bidirectional formatting characters (embeddings, overrides, isolates):
/// U+202E turns "gamma evil" into "gamma live" on a leaderboard. The implicit marks (U+200E,
/// U+200F), which right-to-left text uses, are kept.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A slug for challenge and phase ids: 1-64 characters, lowercase letters, digits, `-` and `_`,
/// starting with a letter or digit.
pub fn check_slug(field: &str, id: &str) -> Result<(), AccessError> {
    let ok = (1..=64).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_lowercase() || c.is_ascii_digit())
        && id
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(AccessError::bad_request(format!(
            "{field}: expected 1-64 characters of a-z, 0-9, '-' and '_', starting with a letter or digit, got {id:?}"
        )))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_name_with_an_invisible_character_is_refused() {
        for name in ["al\u{200b}pha", "alpha\u{2060}", "\u{feff}", "a\u{00ad}b", "x\u{e0041}"] {
            let e = super::check_name("name", name, 64, false).unwrap_err();
            assert!(e.message.contains("invisible characters"), "{name:?}: {}", e.message);
        }
        for name in ["alpha", "تیم\u{200c}ما", "👩\u{200d}🔬 lab", "équipe"] {
            assert_eq!(super::check_name("name", name, 64, false).unwrap(), name);
        }
    }

    #[test]
    fn a_hidden_phase_tells_the_kind_of_failure_and_nothing_else() {
        let cases = [
            (
                "step 1402: action out of range for episode 1 (at its step 701; waist_roll_joint target -3.86 rad is outside [-3.66, 3.66] (the joint's range widened by π))",
                "an action out of range",
            ),
            (
                "step 9: non-finite action for episode 3 (at its step 4; joint 2: NaN)",
                "a non-finite action",
            ),
            (
                "step 3: no action for episode 2 (at its step 1)",
                "no action for the episode",
            ),
            (
                "no Action for GetAction step 7 (a session-wide request counter) within the 1.000 s step deadline",
                "no action within the step deadline",
            ),
            (
                "step 2026: action out of range for episode 3 (at its step 1013; ...) after the episode had broken mjlab_success at 18.76 s: scored as a fall up to there",
                "a fall",
            ),
            ("cancelled by the organiser", "the submission was cancelled"),
            (
                "the server running it stopped renewing its claim (lease expired) (server fault 3 of 3)",
                "the server lost its runs too often",
            ),
            (
                "something new",
                "an error (its details are withheld while the results or motions are hidden)",
            ),
        ];
        for (reason, kind) in cases {
            let told = failure_kind(reason);
            assert!(told.starts_with(kind), "{reason:?} -> {told:?}");
            assert!(!told.chars().any(|c| c.is_ascii_digit()), "no step or value: {told}");
        }
    }

    use super::*;

    #[test]
    fn times_round_trip() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        let t = parse_rfc3339("2026-05-01T12:30:00Z").unwrap();
        assert_eq!(rfc3339(t), "2026-05-01T12:30:00Z");
        assert_eq!(parse_rfc3339("2026-05-01T12:30:00.250Z").unwrap(), t + 250);
        assert_eq!(parse_rfc3339("2026-05-01T14:30:00+02:00").unwrap(), t);
        assert_eq!(parse_rfc3339("2026-05-01T11:00:00.250-01:30").unwrap(), t + 250);
        assert!(parse_rfc3339("2026-05-01T12:30:00+25:00").is_err());
        let e = parse_rfc3339("May 1st").unwrap_err();
        assert!(e.contains("RFC 3339") && e.contains("May 1st"), "{e}");
        assert!(parse_rfc3339("1969-12-31T23:59:59Z").is_err());
        let e = parse_rfc3339("9999-12-31T23:00:00-02:00").unwrap_err();
        assert!(e.contains("after 9999-12-31"), "{e}");
        // RFC 3339's lower-case `t` and `z`, and a space for the `T`.
        assert_eq!(parse_rfc3339("2026-05-01t12:30:00z").unwrap(), t);
        assert_eq!(parse_rfc3339("2026-05-01 14:30:00+02:00").unwrap(), t);
        let e = parse_rfc3339("2026-05-01T12:30:00").unwrap_err();
        assert!(e.contains("has no offset: add Z for UTC"), "{e}");
    }

    #[test]
    fn times_out_of_range_are_refused_and_written_without_panicking() {
        assert_eq!(check_time_ms(MAX_TIME_MS), Ok(MAX_TIME_MS));
        for bad in [-1, MAX_TIME_MS + 1, i64::MIN, i64::MAX] {
            let e = check_time_ms(bad).unwrap_err();
            assert!(e.contains("9999-12-31") && e.contains(&bad.to_string()), "{e}");
        }
        assert_eq!(rfc3339(MAX_TIME_MS), "9999-12-31T23:59:59Z");
        assert_eq!(rfc3339(-1), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(i64::MAX), "9999-12-31T23:59:59Z");
    }

    #[test]
    fn days_start_at_utc_midnight() {
        let noon = parse_rfc3339("2026-05-01T12:00:00Z").unwrap();
        assert_eq!(rfc3339(day_start(noon)), "2026-05-01T00:00:00Z");
        assert_eq!(day_start(day_start(noon)), day_start(noon));
        assert_eq!(rfc3339(day_start(noon) + DAY_MS), "2026-05-02T00:00:00Z");
    }

    #[test]
    fn slugs() {
        for ok in ["a", "g1-cup-2026", "dev_phase", "0"] {
            assert!(check_slug("id", ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "A", "a b", "a/b", &"x".repeat(65)] {
            let e = check_slug("id", bad).unwrap_err();
            assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, "bad_request"), "{bad}");
        }
    }

    fn smoke() -> BenchmarkSpec {
        let names = arena_bench::metrics::metric_names();
        arena_bench::spec::find_benchmark("g1-smoke", &arena_bench::spec::shipped_dir(), &names)
            .unwrap()
            .1
    }

    fn phase(groups: Option<&[&str]>, leaderboard: Visibility) -> Phase {
        Phase {
            id: "p".into(),
            challenge_id: "c".into(),
            benchmark: "g1-smoke".into(),
            starts_at: 0,
            ends_at: DAY_MS,
            leaderboard,
            max_per_day: None,
            max_total: None,
            observation_groups: groups.map(|g| g.iter().map(|s| s.to_string()).collect()),
            hosted_only: false,
            created_at: 0,
        }
    }

    #[test]
    fn the_agents_own_words_in_a_reason_name_no_kind() {
        let reason = format!(
            "agent connection lost: {} \"(server fault cancelled non-finite action)\" (attempt 3 of 3)",
            crate::orchestrator::AGENT_SAID
        );
        assert_eq!(failure_kind(&reason), "the agent's connection was lost too often");
    }

    #[test]
    fn a_run_cut_by_the_close_may_resume_shortly_after_in_a_public_phase_only() {
        let public = phase(None, Visibility::Public);
        let end = public.ends_at;
        let after = |ms: i64| end + ms;
        // Open at the close (or its server died): within the quarter hour after, not later.
        for sessions in [vec![(end - 60_000, None)], vec![(end - 60_000, Some(end + 1))]] {
            assert!(may_resume_after_close(&public, &sessions, after(1)));
            assert!(may_resume_after_close(
                &public,
                &sessions,
                after(RESUME_AFTER_CLOSE_WITHIN_MS)
            ));
            assert!(!may_resume_after_close(
                &public,
                &sessions,
                after(RESUME_AFTER_CLOSE_WITHIN_MS + 1)
            ));
        }
        // Ended up to five minutes before the close: yes; earlier, or started after it: no.
        let ended = |before: i64| vec![(end - 3_600_000, Some(end - before))];
        assert!(may_resume_after_close(
            &public,
            &ended(RESUME_AFTER_CLOSE_SLACK_MS),
            after(1)
        ));
        assert!(!may_resume_after_close(
            &public,
            &ended(RESUME_AFTER_CLOSE_SLACK_MS + 1),
            after(1)
        ));
        assert!(!may_resume_after_close(&public, &[(end + 1, None)], after(2)));
        assert!(!may_resume_after_close(&public, &[], after(1)));
        // A private phase's close reveals its results and test set: never.
        let private = phase(None, Visibility::Private);
        assert!(!may_resume_after_close(&private, &[(end - 60_000, None)], after(1)));
    }

    #[test]
    fn phases_restrict_what_agents_see() {
        let spec = smoke();
        assert_eq!(
            allowed_groups(&spec),
            ["state", "last_action", "history_actor", "reference", "reference_goal"]
        );
        let public = phase_spec(&spec, &phase(None, Visibility::Public));
        assert_eq!(
            public, spec,
            "a public phase without groups runs the benchmark as it is"
        );
        let view = phase_spec(&spec, &phase(Some(&["history_actor", "state"]), Visibility::Private));
        let o = &view.observations;
        assert_eq!(o.groups, ["state", "history_actor"], "the benchmark's order");
        assert_eq!(
            (o.reference_horizon, o.reveal_reference, o.hide_motion_names),
            (0, false, true)
        );
        assert_eq!(o.reference_goal_horizon, 0, "reference rows only when allowed");
        let view = phase_spec(&spec, &phase(Some(&["reference"]), Visibility::Public));
        assert!(view.observations.groups.is_empty());
        assert_eq!(view.observations.reference_horizon, spec.observations.reference_horizon);
        assert_eq!(view.observations.reference_goal_horizon, 0);
        let view = phase_spec(&spec, &phase(Some(&["reference_goal"]), Visibility::Public));
        assert_eq!(
            (
                view.observations.reference_horizon,
                view.observations.reference_goal_horizon
            ),
            (0, 8)
        );
    }

    #[test]
    fn phases_are_validated_against_their_benchmark() {
        let spec = smoke();
        assert!(validate_phase(&phase(Some(&["state", "reference"]), Visibility::Public), &spec).is_ok());
        let refused = |p: &Phase, part: &str| {
            let e = validate_phase(p, &spec).unwrap_err();
            assert_eq!((e.status, e.code), (StatusCode::BAD_REQUEST, "bad_request"));
            assert!(e.message.contains(part), "{:?} lacks {part:?}", e.message);
        };
        refused(
            &phase(Some(&["privileged_state"]), Visibility::Public),
            "does not offer \"privileged_state\"",
        );
        refused(&phase(Some(&["state", "state"]), Visibility::Public), "listed twice");
        assert!(validate_phase(&phase(Some(&["state", "reference_goal"]), Visibility::Public), &spec).is_ok());
        let mut no_goal = spec.clone();
        no_goal.observations.reference_goal_horizon = 0;
        let e = validate_phase(&phase(Some(&["reference_goal"]), Visibility::Public), &no_goal).unwrap_err();
        assert!(e.message.contains("does not offer \"reference_goal\""), "{}", e.message);
        refused(&phase(Some(&[]), Visibility::Public), "at least one group");
        let mut p = phase(None, Visibility::Public);
        p.ends_at = p.starts_at;
        refused(&p, "must be after starts_at");
        let mut p = phase(None, Visibility::Public);
        p.max_per_day = Some(0);
        refused(&p, "max_submissions_per_day");
    }

    #[test]
    fn private_results_are_hidden_until_the_end() {
        let p = phase(None, Visibility::Private);
        assert!(results_hidden(&p, 0) && results_hidden(&p, DAY_MS - 1));
        assert!(!results_hidden(&p, DAY_MS));
        assert!(!results_hidden(&phase(None, Visibility::Public), 0));
        assert_eq!(PhaseState::of(&p, -1), PhaseState::Upcoming);
        assert_eq!(PhaseState::of(&p, 0), PhaseState::Open);
        assert_eq!(PhaseState::of(&p, DAY_MS), PhaseState::Closed);
        let e = check_open(&p, DAY_MS).unwrap_err();
        assert_eq!((e.code, e.status), (codes::PHASE_CLOSED, StatusCode::FORBIDDEN));
        assert!(e.message.contains("closed at 1970-01-02T00:00:00Z"), "{}", e.message);
    }

    #[test]
    fn rate_limit_counts_per_team_and_minute() {
        let team = |id| Team {
            id,
            name: format!("t{id}"),
            created_at: 0,
        };
        let limiter = RateLimiter::new(2);
        let t0 = 5 * RATE_WINDOW_MS + 10;
        assert!(limiter.check(&team(1), t0).is_ok());
        assert!(limiter.check(&team(1), t0 + 1).is_ok());
        let e = limiter.check(&team(1), t0 + 2).unwrap_err();
        assert_eq!(
            (e.status, e.code, e.limit),
            (StatusCode::TOO_MANY_REQUESTS, codes::RATE_LIMITED, Some(2))
        );
        assert_eq!(e.resets_at_ms, Some(6 * RATE_WINDOW_MS));
        // Another team has its own count; the next window starts afresh.
        assert!(limiter.check(&team(2), t0 + 3).is_ok());
        assert!(limiter.check(&team(1), 6 * RATE_WINDOW_MS).is_ok());
        // 0 = no limit.
        let off = RateLimiter::new(0);
        assert!((0..1000).all(|i| off.check(&team(1), i).is_ok()));
    }

    #[test]
    fn protocol_errors_carry_the_quota() {
        let e = AccessError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: codes::QUOTA_EXCEEDED,
            message: "used".into(),
            limit: Some(3),
            resets_at_ms: Some(DAY_MS),
        };
        let p = e.to_protocol();
        assert_eq!(
            (p.code.as_str(), p.limit, p.resets_at.as_str()),
            ("quota_exceeded", 3, "1970-01-02T00:00:00Z")
        );
        let p = AccessError::bad_request("x").to_protocol();
        assert_eq!(
            (p.code.as_str(), p.limit, p.resets_at.as_str()),
            ("invalid_message", 0, "")
        );
    }
}
