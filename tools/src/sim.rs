//! `arena sim export-model|rollout|bench`.

use crate::backend::BackendArgs;
use anyhow::{Context, bail};
use arena_data::NUM_JOINTS;
use arena_sim::SimBackend;
use arena_sim::dr::DrLevel;
use arena_sim::env::{EpisodeAssignment, EpisodeStatus, TrackingEnv, TrackingEnvConfig};
use arena_sim::motion::MotionLibrary;
use arena_sim::policy::{Policy, ReplayPolicy, ZeroPolicy};
use arena_sim::{GainSet, RobotConfig};
use clap::{Args, Subcommand, ValueEnum};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(Debug, Subcommand)]
pub enum SimCommand {
    /// Write the exact MJCF the simulator compiles.
    ExportModel {
        /// Robot (only `g1`, the Unitree G1 29 DOF, for now).
        #[arg(long, default_value = "g1")]
        robot: String,
        /// PD gain set (selects the joints' actuator force ranges).
        #[arg(long, value_enum, default_value_t = Gains::Base)]
        gains: Gains,
        /// Output MJCF file.
        #[arg(long)]
        out: PathBuf,
    },
    /// Roll out one episode from the motion's first frame and write one row per control step:
    /// time, then qpos (36 values, quaternion wxyz as MuJoCo). Row 0 is the reset state.
    Rollout(RolloutArgs),
    /// Measure control steps/s and physics steps/s of N envs tracking the built-in motions (or
    /// holding the default pose, `--policy zero`).
    Bench(BenchArgs),
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum Gains {
    /// The released policy's gains (g1_29dof.yaml).
    Base,
    /// Waist kp 300 / kd 5, hip pitch/roll effort 139 (g1_29dof_hard_waist.yaml).
    HardWaist,
}

impl From<Gains> for GainSet {
    fn from(g: Gains) -> GainSet {
        match g {
            Gains::Base => GainSet::Base,
            Gains::HardWaist => GainSet::HardWaist,
        }
    }
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum BuiltinPolicy {
    /// Open-loop floor: PD target = reference joint positions one step ahead.
    Replay,
    /// All-zero actions (PD target = default pose).
    Zero,
}

impl BuiltinPolicy {
    pub fn build(self) -> Box<dyn Policy> {
        match self {
            BuiltinPolicy::Replay => Box::new(ReplayPolicy),
            BuiltinPolicy::Zero => Box::new(ZeroPolicy),
        }
    }

    /// The same policy as an SDK agent (observations in, actions out).
    pub fn agent(self) -> Box<dyn arena_sdk::Agent> {
        match self {
            BuiltinPolicy::Replay => Box::new(arena_sdk::agents::ReplayAgent::new()),
            BuiltinPolicy::Zero => Box::new(arena_sdk::agents::ZeroAgent::default()),
        }
    }
}

#[derive(Debug, Args)]
pub struct RolloutArgs {
    /// Reference motion: G1 CSV (needs --fps) or NPZ (mjlab / BeyondMimic or holosoma layout).
    #[arg(long)]
    motion: PathBuf,
    /// Frame rate of a CSV motion file (an NPZ carries its own).
    #[arg(long)]
    fps: Option<f64>,
    /// Actions to apply: one row of 29 normalised values per control step.
    #[arg(long, conflicts_with = "policy", required_unless_present = "policy")]
    actions: Option<PathBuf>,
    /// Built-in policy instead of an action file.
    #[arg(long, value_enum)]
    policy: Option<BuiltinPolicy>,
    /// Domain randomisation level 0-3.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=3))]
    dr_level: u8,
    /// Episode seed: every domain-randomisation draw, noise and push comes from it.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// PD gain set.
    #[arg(long, value_enum, default_value_t = Gains::Base)]
    gains: Gains,
    /// Output CSV: a `#` header line, then time and qpos (36) per row.
    #[arg(long)]
    out: PathBuf,
    /// Also write qvel (35 values per row, MuJoCo layout) to this CSV.
    #[arg(long)]
    qvel_out: Option<PathBuf>,
}

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

pub fn run(cmd: SimCommand) -> anyhow::Result<()> {
    match cmd {
        SimCommand::ExportModel { robot, gains, out } => {
            if robot != "g1" {
                bail!("unknown robot {robot:?}: the only robot is `g1` (Unitree G1, 29 DOF)");
            }
            let xml = RobotConfig::new(gains.into()).mjcf();
            std::fs::write(&out, xml).with_context(|| format!("writing {}", out.display()))?;
            Ok(())
        }
        SimCommand::Rollout(a) => rollout(a),
        SimCommand::Bench(a) => bench(a),
    }
}

/// Reads an action CSV: rows of 29 finite-or-not numbers (non-finite values are passed on so
/// the env reports them as a failed episode).
fn read_actions(path: &Path) -> anyhow::Result<Vec<[f32; NUM_JOINTS]>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let mut row = [0.0f32; NUM_JOINTS];
        let fields: Vec<&str> = line.split(',').collect();
        if fields.len() != NUM_JOINTS {
            bail!(
                "{}:{}: expected {NUM_JOINTS} action values, found {}",
                path.display(),
                i + 1,
                fields.len()
            );
        }
        for (j, f) in fields.iter().enumerate() {
            row[j] = f.trim().parse().map_err(|_| {
                anyhow::anyhow!(
                    "{}:{}:{}: expected a number, found {:?}",
                    path.display(),
                    i + 1,
                    j + 1,
                    f.trim()
                )
            })?;
        }
        rows.push(row);
    }
    Ok(rows)
}

/// First line of a rollout's qpos file; readers (`arena metrics`) recognise rollouts by it.
pub const ROLLOUT_HEADER: &str = "# arena rollout: time, qpos (root xyz, quaternion wxyz, 29 joint angles)";
const QVEL_HEADER: &str = "# arena rollout: time, qvel (root linear xyz, root angular xyz, 29 joint velocities)";

/// Writes the rows beside `path` and renames the file into place ([`crate::write_replacing`]).
fn write_rows(path: &Path, header: &str, times: &[f64], values: &[f64], width: usize) -> anyhow::Result<()> {
    crate::write_replacing(path, |to| write_rows_to(to, header, times, values, width))
}

fn write_rows_to(path: &Path, header: &str, times: &[f64], values: &[f64], width: usize) -> anyhow::Result<()> {
    let file = std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = std::io::BufWriter::new(file);
    writeln!(out, "{header}")?;
    for (t, row) in times.iter().zip(values.chunks_exact(width)) {
        write!(out, "{t}")?;
        for v in row {
            write!(out, ",{v}")?;
        }
        writeln!(out)?;
    }
    out.flush()?;
    Ok(())
}

use crate::same_file;

fn rollout(a: RolloutArgs) -> anyhow::Result<()> {
    let outputs = std::iter::once(&a.out).chain(a.qvel_out.as_ref());
    for out in outputs {
        let inputs = std::iter::once(&a.motion).chain(a.actions.as_ref());
        if let Some(input) = inputs.into_iter().find(|i| same_file(i, out)) {
            bail!(
                "{} is an input of this rollout; write the rollout to another file",
                input.display()
            );
        }
        crate::check_writable(out)?;
    }
    if a.qvel_out.as_ref().is_some_and(|q| q == &a.out || same_file(q, &a.out)) {
        bail!("--out and --qvel-out name the same file");
    }
    let robot = RobotConfig::new(a.gains.into());
    let clip = crate::read_motion_file(&a.motion, a.fps)?;
    let library = Arc::new(MotionLibrary::from_clips(std::slice::from_ref(&clip), &robot)?);
    let config = TrackingEnvConfig {
        robot,
        num_envs: 1,
        threads: 1,
        ..Default::default()
    };
    let mut env = TrackingEnv::new(config, library)?;
    let assignment = EpisodeAssignment {
        motion: 0,
        start_time: 0.0,
        seed: a.seed,
        dr_level: DrLevel::try_from(a.dr_level).map_err(anyhow::Error::msg)?,
    };
    env.reset(&[(0, assignment)])?;
    let file_actions = a.actions.as_deref().map(read_actions).transpose()?;
    let mut policy = a.policy.map(BuiltinPolicy::build);
    let mut action = [0.0f32; NUM_JOINTS];
    let mut k = 0;
    while env.infos()[0].status == EpisodeStatus::Running {
        match (&file_actions, &mut policy) {
            (Some(rows), _) => match rows.get(k) {
                Some(r) => action = *r,
                None => break,
            },
            (None, Some(p)) => p.act(&env, &mut action),
            (None, None) => unreachable!("clap requires --actions or --policy"),
        }
        env.step(&action)?;
        k += 1;
    }
    let traj = env.trajectory(0);
    let status = &env.infos()[0].status;
    if let EpisodeStatus::Failed(reason) = status {
        // The partial rows go beside the output; an existing output stays as it was.
        let partial = a.out.with_file_name(format!(
            "{}.partial",
            a.out.file_name().map_or("rollout".into(), |n| n.to_string_lossy())
        ));
        write_rows(
            &partial,
            ROLLOUT_HEADER,
            &traj.rows.times,
            &traj.rows.qpos,
            arena_sim::handler::NQ,
        )?;
        bail!(
            "episode failed after {} control steps: {reason}; {} left unchanged, the rows so far are in {}",
            traj.len().saturating_sub(1),
            a.out.display(),
            partial.display()
        );
    }
    write_rows(
        &a.out,
        ROLLOUT_HEADER,
        &traj.rows.times,
        &traj.rows.qpos,
        arena_sim::handler::NQ,
    )?;
    if let Some(p) = &a.qvel_out {
        write_rows(
            p,
            QVEL_HEADER,
            &traj.rows.times,
            &traj.rows.qvel,
            arena_sim::handler::NV,
        )?;
    }
    // In the words of `arena eval`'s episodes.
    let ended = match status {
        EpisodeStatus::Truncated => "completed (the motion's end)".to_string(),
        EpisodeStatus::Fell => "fell".to_string(),
        EpisodeStatus::Running => format!("stopped: the action file ends after {k} rows, before the motion does"),
        other => other.to_string(),
    };
    eprintln!(
        "{}: {} control steps, {:.2} s of motion, {ended} -> {}",
        clip.name,
        traj.len() - 1,
        traj.rows.times.last().copied().unwrap_or(0.0),
        a.out.display()
    );
    Ok(())
}

fn bench(a: BenchArgs) -> anyhow::Result<()> {
    if a.envs == 0 || a.steps == 0 {
        bail!("--envs and --steps must be at least 1");
    }
    let robot = RobotConfig::default();
    let clips = MotionLibrary::builtin_clips(&robot)?;
    let library = Arc::new(MotionLibrary::from_clips(&clips, &robot)?);
    let backend = a.backend.backend();
    if a.dump.is_some() && backend != SimBackend::Cpu {
        bail!("--dump replays per-substep torques, which only the cpu backend logs");
    }
    if a.dump.is_some() && !matches!(a.policy, BuiltinPolicy::Replay) {
        bail!("--dump records the replay policy's episodes: it needs --policy replay");
    }
    if a.dump.is_some() && a.no_record {
        bail!("--dump writes the recorded episodes: leave out --no-record");
    }
    let rules = match &a.benchmark {
        Some(name) => {
            if a.dump.is_some() {
                bail!("--dump replays the default rules' episodes: leave out --benchmark");
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
    let mut env = TrackingEnv::new(config.clone(), library.clone())?;
    let all: Vec<_> = (0..a.envs).map(|e| (e, assignment(e))).collect();
    let mut policy = a.policy.build();
    if let Some(dir) = &a.dump {
        let shortest = library.motions.iter().map(|m| m.num_frames - 1).min().unwrap_or(0);
        if a.steps > shortest {
            bail!("--dump needs --steps <= {shortest} (the shortest built-in motion) so no env restarts");
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

/// Runs the benchmark's episodes once with torque logging and writes what MuJoCo's rollout
/// needs to replay the same physics: `model.xml`, `initial_qpos.f64`, `initial_qvel.f64`
/// (N×36, N×35), `torques.f64` (N × steps·4 × 29), `final_qpos.f64` and `meta.json`; and for a
/// replay that runs its own PD loop, `commands.f64` (per env [`Handler::command_log`]'s layout:
/// kp and kd, 29 each, then per control step 29 targets and 29 feed-forward torques).
///
/// [`Handler::command_log`]: arena_sim::handler::Handler::command_log
fn dump_replay(
    env: &mut TrackingEnv,
    all: &[(usize, EpisodeAssignment)],
    policy: &mut ReplayPolicy,
    steps: usize,
    dir: &Path,
    robot: &RobotConfig,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    let n = env.num_envs();
    // The dump reads the recordings of running envs: every row appended as it is read.
    env.record_behind_physics(false);
    env.set_torque_logging(true)?;
    env.reset(all)?;
    let mut initial_qpos = Vec::new();
    let mut initial_qvel = Vec::new();
    for e in 0..n {
        initial_qpos.extend_from_slice(&env.trajectory(e).rows.qpos[..arena_sim::handler::NQ]);
        initial_qvel.extend_from_slice(&env.trajectory(e).rows.qvel[..arena_sim::handler::NV]);
    }
    let mut actions = vec![0.0f32; n * NUM_JOINTS];
    for _ in 0..steps {
        policy.act(env, &mut actions);
        env.step(&actions)?;
    }
    let mut torques = Vec::new();
    let mut commands = Vec::new();
    let mut final_qpos = Vec::new();
    for e in 0..n {
        let log = env.handler().command_log(e).context("command log")?;
        anyhow::ensure!(
            log.len() == (2 + 2 * steps) * NUM_JOINTS,
            "env {e}: {} logged command values, expected {}",
            log.len(),
            (2 + 2 * steps) * NUM_JOINTS
        );
        commands.extend_from_slice(log);
        let log = env.handler().torque_log(e).context("torque log")?;
        anyhow::ensure!(
            log.len() == steps * arena_sim::DECIMATION * NUM_JOINTS,
            "env {e} stopped early ({:?})",
            env.infos()[e].status
        );
        torques.extend_from_slice(log);
        let t = env.trajectory(e);
        final_qpos.extend_from_slice(&t.rows.qpos[t.rows.qpos.len() - arena_sim::handler::NQ..]);
    }
    let write_f64 = |name: &str, v: &[f64]| -> anyhow::Result<()> {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        std::fs::write(dir.join(name), bytes).with_context(|| format!("writing {name}"))
    };
    std::fs::write(dir.join("model.xml"), robot.mjcf())?;
    write_f64("initial_qpos.f64", &initial_qpos)?;
    write_f64("initial_qvel.f64", &initial_qvel)?;
    write_f64("torques.f64", &torques)?;
    write_f64("commands.f64", &commands)?;
    write_f64("final_qpos.f64", &final_qpos)?;
    let meta = serde_json::json!({"envs": n, "steps": steps, "substeps": steps * arena_sim::DECIMATION,
        "nu": NUM_JOINTS, "effort": robot.effort});
    std::fs::write(dir.join("meta.json"), meta.to_string())?;
    Ok(())
}
