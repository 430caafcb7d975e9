//! `arena demo`: the whole product in one command. Starts an in-process server on embedded
//! defaults, runs the reference-replay agent through the Rust SDK over a real WebSocket on
//! loopback, and prints the per-motion metrics, the leaderboard and where the files are. Then
//! the arena's trained baseline, the PPO tracker committed in `ppo/checkpoints/g1-smoke`, and
//! replay play `g1-smoke-robot` as two teams, beside each other on its leaderboard.

use crate::app;
use crate::cli::serve::{ConfigArgs, LaneBackendArgs};
use crate::leaderboard;
use crate::state::AppState;
use crate::storage::{EpisodeState, hash_token};
use anyhow::Context;
use arena_sdk::Agent;
use arena_sdk::agents::ReplayAgent;
use arena_sdk::client::{self, ClientConfig, ClientEvent, Mode, RunSummary};
use arena_sdk::protocol::Encoding;
use arena_sdk::tracker::{TrackerAgent, TrackerPolicy};
use clap::{Args, ValueEnum};
use indicatif::{ProgressBar, ProgressStyle};
use std::net::SocketAddr;
use std::path::PathBuf;

/// The benchmark the tracker and replay are compared on (the tracker's own).
const TRACKER_BENCHMARK: &str = "g1-smoke-robot";
/// The committed tracker, relative to the repository root.
const TRACKER_DIR: &str = "ppo/checkpoints/g1-smoke";

#[derive(Debug, Clone, Copy, ValueEnum)]
enum EncodingArg {
    Binary,
    Json,
}

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Benchmark to run.
    #[arg(long, default_value = "g1-smoke")]
    benchmark: String,
    /// Wire encoding of the agent's session.
    #[arg(long, value_enum, default_value_t = EncodingArg::Binary)]
    encoding: EncodingArg,
    /// Keep the server running after the demo (until Ctrl-C), e.g. to browse the REST API.
    #[arg(long)]
    keep_serving: bool,
    /// Print the summary as JSON.
    #[arg(long)]
    json: bool,
    /// The PPO tracker to show beside replay on g1-smoke-robot (an `arena-ppo` checkpoint;
    /// default: the committed ppo/checkpoints/g1-smoke).
    #[arg(long, value_name = "DIR", conflicts_with = "no_tracker")]
    tracker: Option<PathBuf>,
    /// Skip the tracker part.
    #[arg(long)]
    no_tracker: bool,
    #[command(flatten)]
    config: ConfigArgs,
    #[command(flatten)]
    lane_backend: LaneBackendArgs,
}

pub fn run(a: DemoArgs) -> anyhow::Result<()> {
    for warning in super::serve::unknown_arena_variables::<DemoArgs>(std::env::vars_os().map(|(k, _)| k)) {
        eprintln!("warning: {warning}");
    }
    // A tracker given that cannot load fails now, not after the whole replay part has run.
    let given_tracker = match &a.tracker {
        Some(dir) => Some(TrackerPolicy::load(dir).map_err(|e| anyhow::anyhow!("--tracker {}: {e}", dir.display()))?),
        None => None,
    };
    let mut config = a.config.resolve_with(&a.lane_backend)?;
    if !config.prewarm.is_empty() {
        // The demo starts its own lanes once; keeping simulators warm is `arena serve`'s.
        anyhow::bail!("prewarm: `arena demo` keeps no simulator warm (drop --prewarm / ARENA_PREWARM)");
    }
    if a.config.serving.bind.is_none() {
        config.bind = "127.0.0.1:0".parse().expect("valid address");
    }
    let checked = super::serve::check_gpu_worker(&config)?;
    if let Some(checked) = checked.filter(|_| !a.json) {
        println!("{checked}");
    }
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    let state = runtime.block_on(AppState::open(config.clone()))?;
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(config.bind))
        .with_context(|| format!("listening on {}", config.bind))?;
    let addr = listener.local_addr()?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let server = runtime.spawn(app::serve(listener, state.clone(), async {
        let _ = stop_rx.await;
    }));
    if !a.json {
        println!(
            "server: http://{addr} (database {})",
            crate::storage::redact_url(&config.database_url())
        );
    }

    let encoding = match a.encoding {
        EncodingArg::Binary => Encoding::Binary,
        EncodingArg::Json => Encoding::Json,
    };
    let summary = submit(
        &runtime,
        &state,
        addr,
        &a.benchmark,
        &mut ReplayAgent::new(),
        "reference-replay (demo)",
        encoding,
        a.json,
    )?;
    let id = summary.submission_id.clone();
    let (submission, rows, board) = runtime.block_on(async {
        let s = state
            .storage
            .submission(&id)
            .await?
            .with_context(|| format!("submission {id} is not in the database"))?;
        let rows = state.storage.episodes(&id).await?;
        let spec = state.catalog.spec(&s.benchmark)?;
        let board = leaderboard::rank(&spec, &state.storage.completed_submissions(&s.benchmark).await?);
        anyhow::Ok((s, rows, board))
    })?;
    let located = |key: String| {
        state
            .objects
            .local_path(&key)
            .unwrap_or_else(|| format!("{}/{key}", state.objects.shown()).into())
    };
    let report_path = located(crate::objects::report_key(&id));
    // The merge runs after the completion: the file is there once it is done.
    let merged_key = crate::objects::trajectory_key(&id);
    state
        .objects
        .writes_in_flight()
        .wait_blocking(&merged_key, crate::trajectory_store::MERGE_WAIT);
    let trajectory_path = located(merged_key);
    // --json prints one document at the end, with the tracker part under "tracker".
    let mut document = serde_json::json!({
        "submission": submission,
        "episodes": rows,
        "leaderboard": board,
        "report": report_path,
        "trajectories": trajectory_path,
    });
    if !a.json {
        print_summary(&submission.id, &submission.benchmark, &rows, &board);
        println!("report:       {}", report_path.display());
        println!("trajectories: {}", trajectory_path.display());
    }
    anyhow::ensure!(
        submission.status == crate::storage::SubmissionStatus::Completed,
        "submission {id} ended {}",
        submission.status.as_str()
    );
    // On a backend that cannot run the tracker's benchmark (the GPU backend simulates no IMU),
    // the part is left out with the reason rather than tried and refused.
    let tracker_runs_here = state.catalog.load(TRACKER_BENCHMARK).map(|_| ());
    if let (false, Err(why)) = (a.no_tracker, &tracker_runs_here)
        && !a.json
    {
        println!("\n(the tracker part is left out: {why})");
    }
    if !a.no_tracker && tracker_runs_here.is_ok() {
        match tracker_dir(a.tracker.clone()) {
            None => {
                if !a.json {
                    println!("\n(no trained tracker at {TRACKER_DIR}: pass --tracker DIR to show one beside replay)");
                }
            }
            Some(dir) => {
                let policy = match given_tracker {
                    Some(policy) => policy,
                    None => TrackerPolicy::load(&dir).map_err(anyhow::Error::msg)?,
                };
                if !a.json {
                    println!(
                        "\nthe arena's PPO tracker ({}) beside replay on {TRACKER_BENCHMARK}:",
                        dir.display()
                    );
                }
                let name = "arena-ppo tracker (demo)";
                let mut tracker = TrackerAgent::new(policy);
                let replay = submit(
                    &runtime,
                    &state,
                    addr,
                    TRACKER_BENCHMARK,
                    &mut ReplayAgent::new(),
                    "reference-replay (demo)",
                    encoding,
                    a.json,
                )?;
                let trained = submit(
                    &runtime,
                    &state,
                    addr,
                    TRACKER_BENCHMARK,
                    &mut tracker,
                    name,
                    encoding,
                    a.json,
                )?;
                let (rows, board) = runtime.block_on(async {
                    let rows = state.storage.episodes(&trained.submission_id).await?;
                    let spec = state.catalog.spec(TRACKER_BENCHMARK)?;
                    let board =
                        leaderboard::rank(&spec, &state.storage.completed_submissions(TRACKER_BENCHMARK).await?);
                    anyhow::Ok((rows, board))
                })?;
                document["tracker"] = serde_json::json!({
                    "checkpoint": dir, "submission": trained.submission_id,
                    "replay_submission": replay.submission_id, "episodes": rows, "leaderboard": board,
                });
                if !a.json {
                    print_summary(&trained.submission_id, TRACKER_BENCHMARK, &rows, &board);
                }
            }
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&document)?);
    }
    if a.keep_serving {
        println!("serving on http://{addr} until Ctrl-C; try:");
        println!("  the web pages: http://{addr}/ (this run: http://{addr}/#/submissions/{id})");
        println!("  curl http://{addr}/api/v1/leaderboards/{}", submission.benchmark);
        runtime.block_on(async {
            let _ = tokio::signal::ctrl_c().await;
        });
    }
    // Every submission's trajectory file is merged before the process ends: a merge cut short
    // would leave its episodes' parts until some later `arena serve` on this data folder.
    if let Some(tracker) = document.get("tracker") {
        for key in ["submission", "replay_submission"] {
            if let Some(id) = tracker[key].as_str() {
                state
                    .objects
                    .writes_in_flight()
                    .wait_blocking(&crate::objects::trajectory_key(id), crate::trajectory_store::MERGE_WAIT);
            }
        }
    }
    let _ = stop_tx.send(());
    runtime.shutdown_timeout(std::time::Duration::from_secs(2));
    drop(server);
    Ok(())
}

/// The tracker to show: `--tracker`, else the committed one (from the working directory, or
/// from the checkout this binary was built in).
fn tracker_dir(given: Option<PathBuf>) -> Option<PathBuf> {
    if given.is_some() {
        return given;
    }
    let built_in = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..").join(TRACKER_DIR);
    [PathBuf::from(TRACKER_DIR), built_in]
        .into_iter()
        .find(|d| d.join("policy.json").is_file())
}

/// One submission by `agent` on `benchmark`, as a team of its own (so that each agent has its
/// row on the leaderboard), through the SDK client over a loopback WebSocket, with a progress
/// bar unless `quiet`.
#[allow(clippy::too_many_arguments)]
fn submit(
    runtime: &tokio::runtime::Runtime,
    state: &std::sync::Arc<AppState>,
    addr: SocketAddr,
    benchmark: &str,
    agent: &mut dyn Agent,
    agent_name: &str,
    encoding: Encoding,
    quiet: bool,
) -> anyhow::Result<RunSummary> {
    // A team for this run; the token goes straight to the SDK client.
    let token = format!("demo_{}", uuid::Uuid::new_v4().simple());
    let team_name = format!("demo-{}", &uuid::Uuid::new_v4().simple().to_string()[..8]);
    runtime.block_on(state.storage.create_team(&team_name, &hash_token(&token)))?;
    let mut client_config = ClientConfig::new(
        format!("ws://{addr}/api/v1/agent"),
        token,
        Mode::Submission {
            benchmark: benchmark.to_string(),
            submission_id: None,
        },
    );
    client_config.agent_name = agent_name.into();
    client_config.encoding = encoding;
    let bar = if quiet {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(0)
    };
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:30} {pos}/{len} episodes  {msg}")
            .expect("valid template"),
    );
    // The SDK client runs on a thread of its own, as a participant's program would.
    let summary = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                client::run_blocking(&client_config, agent, &mut |event| match event {
                    ClientEvent::Connected(c) => {
                        bar.set_length(c.episodes_remaining as u64);
                        bar.set_message(format!("{agent_name}: submission {}", c.submission_id));
                    }
                    ClientEvent::EpisodeEnd(e) => {
                        bar.inc(1);
                        bar.set_message(format!("episode {} {}", e.episode_id, e.status));
                    }
                    _ => {}
                })
            })
            .join()
            .expect("the client thread does not panic")
    })?;
    bar.finish_and_clear();
    Ok(summary)
}

fn print_summary(id: &str, benchmark: &str, rows: &[crate::storage::EpisodeRow], board: &leaderboard::Leaderboard) {
    let scored = rows
        .iter()
        .filter(|r| matches!(r.status, EpisodeState::Completed | EpisodeState::Fell))
        .count();
    let unscored = rows
        .iter()
        .filter(|r| matches!(r.status, EpisodeState::Failed | EpisodeState::Timeout))
        .count();
    println!(
        "submission {id} on {benchmark}: {} episodes, {scored} scored, {unscored} failed unscored",
        rows.len()
    );
    // The benchmark's own: its success rules, its survival time, its primary metric and
    // tie-breakers (as its board ranks them), each with its unit.
    let mut columns: Vec<&str> = Vec::new();
    let tie_breakers = board.entries.first().map(|e| &e.tie_breakers);
    for name in [
        &board.success_metric,
        &board.other_success_metric,
        &board.survival_metric,
    ]
    .into_iter()
    .flatten()
    .chain([&board.primary])
    .chain(tie_breakers.into_iter().flatten().map(|(name, _)| name))
    {
        if !columns.contains(&name.as_str()) {
            columns.push(name);
        }
    }
    print!("{:<18} {:>9} {:>6}", "motion", "status", "steps");
    for c in &columns {
        print!(" {c:>13}");
    }
    println!();
    print!("{:<18} {:>9} {:>6}", "", "", "");
    for c in &columns {
        print!(" {:>13}", arena_bench::metrics::metric_info(c).map_or("", |i| i.units));
    }
    println!();
    let metric = |r: &crate::storage::EpisodeRow, m: &str| {
        r.metrics.get(m).map_or_else(|| "-".to_string(), |v| format!("{v:.3}"))
    };
    for r in rows {
        let status = match r.status {
            EpisodeState::Completed => "completed",
            EpisodeState::Fell => "fell",
            EpisodeState::Failed => "FAILED",
            EpisodeState::Timeout => "TIMEOUT",
            EpisodeState::Pending => "pending",
            EpisodeState::Running => "running",
        };
        print!("{:<18} {:>9} {:>6}", r.motion, status, r.steps);
        for c in &columns {
            print!(" {:>13}", metric(r, c));
        }
        println!();
        if let Some(reason) = &r.reason {
            println!("    reason: {reason}");
        }
    }
    let mut rule = String::new();
    if let Some(m) = &board.success_metric {
        rule.push_str(&format!("{m} rate first, then "));
    }
    if let Some(m) = &board.survival_metric {
        rule.push_str(&format!("longest mean {m}, then "));
    }
    rule.push_str(&format!("{} mean, {} is better", board.primary, board.direction));
    println!("\nleaderboard {} ({rule}):", board.benchmark);
    let survival_label = board.survival_metric.as_deref().unwrap_or("-");
    println!(
        "{:>4}  {:<16} {:<26} {:>8} {:>14} {:>10} {:>7}",
        "rank", "team", "agent", "success", survival_label, board.primary, "scored"
    );
    let unranked = board.unranked.iter().map(|e| (e, "unranked: no episode scored"));
    let rows = board.entries.iter().map(|e| (e, "")).chain(unranked);
    for (e, note) in rows.take(10) {
        let score = e.score.map_or_else(|| "-".into(), |v| format!("{v:.4}"));
        let survival = e.survival.map_or_else(|| "-".into(), |v| format!("{v:.2} s"));
        let success = e
            .success_rate
            .map_or_else(|| "-".into(), |v| format!("{:.0}%", 100.0 * v));
        let rank = match e.rank {
            Some(r) => r.to_string(),
            None if e.baseline => "base".into(),
            None => "-".into(),
        };
        let marker = if e.submission_id == id { "  <- this run" } else { "" };
        println!(
            "{rank:>4}  {:<16} {:<26} {:>8} {:>14} {:>10} {:>7}{marker}{}",
            e.team,
            e.agent_name,
            success,
            survival,
            score,
            e.scored_episodes,
            if note.is_empty() {
                String::new()
            } else {
                format!("  ({note})")
            }
        );
    }
}
