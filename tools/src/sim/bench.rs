//! `arena sim bench`: control steps/s of N envs tracking the built-in motions, split by phase.

use super::BuiltinPolicy;
use super::dump::dump_replay;
use crate::backend::BackendArgs;
use arena_sim::RobotConfig;
use arena_sim::SimBackend;
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, TrackingEnv, TrackingEnvConfig};
use arena_sim::motion::MotionLibrary;
use arena_sim::policy::{Policy, ReplayPolicy};
use clap::Args;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Parallel environments.
    #[arg(long, default_value_t = 16)]
    envs: usize,
    /// Control steps per env (episodes restart when a motion ends).
    #[arg(long, default_value_t = 200)]
    steps: usize,
    /// Timed runs of --steps each, one after the other on the same envs: the median run (by
    /// wall time) is reported, with every run's total and host side beside it.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=100))]
    repeats: u16,
    /// Worker threads (0 = all cores).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    #[command(flatten)]
    backend: BackendArgs,
    /// Print one JSON object instead of a sentence.
    #[arg(long)]
    json: bool,
    /// Write the exported model, each env's initial state, its per-substep torques and the PD
    /// loop's inputs to this folder so the same physics can be replayed by MuJoCo's own rollout
    /// and the same workload by MuJoCo Warp (bench/). Requires --steps no longer than the
    /// shortest built-in motion (200).
    #[arg(long)]
    dump: Option<PathBuf>,
    /// With --dump: stop once the folder is written (no measured run).
    #[arg(long, requires = "dump")]
    dump_only: bool,
    /// Skip trajectory recording (as training does); evaluations record every step.
    #[arg(long)]
    no_record: bool,
    /// The stand-in agent: `replay` tracks the built-in motions open loop; `zero` holds the
    /// default pose (standing robots, the workload of the physics libraries' own benchmarks, so
    /// that a comparison with them measures the arena's overhead rather than harder physics).
    #[arg(long, value_enum, default_value_t = BuiltinPolicy::Replay)]
    policy: BuiltinPolicy,
    /// Append each recorded row in the refresh that reads it, instead of during the next step
    /// while the backend simulates (as evaluations do; on the GPU backend the recording then
    /// overlaps the worker's physics). For comparing the two.
    #[arg(long)]
    record_inline: bool,
    /// Step under a benchmark's rules (its name in the benchmarks folder, or its file): the env
    /// builds only the observation groups it sends, and each step every env's row is filled as
    /// a served evaluation's lane fills the agent's (a column "agent rows"); its fall rule, action
    /// mode with its gains, and DR level apply. The motions stay the built-in ones. Without it:
    /// every group the env builds (state, privileged_state, last_action, history_actor), no
    /// agent rows, no fall rule, the normalized action mode, DR level 0.
    #[arg(long, value_name = "NAME_OR_FILE")]
    benchmark: Option<String>,
    /// With --benchmark: fill each row with the whole `reference_goal` group, as a session
    /// that asks for whole rows gets it, instead of its newest row alone (each row sent once,
    /// what the SDKs ask for by default; docs/protocol.md §5).
    #[arg(long, requires = "benchmark")]
    whole_goal_rows: bool,
    #[command(flatten)]
    dir: crate::bench::BenchDirArg,
}

pub(super) fn bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.envs == 0 || a.steps == 0 {
        return Err(arena_sdk::cli::UsageError("--envs and --steps must be at least 1".into()).into());
    }
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot)?;
    let library = Arc::new(MotionLibrary::from_clips(&clips, &robot)?);
    let backend = a.backend.backend()?;
    if a.dump.is_some() && backend != SimBackend::Cpu {
        return Err(arena_sdk::cli::UsageError(
            "--dump replays per-substep torques, which only the cpu backend logs".into(),
        )
        .into());
    }
    if a.dump.is_some() && !matches!(a.policy, BuiltinPolicy::Replay) {
        return Err(arena_sdk::cli::UsageError(
            "--dump records the replay policy's episodes: it needs --policy replay".into(),
        )
        .into());
    }
    if a.dump.is_some() && a.no_record {
        return Err(
            arena_sdk::cli::UsageError("--dump writes the recorded episodes: leave out --no-record".into()).into(),
        );
    }
    let rules = match &a.benchmark {
        Some(name) => {
            if a.dump.is_some() {
                return Err(arena_sdk::cli::UsageError(
                    "--dump replays the default rules' episodes: leave out --benchmark".into(),
                )
                .into());
            }
            let known = arena_bench::metrics::metric_names();
            Some(arena_bench::spec::find_benchmark(name, &a.dir.dir(), &known)?.1)
        }
        None => None,
    };
    let (base, dr_level) = match &rules {
        Some(spec) => (
            arena_runner::episode::env_config(spec, None, a.envs, a.threads),
            DrLevel::try_from(spec.episodes.dr_level).map_err(anyhow::Error::msg)?,
        ),
        None => (env_config(&robot, a.envs, a.threads), DrLevel::L0),
    };
    let config = TrackingEnvConfig {
        backend,
        record: !a.no_record,
        ..base
    };
    let mut agent_rows = rules
        .as_ref()
        .map(|spec| AgentRows::new(spec, a.envs, !a.whole_goal_rows));
    let assignment = |e: usize| EpisodeAssignment {
        motion: e % library.len(),
        start_time: 0.0,
        seed: e as u64,
        dr_level,
    };
    if let SimBackend::Gpu(options) = &config.backend {
        // The worker's start is not timed and says nothing itself (MJX compiles its step for
        // the batch: a minute or more on a CPU).
        eprintln!(
            "starting the GPU worker for {} envs ({} on device {})…",
            a.envs,
            options
                .implementation
                .resolve(options.device, options.x64, arena_sim::handler::cuda_device_present()),
            options.device
        );
    }
    let mut env = TrackingEnv::new(config.clone(), library.clone())?;
    let all: Vec<_> = (0..a.envs).map(|e| (e, assignment(e))).collect();
    let mut policy = a.policy.build();
    if let Some(dir) = &a.dump {
        let shortest = library.motions.iter().map(|m| m.num_frames - 1).min().unwrap_or(0);
        if a.steps > shortest {
            return Err(arena_sdk::cli::UsageError(format!(
                "--dump needs --steps <= {shortest} (the shortest built-in motion) so no env restarts"
            ))
            .into());
        }
        dump_replay(&mut env, &all, &mut ReplayPolicy, a.steps, dir, &robot)?;
        if a.dump_only {
            eprintln!(
                "{} envs × {} control steps written to {}",
                a.envs,
                a.steps,
                dir.display()
            );
            return Ok(());
        }
        // The measured run on a fresh env of the same configuration.
        env = TrackingEnv::new(config, library.clone())?;
    }
    env.record_behind_physics(!a.record_inline);
    env.reset(&all)?;
    let mut actions = vec![0.0f32; a.envs * env.action_width()];
    // Each run continues the episodes of the one before; the median run's figures are given,
    // with every run's total and host side beside them (these machines are noisy).
    let mut runs = Vec::with_capacity(usize::from(a.repeats));
    for _ in 0..a.repeats {
        runs.push(timed_run(
            &mut env,
            policy.as_mut(),
            agent_rows.as_mut(),
            &mut actions,
            a.steps,
            &assignment,
        )?);
    }
    let totals: Vec<f64> = runs
        .iter()
        .map(|r| r.split["total"].as_f64().unwrap_or(f64::NAN))
        .collect();
    let host_sides: Vec<Option<f64>> = runs.iter().map(|r| r.host_side).collect();
    runs.sort_by(|x, y| x.secs.total_cmp(&y.secs));
    let TimedRun {
        secs,
        split,
        worker,
        host_side,
    } = runs.swap_remove(runs.len() / 2);
    let control = (a.envs * a.steps) as f64 / secs;
    let threads = env.handler().num_threads();
    let backend = env.handler().describe();
    if a.json {
        let v = serde_json::json!({
            "backend": backend,
            "policy": format!("{:?}", a.policy).to_lowercase(),
            "benchmark": rules.as_ref().map(|s| s.name.clone()),
            "observation_groups": rules.as_ref().map(|s| s.observations.groups.clone()),
            // As sent: with each `reference_goal` row once unless --whole-goal-rows.
            "agent_row_values": agent_rows.as_ref().map(|r| r.plan.size()),
            "goal_rows_once": agent_rows.as_ref().map(|r| r.plan.goal_rows_once()),
            "envs": a.envs, "steps": a.steps, "threads": threads, "seconds": secs,
            "control_steps_per_s": control, "physics_steps_per_s": control * arena_sim::DECIMATION as f64,
            "ms_per_step": split,
            "worker_ms_per_step": worker,
            // Every run's, in the order they ran; `ms_per_step` is the median run's.
            "repeats": a.repeats,
            "total_ms_per_step_runs": totals,
            "host_side_ms_per_step_runs": host_sides,
            // Where the GPU worker's start-up went (null on the CPU backend).
            "worker_startup": env.handler().worker_startup(),
        });
        println!("{v}");
    } else {
        println!(
            "{} envs × {} steps on {backend}, {threads} thread{}: {:.0} control steps/s, {:.0} physics steps/s ({:.3} s)",
            a.envs,
            a.steps,
            if threads == 1 { "" } else { "s" },
            control,
            control * arena_sim::DECIMATION as f64,
            secs
        );
        let ms = |k: &str| split[k].as_f64().unwrap_or(f64::NAN);
        let rows_column = match (&rules, &agent_rows) {
            (Some(spec), Some(rows)) => {
                println!(
                    "  under {}'s rules: groups {}, {} values per agent row{}, {} action mode",
                    spec.name,
                    spec.observations.groups.join(", "),
                    rows.plan.size(),
                    match rows.plan.goal_rows_once() {
                        true => " (each reference_goal row sent once)",
                        false => "",
                    },
                    env.action_mode().name()
                );
                format!(", {:.3} agent rows", ms("agent_rows"))
            }
            _ => String::new(),
        };
        println!(
            "  ms per control step: {:.3} commands, {:.3} physics (the backend's step), {:.3} observations{rows_column}, {:.3} recording during the next step, {:.3} resets, {:.3} policy, {:.3} in all",
            ms("commands"),
            ms("physics"),
            ms("observations"),
            ms("recording_behind"),
            ms("resets"),
            ms("policy"),
            ms("total"),
        );
        if let Some(host) = host_side {
            println!("  host side (all but the worker's physics call and the policy): {host:.3} ms per control step");
        }
        if a.repeats > 1 {
            let list = |values: &mut dyn Iterator<Item = f64>| {
                values.map(|v| format!("{v:.3}")).collect::<Vec<_>>().join(", ")
            };
            println!(
                "  the median of {} runs (ms per control step, in the order they ran): in all {}{}",
                a.repeats,
                list(&mut totals.iter().copied()),
                match host_sides.iter().all(Option::is_some) {
                    true => format!("; host side {}", list(&mut host_sides.iter().flatten().copied())),
                    false => String::new(),
                }
            );
        }
        if let Some(w) = worker.as_object() {
            let phases: Vec<String> = w
                .iter()
                .filter_map(|(k, v)| Some(format!("{:.3} {}", v.as_f64()?, k.strip_suffix("_ms")?)))
                .collect();
            let count = |k: &str| w.get(k).and_then(|v| v.as_f64()).unwrap_or(0.0);
            println!(
                "  in the worker ({} step and {} sync commands), ms per control step: {}",
                count("step"),
                count("sync"),
                phases.join(", ")
            );
        }
    }
    Ok(())
}

/// The rows a served evaluation's lane fills for its agent each step, filled the same way
/// (`ObservationPlan::fill` on the env's threads, every env's row), for `sim bench --benchmark`.
struct AgentRows {
    plan: arena_runner::observations::ObservationPlan,
    rows: Vec<f32>,
}

impl AgentRows {
    /// The rows of `envs` sessions' episodes, each `reference_goal` row sent once when `goal_once`.
    fn new(spec: &arena_bench::spec::BenchmarkSpec, envs: usize, goal_once: bool) -> Self {
        let plan = arena_runner::observations::ObservationPlan::for_slots(spec, envs).sending_goal_rows_once(goal_once);
        let rows = vec![0.0; envs * plan.size()];
        Self { plan, rows }
    }

    fn fill(&mut self, env: &TrackingEnv) {
        use arena_runner::observations::ReferenceScratch;
        use rayon::prelude::*;
        let (plan, d) = (&self.plan, self.plan.size());
        if d == 0 {
            return;
        }
        let fill =
            |scratch: &mut ReferenceScratch, (slot, row): (usize, &mut [f32])| plan.fill(env, slot, scratch, row);
        match env.handler().pool() {
            Some(pool) => pool.install(|| {
                self.rows
                    .par_chunks_mut(d)
                    .enumerate()
                    .for_each_init(ReferenceScratch::default, fill)
            }),
            None => {
                let mut scratch = ReferenceScratch::default();
                self.rows
                    .chunks_mut(d)
                    .enumerate()
                    .for_each(|row| fill(&mut scratch, row));
            }
        }
    }
}

/// The worker's time per control step (ms) between two of its `stats` replies, phase by phase
/// (the worker's `<phase>_s` become `<phase>_ms`), with the commands it ran (`step`, `sync`);
/// null without a worker.
/// One timed run of `sim bench`: its seconds, where they went per control step (ms), the GPU
/// worker's own split, and issue 41's host side.
struct TimedRun {
    secs: f64,
    split: serde_json::Value,
    worker: serde_json::Value,
    host_side: Option<f64>,
}

/// `steps` control steps of `env` under `policy`, envs whose episode ends restarting at once.
fn timed_run(
    env: &mut TrackingEnv,
    policy: &mut dyn Policy,
    mut agent_rows: Option<&mut AgentRows>,
    actions: &mut [f32],
    steps: usize,
    assignment: &dyn Fn(usize) -> EpisodeAssignment,
) -> anyhow::Result<TimedRun> {
    let envs = env.num_envs();
    let before = env.timings();
    let worker_before = env.worker_timings()?;
    let mut policy_s = 0.0;
    let mut agent_rows_s = 0.0;
    let start = Instant::now();
    for _ in 0..steps {
        if let Some(rows) = agent_rows.as_deref_mut() {
            let started = Instant::now();
            rows.fill(env);
            agent_rows_s += started.elapsed().as_secs_f64();
        }
        let started = Instant::now();
        policy.act(env, actions);
        policy_s += started.elapsed().as_secs_f64();
        env.step(actions)?;
        let done: Vec<_> = (0..envs)
            .filter(|&e| env.infos()[e].status.is_done())
            .map(|e| (e, assignment(e)))
            .collect();
        if !done.is_empty() {
            env.reset(&done)?;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    let after = env.timings();
    let worker_after = env.worker_timings()?;
    // Per control step, milliseconds: where the loop's time went.
    let per_step = |s: f64| 1000.0 * s / steps as f64;
    let worker = worker_split(worker_before.as_ref(), worker_after.as_ref(), steps);
    // Issue 41's measure of what surrounds the physics: everything but the worker's physics
    // call (`advance`: the stub's stand-in physics and output copy, or the device's launches,
    // physics and copy back) and the bench's own policy (the agent's work, not the server's).
    let host_side = worker
        .get("advance_ms")
        .and_then(|v| v.as_f64())
        .map(|advance| per_step(secs) - per_step(policy_s) - advance);
    let split = serde_json::json!({
        "physics": per_step(after.physics_s - before.physics_s),
        "observations": per_step(after.refresh_s - before.refresh_s),
        "commands": per_step(after.command_s - before.command_s),
        "recording_behind": per_step(after.record_s - before.record_s),
        "resets": per_step(after.reset_s - before.reset_s),
        "policy": per_step(policy_s),
        "agent_rows": per_step(agent_rows_s),
        "total": per_step(secs),
        "host_side": host_side,
    });
    Ok(TimedRun {
        secs,
        split,
        worker,
        host_side,
    })
}

fn worker_split(
    before: Option<&serde_json::Map<String, serde_json::Value>>,
    after: Option<&serde_json::Map<String, serde_json::Value>>,
    steps: usize,
) -> serde_json::Value {
    let (Some(before), Some(after)) = (before, after) else {
        return serde_json::Value::Null;
    };
    let mut out = serde_json::Map::new();
    for (k, v) in after {
        let (Some(now), Some(then)) = (v.as_f64(), before.get(k).and_then(|b| b.as_f64())) else {
            continue;
        };
        match k.strip_suffix("_s") {
            Some(phase) => out.insert(
                format!("{phase}_ms"),
                serde_json::json!(1000.0 * (now - then) / steps as f64),
            ),
            None => out.insert(k.clone(), serde_json::json!(now - then)),
        };
    }
    serde_json::Value::Object(out)
}

fn env_config(robot: &RobotConfig, envs: usize, threads: usize) -> TrackingEnvConfig {
    TrackingEnvConfig {
        robot: robot.clone(),
        num_envs: envs,
        threads,
        ..Default::default()
    }
}
