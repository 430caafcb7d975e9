//! A session's admission: the Connect checked (protocol version, token, mode, the phase's and
//! benchmark's rules, declared gains, quota) and the submission created or resumed, before any
//! lane starts. A refusal is the Error the session sends; it costs no quota.

use super::{now_ms, quoted, refuse, refuse_internal};
use crate::access::{self, AccessError, RunRequest};
use crate::catalog::{ClientLoadError, LoadedBenchmark};
use crate::orchestrator::runner;
use crate::state::AppState;
use crate::storage::{NewSubmission, Submission, SubmissionStatus, Team};
use crate::team_sessions::SessionPlace;
use arena_bench::spec::ActionMode;
use arena_runner::gains::{DeclaredGains, SessionGains};
use arena_runner::revealed;
use arena_sdk::protocol::{self, Connect, Msg, PROTOCOL_VERSION, codes};
use std::sync::Arc;

/// What a Connect resolved to.
pub(super) struct Admitted {
    /// The benchmark as this session runs it (a phase's view: its groups, hidden names).
    pub(super) benchmark: Arc<LoadedBenchmark>,
    pub(super) submission: Option<Submission>,
    /// Episodes not final yet (PENDING, or RUNNING elsewhere: a replica may hold some).
    pub(super) remaining: usize,
    /// False in a private phase before it ends: EpisodeEnd carries no metrics and no reason.
    pub(super) reveal_results: bool,
    /// Joint-position benchmarks: the gains the session runs with (checked before anything is
    /// created, so a refusal costs no quota).
    pub(super) gains: Option<SessionGains>,
    /// A resume under another agent name: recorded once the session has the submission (a
    /// resume refused as busy must not rename the session that runs it).
    pub(super) renamed: bool,
    /// Its place among the team's concurrent sessions (none for a hosted run), held for the
    /// session's life.
    pub(super) place: Option<SessionPlace>,
}

/// The refusal of a session for a submission that has finished, with what became of all its
/// episodes: an agent whose connection was lost while it ended learns the counts the session's
/// `disconnect` would have carried (its SDK's exit status depends on them).
pub(super) async fn submission_finished(state: &AppState, id: &str, status: &str, message: String) -> Box<Msg> {
    let (scored, failed) = match state.storage.final_counts(id).await {
        Ok(counts) => counts,
        Err(e) => {
            tracing::warn!(submission = %id, "counting its final episodes: {e}");
            (0, 0)
        }
    };
    Box::new(Msg::Error(protocol::Error {
        code: codes::SUBMISSION_FINISHED.into(),
        message,
        submission_status: status.into(),
        episodes_scored: scored as u32,
        episodes_failed: failed as u32,
        ..Default::default()
    }))
}

pub(super) fn refusal(e: AccessError) -> Box<Msg> {
    Box::new(Msg::Error(e.to_protocol()))
}

/// Validates the Connect (version, token, mode, phase and benchmark rules, quota) and creates or
/// resumes the submission. `Err` is the Error to send.
/// `reference_value_bytes`: what a value of a revealed reference takes in the client's encoding
/// (None in process).
pub(super) async fn admit(
    state: &Arc<AppState>,
    hosted: Option<&Team>,
    c: &Connect,
    reference_value_bytes: Option<usize>,
    row_value_bytes: Option<usize>,
) -> Result<Admitted, Box<Msg>> {
    if c.protocol_version != PROTOCOL_VERSION {
        return Err(refuse(
            codes::UNSUPPORTED_VERSION,
            format!(
                "protocol version {} is not supported; this server speaks version {PROTOCOL_VERSION}",
                c.protocol_version
            ),
        ));
    }
    let now = now_ms();
    let team = match hosted {
        Some(team) => team.clone(),
        None => access::authenticate(&state.storage, &c.token, now)
            .await
            .map_err(refusal)?,
    };
    // The team's request rate counts its own connects, not the server's runs of its uploads (a
    // team polling its results delayed its hosted run, which waited holding a hosted place).
    if hosted.is_none() {
        state.rate_limiter.check(&team, now).map_err(refusal)?;
    }
    // The team's place among its concurrent sessions, before anything is created: a Connect
    // refused `rate_limited` at the cap (which the SDKs retry) must not leave a submission
    // behind each time, counted against the phase's quota. The server's own runs (hosted
    // evaluations) have their own limit.
    let place = match hosted {
        Some(_) => None,
        None => Some(state.team_sessions.take(&team, now).map_err(refusal)?),
    };
    // Trimmed, as over REST.
    let agent_name =
        access::check_name("connect.agent_name", &c.agent_name, access::MAX_AGENT_NAME, true).map_err(refusal)?;
    let practice = match c.mode.as_str() {
        "submission" | "" => false,
        "practice" => true,
        other => {
            return Err(refuse(
                codes::INVALID_MESSAGE,
                format!(
                    "connect.mode must be \"submission\" or \"practice\", got {}",
                    quoted(other)
                ),
            ));
        }
    };
    if practice && !c.submission_id.is_empty() {
        return Err(refuse(
            codes::INVALID_MESSAGE,
            format!(
                "connect.submission_id {} with mode \"practice\": practice runs no submission (leave it empty, or resume it in mode \"submission\")",
                quoted(&c.submission_id)
            ),
        ));
    }
    let mut submission = None;
    let mut request = RunRequest {
        benchmark: &c.benchmark,
        phase: &c.phase,
        practice,
        hosted: hosted.is_some(),
        accepted_in_window: false,
        sessions: &[],
    };
    // A connect that creates a submission may carry the client's key for it: a connect that
    // comes again with the key (its first one lost before `connected` arrived) attaches to the
    // submission the first created.
    let connect_key = match (practice, c.submission_id.is_empty(), c.connect_key.as_str()) {
        (false, true, key) if !key.is_empty() => Some(check_connect_key(key)?),
        _ => None,
    };
    let existing = if !practice && !c.submission_id.is_empty() {
        match state.storage.submission(&c.submission_id).await {
            Ok(Some(s)) if s.team_id == team.id => Some(s),
            Ok(_) => {
                return Err(refuse(
                    codes::UNKNOWN_SUBMISSION,
                    format!("no submission {} for this team", quoted(&c.submission_id)),
                ));
            }
            Err(e) => return Err(refuse_internal("reading the submission", e)),
        }
    } else if let Some(key) = connect_key {
        state
            .storage
            .submission_by_connect_key(team.id, key)
            .await
            .map_err(|e| refuse_internal("reading the connect key's submission", e))?
    } else {
        None
    };
    if let Some(s) = existing {
        // A hosted submission's results are those of its uploaded file: only the server's own
        // run of that file attaches to it (before, any agent of the team could run it while
        // the submission still showed the file).
        if hosted.is_none() {
            match state.storage.hosted_policy(&s.id).await {
                Ok(None) => {}
                Ok(Some(_)) => {
                    return Err(refuse(
                        codes::FORBIDDEN,
                        format!(
                            "submission {} is a hosted submission: the server runs its uploaded policy, no agent attaches to it",
                            s.id
                        ),
                    ));
                }
                Err(e) => return Err(refuse_internal("reading the submission", e)),
            }
        }
        if matches!(s.status, SubmissionStatus::Completed | SubmissionStatus::Failed) {
            let message = format!("submission {} is {}", s.id, s.status.as_str());
            return Err(submission_finished(state, &s.id, s.status.as_str(), message).await);
        }
        if !c.benchmark.is_empty() && c.benchmark != s.benchmark {
            return Err(refuse(
                codes::INVALID_MESSAGE,
                format!(
                    "submission {} runs benchmark {}, not {} (resume it with its benchmark, or none)",
                    s.id,
                    quoted(&s.benchmark),
                    quoted(&c.benchmark)
                ),
            ));
        }
        let own_phase = s.phase_id.as_deref().unwrap_or("");
        if !c.phase.is_empty() && c.phase != own_phase {
            return Err(refuse(
                codes::INVALID_MESSAGE,
                format!(
                    "submission {} belongs to {}, not to phase {}",
                    s.id,
                    if own_phase.is_empty() {
                        "no phase".to_string()
                    } else {
                        format!("phase {own_phase}")
                    },
                    quoted(&c.phase)
                ),
            ));
        }
        submission = Some(s);
    }
    // A resumed submission runs under its own phase's rules, checked again now (the window may
    // have closed, the benchmark may have been bound to a phase since).
    let sessions: Vec<(i64, Option<i64>)> = match &submission {
        Some(s) if s.phase_id.is_some() => state
            .storage
            .sessions(&s.id)
            .await
            .map_err(|e| refuse_internal("reading the submission's sessions", e))?
            .into_iter()
            .map(|x| (x.started_at, x.ended_at))
            .collect(),
        _ => Vec::new(),
    };
    if let Some(s) = &submission {
        request.benchmark = &s.benchmark;
        request.phase = s.phase_id.as_deref().unwrap_or("");
        request.accepted_in_window = hosted.is_some();
        request.sessions = &sessions;
    }
    if request.benchmark.is_empty() && request.phase.is_empty() {
        return Err(refuse(
            codes::INVALID_MESSAGE,
            "connect.benchmark (or connect.phase) is required",
        ));
    }
    let plan = access::resolve_run(&state.storage, request, now)
        .await
        .map_err(refusal)?;
    let catalog = state.catalog.clone();
    let name = plan.benchmark.clone();
    let mut benchmark = match tokio::task::spawn_blocking(move || catalog.load(&name)).await {
        Ok(Ok(b)) => b,
        Ok(Err(e)) => {
            return Err(match (e.for_client(&plan.benchmark), &submission) {
                // A stored submission's benchmark that cannot be found is the organisers' to
                // fix, not a name the agent gave (as over REST).
                (ClientLoadError::Unknown(message), Some(s)) if hosted.is_none() => refuse(
                    codes::BENCHMARK_UNAVAILABLE,
                    format!(
                        "submission {}'s benchmark cannot be loaded on this server now: {message}",
                        s.id
                    ),
                ),
                // A hosted run's fails for good (its runner retries `benchmark_unavailable`).
                (ClientLoadError::Unknown(message), _) => refuse(codes::UNKNOWN_BENCHMARK, message),
                (ClientLoadError::Unavailable(message), _) => refuse(codes::BENCHMARK_UNAVAILABLE, message),
            });
        }
        Err(e) => return Err(refuse_internal("loading the benchmark", e)),
    };
    let mut reveal_results = true;
    if let Some(phase) = &plan.phase {
        benchmark = Arc::new(access::phase_benchmark(&benchmark, phase));
        reveal_results = !access::results_hidden(phase, now);
    }
    let hidden = access::motions_hidden(&state.storage, &benchmark.spec, now)
        .await
        .map_err(refusal)?;
    if let Some(why) = hidden {
        if practice {
            return Err(refusal(AccessError::forbidden(format!(
                "practice is not offered on benchmark {}: {why}",
                benchmark.spec.name
            ))));
        }
        let mut view = (*benchmark).clone();
        access::hide_motions(&mut view.spec);
        benchmark = Arc::new(view);
    }
    let gains = match benchmark.spec.action.mode {
        ActionMode::Normalized => None,
        ActionMode::JointPosition => {
            let declared = DeclaredGains {
                kp: c.joint_stiffness.clone(),
                kd: c.joint_damping.clone(),
                preset: c.gain_preset.clone(),
            };
            let resolved = arena_runner::gains::resolve(&benchmark.spec.action, &declared).map_err(|why| {
                refuse(
                    codes::INVALID_GAINS,
                    format!("benchmark {}: {why}", benchmark.spec.name),
                )
            })?;
            Some((resolved, SessionGains::declared_nothing(&declared)))
        }
    };
    if benchmark.spec.observations.reveal_reference
        && let Some(bytes) = reference_value_bytes
        && let Some(big) = revealed::longest_too_large(
            benchmark.library.motions.iter().map(|m| (m.name.as_str(), m.length_s)),
            bytes,
            // The first reference_goal rows each EpisodeInfo carries when they are sent once.
            match c.reference_goal_once {
                true => arena_runner::observations::first_goal_values(&benchmark.spec) * row_value_bytes.unwrap_or(0),
                false => 0,
            },
        )
    {
        // Before a submission is made: the agent can connect again in binary frames.
        return Err(refuse(
            codes::INVALID_MESSAGE,
            format!(
                "benchmark {} reveals whole references, and in JSON text {big}: connect with binary frames or over gRPC",
                benchmark.spec.name
            ),
        ));
    }
    if practice {
        return Ok(Admitted {
            benchmark,
            submission: None,
            remaining: 0,
            reveal_results,
            gains: gains.map(|(g, _)| g),
            renamed: false,
            place,
        });
    }
    let mut renamed = false;
    let resumed = submission.is_some();
    let submission = match submission {
        Some(mut s) => {
            if !agent_name.is_empty() && agent_name != s.agent_name {
                s.agent_name = agent_name;
                renamed = true;
            }
            s
        }
        None => {
            // The window and the day's quota on this moment's clock: loading the benchmark
            // may have taken a while since the run was resolved.
            let now = now_ms();
            if let Some(phase) = &plan.phase {
                access::check_open(phase, now).map_err(refusal)?;
            }
            // A server told to stop creates nothing more: the client would not learn the new
            // submission's id and would start another after the restart.
            if state.session_stop.is_told() {
                return Err(Box::new(super::shutdown()));
            }
            let new = NewSubmission {
                id: crate::state::new_submission_id(),
                team_id: team.id,
                benchmark: benchmark.spec.name.clone(),
                agent_name,
                phase_id: plan.phase.as_ref().map(|p| p.id.clone()),
                benchmark_version: benchmark.spec.version,
                benchmark_definition: Some(benchmark.definition.clone()),
                connect_key: connect_key.map(str::to_string),
            };
            access::create_submission(
                &state.storage,
                &team,
                &new,
                &runner::new_episodes(&benchmark),
                plan.phase.as_ref(),
                None,
                now,
            )
            .await
            .map_err(refusal)?
        }
    };
    let rows = state
        .storage
        .episodes(&submission.id)
        .await
        .map_err(|e| refuse_internal("reading the submission's episodes", e))?;
    // Before its gains are fixed: a refused resume changes nothing.
    if resumed {
        still_defined_as_started(&submission, &benchmark, &rows)
            .map_err(|why| refuse(codes::BENCHMARK_CHANGED, why))?;
        // The same episodes under other rules of play (a raised dr_level, another fall rule):
        // what the version's first submission recorded says so.
        let recorded = state
            .storage
            .benchmark_definition(&benchmark.spec.name, benchmark.spec.version)
            .await
            .map_err(|e| refuse_internal("reading the benchmark's recorded definition", e))?;
        if recorded.is_some_and(|d| crate::catalog::changed_since(&d, &benchmark.definition)) {
            return Err(refuse(
                codes::BENCHMARK_CHANGED,
                format!(
                    "benchmark {} changed under version {} since submission {} started (its rules of play or \
                     motions differ): its remaining episodes cannot run as they were defined (the organisers can \
                     restore the benchmark file it started on, or cancel the submission; a changed benchmark takes \
                     a new version)",
                    benchmark.spec.name, benchmark.spec.version, submission.id
                ),
            ));
        }
    }
    let gains = match gains {
        Some((resolved, declared_nothing)) => {
            Some(submission_gains(state, &submission.id, resolved, declared_nothing).await?)
        }
        None => None,
    };
    Ok(Admitted {
        remaining: runner::unfinished(&rows),
        benchmark,
        submission: Some(submission),
        reveal_results,
        gains,
        renamed,
        place,
    })
}

/// The longest `Connect.connect_key`.
const MAX_CONNECT_KEY: usize = 64;

/// `key` if it is a connect key: 1 to 64 characters of A-Z, a-z, 0-9, '-' and '_' (a UUID's
/// text is one).
fn check_connect_key(key: &str) -> Result<&str, Box<Msg>> {
    let fits = key.len() <= MAX_CONNECT_KEY && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    match fits {
        true => Ok(key),
        false => Err(refuse(
            codes::INVALID_MESSAGE,
            format!(
                "connect.connect_key {}: expected 1-{MAX_CONNECT_KEY} characters of A-Z, a-z, 0-9, '-' and '_'",
                quoted(key)
            ),
        )),
    }
}

/// A resumed submission runs the episodes it was created with: its benchmark must still be the
/// version it started on, and define the same episodes (their number, seeds and starts). A
/// changed file ran the rest under other rules (a bumped version: a hybrid the board then left
/// out) or ended every session at the first episode it no longer has (fewer episodes: hundreds
/// of sessions, each a server fault).
fn still_defined_as_started(
    submission: &Submission,
    benchmark: &LoadedBenchmark,
    rows: &[crate::storage::EpisodeRow],
) -> Result<(), String> {
    let spec = &benchmark.spec;
    let fix = "the organisers can restore the benchmark file it started on, or cancel the submission";
    if let Some(started) = submission.benchmark_version
        && started != i64::from(spec.version)
    {
        return Err(format!(
            "submission {} started on version {started} of benchmark {}, and this server has version {}: its \
             remaining episodes cannot run under the rules it started with ({fix})",
            submission.id, spec.name, spec.version
        ));
    }
    let changed = |what: String| {
        Err(format!(
            "benchmark {} changed under version {} since submission {} started ({what}): its remaining \
             episodes cannot run as they were defined ({fix}; a changed benchmark takes a new version)",
            spec.name, spec.version, submission.id
        ))
    };
    if rows.len() != benchmark.episodes.len() {
        return changed(format!(
            "{} episodes, where the submission has {}",
            benchmark.episodes.len(),
            rows.len()
        ));
    }
    let defined: std::collections::HashMap<i64, &arena_bench::spec::Episode> =
        benchmark.episodes.iter().map(|e| (e.index as i64, e)).collect();
    for row in rows {
        match defined.get(&row.idx) {
            Some(e)
                if e.seed == row.seed
                    && e.start_s.to_bits() == row.start_s.to_bits()
                    && e.duration_s.to_bits() == row.duration_s.to_bits()
                    && benchmark.motion_name(e) == row.motion => {}
            Some(_) => return changed(format!("episode {}'s motion, window or seed differs", row.idx)),
            None => return changed(format!("it has no episode {}", row.idx)),
        }
    }
    Ok(())
}

/// The gains a submission runs with: fixed by its first session, kept by every resume. A resume
/// that declares nothing gets them; one that declares other gains is refused, so that every
/// episode of a submission runs with the same gains.
async fn submission_gains(
    state: &Arc<AppState>,
    id: &str,
    resolved: SessionGains,
    declared_nothing: bool,
) -> Result<SessionGains, Box<Msg>> {
    let stored = state
        .storage
        .fix_joint_gains(id, &resolved.to_json())
        .await
        .map_err(|e| refuse_internal("recording the submission's gains", e))?;
    let stored = SessionGains::from_json(&stored).map_err(|e| refuse_internal("reading the submission's gains", e))?;
    if declared_nothing || stored.same_values(&resolved) {
        return Ok(stored);
    }
    Err(refuse(
        codes::INVALID_GAINS,
        format!(
            "submission {id} runs with the gains its first session declared ({}); resume it with the same gains or declare none",
            stored
                .preset
                .as_deref()
                .map_or("its own values".to_string(), |p| format!("preset {p}"))
        ),
    ))
}
