//! Hosted evaluation (issue 40): a team hands in an exported policy (ONNX), and the server runs
//! it itself. The file is checked against the benchmark before anything is created or counted
//! (`check_upload`: the file's own checks in `arena_onnx`, its metadata, the session the
//! benchmark offers, the gains against its bounds), stored content-addressed in the object store
//! (`policies/<sha256>.onnx`), and run by `start`: the SDK's client drives an `OnnxAgent`
//! through a session inside this process (`gateway::hosted_session`, no network), so a hosted
//! submission has the queues, quotas, leases, scoring and storage of any other.

use crate::gateway::{self, Incoming};
use crate::policy_check::CheckerFault;
use crate::state::AppState;
use crate::storage::{HostedPolicy, Team};
use arena_bench::spec::{ActionMode, BenchmarkSpec};
use arena_onnx::{OnnxAgent, OnnxPolicy, PolicyOverrides, Supply};
use arena_runner::episode::episode_spec;
use arena_runner::gains::{declared_by_policy, resolve};
use arena_runner::pose::default_pose_problems;
use arena_sdk::client::{self, ClientConfig, ClientError, ClientEvent, LocalConnector, Mode};
use arena_sdk::protocol::codes;
use futures_util::StreamExt;
use std::path::Path;
use std::sync::Arc;

/// The object-store key of a policy file.
pub fn policy_key(sha256: &str) -> String {
    format!("policies/{sha256}.onnx")
}

/// Every reason the policy file at `path` cannot run on `spec` (a phase's view of its
/// benchmark); empty when it can. Loads the model (refusing what `arena_onnx::checks` refuses).
/// `Err(Err(_))`: the server could not check it (its fault, not the file's).
pub fn check_upload(
    path: &Path,
    overrides: &PolicyOverrides,
    spec: &BenchmarkSpec,
) -> Result<OnnxPolicy, Result<Vec<String>, CheckerFault>> {
    // Read, optimised and run once by a child within a budget first (`policy_check.rs`): a
    // hostile graph must not take the server down.
    let problems = crate::policy_check::check_in_child(path, overrides).map_err(Err)?;
    if !problems.is_empty() {
        return Err(Ok(problems));
    }
    let policy = OnnxPolicy::load(path, overrides, Supply::UploadOverrides).map_err(|e| Ok(e.problems))?;
    let mut problems = Vec::new();
    let gains = match spec.action.mode {
        ActionMode::Normalized => None,
        ActionMode::JointPosition => {
            let declared = declared_by_policy(policy.config.gains_g1(), overrides.gain_preset.as_deref(), &spec.action);
            match declared.and_then(|d| resolve(&spec.action, &d)) {
                Ok(g) => Some(g),
                Err(why) => {
                    problems.push(format!("the policy's gains: {why}"));
                    None
                }
            }
        }
    };
    problems.extend(default_pose_problems(
        &policy.config.to_g1(&policy.config.default_joint_pos),
    ));
    let session = episode_spec(spec, gains.as_ref(), 1, 1, 1.0);
    problems.extend(arena_onnx::agent::session_problems(&policy.config, &session));
    if problems.is_empty() {
        Ok(policy)
    } else {
        Err(Ok(problems))
    }
}

/// Overrides as stored with a hosted submission (a JSON object of `PolicyOverrides`' keys).
pub fn overrides_from_json(text: &str) -> Result<PolicyOverrides, String> {
    serde_json::from_str(text).map_err(|e| format!("overrides: {e}"))
}

/// Runs hosted submission `policy.submission_id` of `team` in this process until it ends (or
/// the server stops); logs the outcome. Returns at once; the run has a thread of its own (the
/// SDK's blocking client and the policy's inference). Does nothing when this server runs it
/// already; the caller holds its claim (`Storage::claim_hosted_run`).
pub fn start(
    state: Arc<AppState>,
    team: Team,
    benchmark: String,
    phase: String,
    agent_name: String,
    policy: HostedPolicy,
) {
    let id = policy.submission_id.clone();
    if !state.hosted_runs.lock().expect("hosted runs lock").insert(id.clone()) {
        return;
    }
    let runtime = tokio::runtime::Handle::current();
    runtime.clone().spawn(async move {
        let (run_benchmark, run_phase) = (benchmark.clone(), phase.clone());
        let outcome = run(
            state.clone(),
            runtime,
            team,
            run_benchmark,
            run_phase,
            agent_name,
            &policy,
        )
        .await;
        match outcome {
            Ok(status) => tracing::info!(submission = %id, "hosted run ended: {status}"),
            Err(failure @ (RunError::Unusable(_) | RunError::PolicyFailed(_))) => {
                // The same next time: the submission fails, saying why.
                let reason = match failure {
                    RunError::PolicyFailed(why) => {
                        tracing::warn!(submission = %id, "the hosted policy failed: {why}");
                        if observations_hidden(&state, &benchmark, &phase).await {
                            "the hosted policy failed on an episode's observations (its error is withheld \
                             while the test set is hidden; the server's log has it)"
                                .to_string()
                        } else {
                            format!("the hosted policy failed: {why}")
                        }
                    }
                    RunError::Unusable(why) | RunError::Stopped(why) => format!("the hosted policy cannot run: {why}"),
                };
                tracing::warn!(submission = %id, "{reason}");
                match state.storage.cancel_submission(&id, &reason).await {
                    Ok(()) => {
                        if let Err(e) =
                            crate::trajectory_store::settle_failed(&state.storage, &state.objects, &id).await
                        {
                            tracing::warn!(submission = %id, "merging the runs of a failed hosted submission: {e:#}");
                        }
                    }
                    Err(crate::storage::StorageError::Conflict(_)) => {} // final meanwhile
                    Err(e) => tracing::warn!(submission = %id, "failing the hosted submission: {e}"),
                }
            }
            // Run again at the supervisor's next look (here or on another replica).
            Err(RunError::Stopped(why)) => tracing::warn!(submission = %id, "hosted run stopped: {why}"),
        }
        // Released before it leaves the list of runs here: the other way round, the supervisor
        // could claim it again in between (not in the list, and the claim still this server's)
        // and this release would then drop the new run's claim.
        if let Err(e) = state.storage.release_hosted_run(&id).await {
            tracing::warn!(submission = %id, "{e}");
        }
        state.hosted_runs.lock().expect("hosted runs lock").remove(&id);
    });
}

/// Whether the run's motions are hidden from its team now (a hidden test set, or a private
/// phase before it ends), as the results pages decide; hidden when that cannot be read.
async fn observations_hidden(state: &AppState, benchmark: &str, phase: &str) -> bool {
    let now = crate::storage::now_ms();
    let (benchmark, private) = if phase.is_empty() {
        (benchmark.to_string(), false)
    } else {
        match state.storage.phase(phase).await {
            Ok(Some(p)) => (p.benchmark.clone(), crate::access::results_hidden(&p, now)),
            _ => return true,
        }
    };
    let Ok(spec) = state.catalog.spec(&benchmark) else {
        return true;
    };
    private
        || !matches!(
            crate::access::motions_hidden(&state.storage, &spec, now).await,
            Ok(None)
        )
}

/// What a panicked task said.
fn panic_text(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => arena_onnx::engine::panic_message(&*payload),
        Err(e) => e.to_string(),
    }
}

/// Why a hosted run ended before its submission did.
enum RunError {
    /// The stored policy cannot run (missing from the store, or it no longer loads).
    Unusable(String),
    /// The policy failed on an episode's observations: its error may tell something of them,
    /// so a team whose test set is hidden is told less (the log has it all).
    PolicyFailed(String),
    /// The session stopped (the server is stopping, or a fault): the run is taken up again.
    Stopped(String),
}

/// One hosted run: the policy's file from the store, then an SDK session against this server
/// through a local connector, to the end of the submission. The submission's status at the end.
async fn run(
    state: Arc<AppState>,
    runtime: tokio::runtime::Handle,
    team: Team,
    benchmark: String,
    phase: String,
    agent_name: String,
    policy: &HostedPolicy,
) -> Result<String, RunError> {
    let id = policy.submission_id.clone();
    // One place per run (its policy's thread beside its lanes); the claim is renewed meanwhile.
    let _place = match state.hosted_places.clone().acquire_owned().await {
        Ok(p) => p,
        Err(_) => return Err(RunError::Stopped("the server is stopping".into())),
    };
    let path = match state.objects.local_copy(&policy_key(&policy.sha256)).await {
        Ok(Some(p)) => p,
        Ok(None) => {
            return Err(RunError::Unusable(format!(
                "its file {} is missing from the object store",
                policy_key(&policy.sha256)
            )));
        }
        Err(e) => return Err(RunError::Stopped(format!("reading the policy file: {e}"))),
    };
    let overrides = overrides_from_json(&policy.overrides).map_err(RunError::Unusable)?;
    let connector_state = state.clone();
    let connector = LocalConnector(Arc::new(move || {
        let (to_server, from_agent) = tokio::sync::mpsc::unbounded_channel();
        let (out, mut outgoing) = crate::outbox::outbox();
        let (to_agent, from_server) = tokio::sync::mpsc::unbounded_channel();
        // The SDK's in-process connection reads a plain channel; the outbox's count follows
        // what it has taken.
        runtime.spawn(async move {
            while let Some(msg) = outgoing.recv().await {
                if to_agent.send(msg).is_err() {
                    break;
                }
            }
        });
        let incoming = tokio_stream::wrappers::UnboundedReceiverStream::new(from_agent).map(Incoming::Msg);
        runtime.spawn(gateway::hosted_session(
            connector_state.clone(),
            team.clone(),
            Box::pin(incoming),
            out,
        ));
        (to_server, from_server)
    }));
    let session = tokio::task::spawn_blocking(move || -> Result<String, RunError> {
        // The child's check first, as at the upload: the file was checked then, but perhaps by
        // another version of the server.
        let problems = crate::policy_check::check_in_child(&path, &overrides)
            .map_err(|fault| RunError::Stopped(format!("the server could not check its file: {}", fault.0)))?;
        if !problems.is_empty() {
            return Err(RunError::Unusable(problems.join("; ")));
        }
        // The problems, not the error's text: that names the file's path on this server.
        let policy = OnnxPolicy::load(&path, &overrides, Supply::UploadOverrides)
            .map_err(|e| RunError::Unusable(e.problems.join("; ")))?;
        let gains = policy.config.gains_g1();
        let preset = overrides.gain_preset.clone();
        let mut agent = OnnxAgent::new(policy);
        let mut config = ClientConfig::new(
            "local://hosted",
            "",
            Mode::Submission {
                benchmark,
                submission_id: Some(id.clone()),
            },
        );
        config.agent_name = agent_name;
        config.phase = phase;
        config.local = Some(connector);
        // A `shutdown` here is this server's own stop: the run is taken up by another replica
        // or by this one's next start, so its retries are not held back for a restart (they
        // end with the process).
        config.restart_wait = std::time::Duration::ZERO;
        if let Some((kp, kd)) = gains {
            config.joint_stiffness = kp;
            config.joint_damping = kd;
        }
        config.gain_preset = preset.unwrap_or_default();
        let summary = client::run_blocking(&config, &mut agent, &mut |e| {
            if let ClientEvent::ServerError(e) = e {
                tracing::info!(submission = %id, "hosted run: {}: {}", e.code, e.message);
            }
        })
        .map_err(|e| match e {
            // A benchmark this server cannot load now (its motions root, an I/O error) is the
            // server's configuration, which the organiser may mend: taken up again later.
            ClientError::Refused { ref code, .. } if code == codes::BENCHMARK_UNAVAILABLE => {
                RunError::Stopped(e.to_string())
            }
            // Refusals that reconnecting cannot change (the phase, the gains, the layout):
            // retrying them would hold the submission and its quota until it expired.
            ClientError::Refused { .. } | ClientError::Agent(_) | ClientError::Config(_) => {
                RunError::Unusable(e.to_string())
            }
            ClientError::AgentFailed(_) => RunError::PolicyFailed(e.to_string()),
            ClientError::Unreachable { .. } | ClientError::Protocol(_) => RunError::Stopped(e.to_string()),
        })?;
        Ok(summary.submission_status)
    })
    .await;
    // A panic of the policy's evaluation would come again on the same inputs.
    session.unwrap_or_else(|e| {
        Err(RunError::PolicyFailed(format!(
            "its evaluation panicked: {}",
            panic_text(e)
        )))
    })
}

/// For the server's life: takes up every hosted submission that is not final and that no live
/// server runs (it was running or waiting when this server, or another replica, stopped: no
/// agent will reconnect for it), and renews the claims on the runs of this one. Looks at once
/// at start, then three times per lease.
pub async fn supervise(state: std::sync::Weak<AppState>) {
    let period = match state.upgrade() {
        Some(s) => (s.storage.lease().duration / 3).max(std::time::Duration::from_millis(100)),
        None => return,
    };
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(state) = state.upgrade() else { return };
        let running: Vec<String> = state
            .hosted_runs
            .lock()
            .expect("hosted runs lock")
            .iter()
            .cloned()
            .collect();
        if !running.is_empty()
            && let Err(e) = state.storage.renew_hosted_runs(&running).await
        {
            tracing::warn!("renewing the claims on hosted runs (retrying): {e}");
        }
        if let Err(e) = take_up(&state, &running).await {
            tracing::warn!("looking for hosted submissions to run (retrying): {e}");
        }
    }
}

/// Starts every unfinished hosted submission not in `running` whose run this server can claim,
/// while it has places for them (a server that is full leaves the rest to other replicas).
async fn take_up(state: &Arc<AppState>, running: &[String]) -> Result<(), crate::storage::StorageError> {
    let mut places = state.config.hosted_runs().saturating_sub(running.len());
    for policy in state.storage.unfinished_hosted_policies().await? {
        if places == 0 {
            break;
        }
        if running.contains(&policy.submission_id) || !state.storage.claim_hosted_run(&policy.submission_id).await? {
            continue;
        }
        places -= 1;
        let Some(submission) = state.storage.submission(&policy.submission_id).await? else {
            continue;
        };
        let Some(team) = state.storage.team(submission.team_id).await? else {
            continue;
        };
        tracing::info!(submission = %submission.id, "taking up hosted submission");
        start(
            state.clone(),
            team,
            submission.benchmark.clone(),
            submission.phase_id.clone().unwrap_or_default(),
            submission.agent_name.clone(),
            policy,
        );
    }
    Ok(())
}
