//! Hosted evaluation (issue 40): a team hands in an exported policy (ONNX), and the server runs
//! it itself. The file is checked against the benchmark before anything is created or counted
//! (`check_upload`: the file's own checks in `arena_onnx`, its metadata, the session the
//! benchmark offers, the gains against its bounds), stored content-addressed in the object store
//! (`policies/<sha256>.onnx`), and run by `start`: the SDK's client drives an `OnnxAgent`
//! through a session inside this process (`gateway::hosted_session`, no network), so a hosted
//! submission has the queues, quotas, leases, scoring and storage of any other.

use crate::gateway::{self, Incoming};
use crate::state::AppState;
use crate::storage::{HostedPolicy, Team};
use arena_bench::spec::{ActionMode, BenchmarkSpec};
use arena_onnx::{OnnxAgent, OnnxPolicy, PolicyOverrides};
use arena_runner::episode::episode_spec;
use arena_runner::gains::{DeclaredGains, resolve};
use arena_sdk::client::{self, ClientConfig, ClientEvent, LocalConnector, Mode};
use futures_util::StreamExt;
use std::path::Path;
use std::sync::Arc;

/// The object-store key of a policy file.
pub fn policy_key(sha256: &str) -> String {
    format!("policies/{sha256}.onnx")
}

/// Every reason the policy file at `path` cannot run on `spec` (a phase's view of its
/// benchmark); empty when it can. Loads the model (refusing what `arena_onnx::checks` refuses).
pub fn check_upload(path: &Path, overrides: &PolicyOverrides, spec: &BenchmarkSpec) -> Result<OnnxPolicy, Vec<String>> {
    let policy = OnnxPolicy::load(path, overrides).map_err(|e| e.problems)?;
    let mut problems = Vec::new();
    let gains = match spec.action.mode {
        ActionMode::Normalized => None,
        ActionMode::JointPosition => match resolve(&spec.action, &declared(&policy)) {
            Ok(g) => Some(g),
            Err(why) => {
                problems.push(format!("the policy's gains: {why}"));
                None
            }
        },
    };
    let session = episode_spec(spec, gains.as_ref(), 1, 1, 1.0);
    problems.extend(arena_onnx::agent::session_problems(&policy.config, &session));
    if problems.is_empty() { Ok(policy) } else { Err(problems) }
}

/// The gains a hosted session declares: the policy's own, or none (the benchmark's default).
fn declared(policy: &OnnxPolicy) -> DeclaredGains {
    match policy.config.gains_g1() {
        Some((kp, kd)) => DeclaredGains {
            kp,
            kd,
            preset: String::new(),
        },
        None => DeclaredGains {
            kp: Vec::new(),
            kd: Vec::new(),
            preset: String::new(),
        },
    }
}

/// Overrides as stored with a hosted submission (JSON).
pub fn overrides_from_json(text: &str) -> Result<PolicyOverrides, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| format!("overrides: {e}"))?;
    let strings = |k: &str| -> Option<Vec<String>> {
        v.get(k)?
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
    };
    let numbers = |k: &str| -> Option<Vec<f64>> {
        v.get(k)?
            .as_array()
            .map(|a| a.iter().filter_map(|x| x.as_f64()).collect())
    };
    Ok(PolicyOverrides {
        joint_names: strings("joint_names"),
        observation_names: strings("observation_names"),
        default_joint_pos: numbers("default_joint_pos"),
        action_scale: numbers("action_scale"),
        joint_stiffness: numbers("joint_stiffness"),
        joint_damping: numbers("joint_damping"),
        anchor_body: v.get("anchor_body").and_then(|a| a.as_str()).map(String::from),
    })
}

/// Runs hosted submission `policy.submission_id` of `team` in this process until it ends (or
/// the server stops); logs the outcome. Returns at once; the run has a thread of its own (the
/// SDK's blocking client and the policy's inference).
pub fn start(
    state: Arc<AppState>,
    team: Team,
    benchmark: String,
    phase: String,
    agent_name: String,
    policy: HostedPolicy,
) {
    let runtime = tokio::runtime::Handle::current();
    let id = policy.submission_id.clone();
    runtime.clone().spawn(async move {
        let path = match state.objects.local_copy(&policy_key(&policy.sha256)).await {
            Ok(Some(p)) => p,
            Ok(None) => {
                tracing::error!(submission = %id, "hosted policy {} is missing from the store", policy.sha256);
                return;
            }
            Err(e) => {
                tracing::error!(submission = %id, "reading hosted policy: {e}");
                return;
            }
        };
        let overrides = overrides_from_json(&policy.overrides).unwrap_or_default();
        let connector_state = state.clone();
        let connector_runtime = runtime.clone();
        let connector = LocalConnector(Arc::new(move || {
            let (to_server, from_agent) = tokio::sync::mpsc::unbounded_channel();
            let (out, from_server) = tokio::sync::mpsc::unbounded_channel();
            let incoming = tokio_stream::wrappers::UnboundedReceiverStream::new(from_agent).map(Incoming::Msg);
            connector_runtime.spawn(gateway::hosted_session(
                connector_state.clone(),
                team.clone(),
                Box::pin(incoming),
                out,
            ));
            (to_server, from_server)
        }));
        let run = tokio::task::spawn_blocking(move || -> Result<String, String> {
            let policy = OnnxPolicy::load(&path, &overrides).map_err(|e| e.to_string())?;
            let gains = policy.config.gains_g1();
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
            if let Some((kp, kd)) = gains {
                config.joint_stiffness = kp;
                config.joint_damping = kd;
            }
            let summary = client::run_blocking(&config, &mut agent, &mut |e| {
                if let ClientEvent::ServerError(e) = e {
                    tracing::info!(submission = %id, "hosted run: {}: {}", e.code, e.message);
                }
            })
            .map_err(|e| e.to_string())?;
            if let Some(e) = &agent.error {
                tracing::warn!(submission = %id, "hosted policy: {e}");
            }
            Ok(summary.submission_status)
        })
        .await;
        match run {
            Ok(Ok(status)) => tracing::info!(submission = %policy.submission_id, "hosted run ended: {status}"),
            Ok(Err(e)) => tracing::warn!(submission = %policy.submission_id, "hosted run stopped: {e}"),
            Err(e) => tracing::error!(submission = %policy.submission_id, "hosted run panicked: {e}"),
        }
    });
}

/// At start-up: runs every hosted submission that is not final (it was running, or waiting,
/// when the server stopped).
pub async fn resume_all(state: Arc<AppState>) {
    let policies = match state.storage.unfinished_hosted_policies().await {
        Ok(p) => p,
        Err(e) => {
            tracing::error!("reading hosted submissions: {e}");
            return;
        }
    };
    for policy in policies {
        let submission = match state.storage.submission(&policy.submission_id).await {
            Ok(Some(s)) => s,
            _ => continue,
        };
        let team = match state.storage.team(submission.team_id).await {
            Ok(Some(t)) => t,
            _ => continue,
        };
        tracing::info!(submission = %submission.id, "resuming hosted submission");
        start(
            state.clone(),
            team,
            submission.benchmark.clone(),
            submission.phase_id.clone().unwrap_or_default(),
            submission.agent_name.clone(),
            policy,
        );
    }
}
