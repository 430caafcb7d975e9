//! The cost of learning: env steps per second of whole training iterations (rollout with the
//! policy, rewards, resets, PPO update) against the simulator stepping the same envs alone,
//! interleaved run by run in one process. Prints both rates and their ratio (issue 41's §3).
//!
//! "The same envs" is the training's own simulator calls replayed on a fresh `TrackingEnv`
//! ([`arena_ppo::sim_tape`]): the same resets, start states and commands, so the same contacts,
//! checked state for state after the replay. For comparison it also steps a standing robot
//! (default-pose targets, resets at the motion's end or a fall), the earlier reference, which
//! is lighter work for MuJoCo than training's falling robots.
//!
//! With `--stub-physics` the envs run on the GPU backend's stub (no physics; the worker on the
//! CPU): what training costs around the simulator, at the sizes of a GPU run (`--envs 4096`),
//! split into the simulator's step, rewards, resets and observations (issue 42's goal is
//! 100,000 env steps/s). Without physics every episode ends at once, so resets are the worst case.
//!
//! `cargo run --release -p arena-ppo --example training_throughput -- --iterations 20 --runs 3`
//! `cargo run --release -p arena-ppo --example training_throughput -- --stub-physics --envs 4096 --iterations 2 --runs 1`

use arena_bench::metrics::metric_names;
use arena_bench::spec;
use arena_ppo::config::PpoTrainConfig;
use arena_ppo::mdp::POLICY_DEFAULT_POSE;
use arena_ppo::sim_tape;
use arena_ppo::train::Trainer;
use arena_sim::RobotConfig;
use arena_sim::dr::DrLevel;
use arena_sim::env::{ActionMode, EpisodeAssignment, EpisodeStatus, TrackingEnv, TrackingEnvConfig};
use arena_torch::run_dir::RunPaths;
use clap::Parser;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

#[derive(Parser)]
struct Args {
    /// Training configuration (its env and PPO sizes are measured).
    #[arg(long, default_value = "ppo/configs/g1-smoke.toml")]
    config: PathBuf,
    /// PPO iterations per run.
    #[arg(long, default_value_t = 20)]
    iterations: u64,
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// Envs (default: the configuration's).
    #[arg(long)]
    envs: Option<usize>,
    /// Simulator threads (default: the configuration's).
    #[arg(long)]
    threads: Option<usize>,
    /// The GPU backend's stub instead of physics (the worker's Python from ARENA_GPU_PYTHON):
    /// the cost of everything around the simulator.
    #[arg(long)]
    stub_physics: bool,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let mut config = PpoTrainConfig::load(&a.config).map_err(anyhow::Error::msg)?;
    config.run.eval_every = 0;
    config.run.checkpoint_every = a.iterations * 1000;
    if let Some(n) = a.envs {
        config.env.num_envs = n;
    }
    if let Some(t) = a.threads {
        config.env.threads = t;
    }
    if a.stub_physics {
        config.env.sim_backend = "gpu".into();
        config.env.gpu_impl = "stub".into();
        config.env.gpu_device = "cpu".into();
        config.env.allow_stub_physics = true;
    }
    let (_, spec) = spec::find_benchmark(&config.env.benchmark, &spec::shipped_dir(), &metric_names())?;
    let clips = arena_runner::episode::benchmark_clips(&spec, Path::new("."), &RobotConfig::default())?;
    let n = config.env.num_envs;
    let steps = a.iterations * (n * config.env.steps_per_env) as u64;
    let (mut train_rates, mut sim_rates, mut standing_rates) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..a.runs {
        let dir = tempfile::tempdir()?;
        let mut trainer = Trainer::new(
            config.clone(),
            spec.clone(),
            clips.clone(),
            RunPaths {
                dir: dir.path().to_path_buf(),
            },
            false,
        )?;
        trainer.envs.record_sim_calls();
        trainer.iteration()?; // warm-up (and the first reset)
        trainer.envs.sim_tape().expect("recording").mark();
        let (sim_before, update_before) = trainer.busy_split();
        let policy_before = trainer.rollout_policy_s();
        let parts_before = env_parts(&trainer.envs.stats);
        let t0 = Instant::now();
        for _ in 0..a.iterations {
            trainer.iteration()?;
        }
        let train_s = t0.elapsed().as_secs_f64();
        let train = steps as f64 / train_s;
        let (sim_after, update_after) = trainer.busy_split();
        let policy_s = trainer.rollout_policy_s() - policy_before;
        let parts: Vec<f64> = env_parts(&trainer.envs.stats)
            .iter()
            .zip(parts_before)
            .map(|(after, before)| after - before)
            .collect();

        let library = Arc::new(trainer.envs.library().clone());
        let mut replay_env = TrackingEnv::new(trainer.envs.sim_config()?, library.clone())?;
        let tape = trainer.envs.sim_tape().expect("recording").clone();
        let replayed = tape.replay(&mut replay_env)?;
        if let Some(why) = sim_tape::first_difference(trainer.envs.sim(), &replay_env) {
            anyhow::bail!("the replay diverged from the training's simulator ({why}): no like-for-like rate");
        }
        anyhow::ensure!(
            replayed.env_steps == steps,
            "replayed {} env steps of {steps}",
            replayed.env_steps
        );
        let replay = steps as f64 / replayed.seconds;
        drop(replay_env);

        let envs_s = sim_after - sim_before;
        let learn_s = update_after - update_before;
        println!(
            "run {run}: the envs' {envs_s:.2} s: simulator {:.2} s, rewards {:.2} s, resets {:.2} s, observations {:.2} s, \
             commands and rollout tensors {:.2} s ({:.1} ms per control step of {n} envs)",
            parts[0],
            parts[1],
            parts[2],
            parts[3],
            envs_s - parts.iter().sum::<f64>(),
            1e3 * envs_s / (a.iterations * config.env.steps_per_env as u64) as f64
        );
        println!(
            "run {run}: policy and update {learn_s:.2} s: the rollout's action sampling {policy_s:.2} s ({:.2} ms per \
             control step), the updates {:.2} s",
            1e3 * policy_s / (a.iterations * config.env.steps_per_env as u64) as f64,
            learn_s - policy_s
        );
        if a.stub_physics {
            println!(
                "run {run}: training {train:.0} env steps/s ({train_s:.2} s: envs {envs_s:.2} s, policy and update \
                 {learn_s:.2} s), the stubbed simulator replaying the same steps {replay:.0} steps/s (ratio {:.2}); \
                 {n} envs, {} threads",
                train / replay,
                config.env.threads
            );
            train_rates.push(train);
            sim_rates.push(replay);
            continue;
        }
        let robot = trainer.envs.interface.robot.clone();
        let mut env = TrackingEnv::new(
            TrackingEnvConfig {
                robot,
                num_envs: n,
                threads: config.env.threads,
                record: false,
                action_mode: ActionMode::JointPosition,
                // The trainer's envs compute no BFM-Zero observation groups either.
                compute_privileged_state: false,
                compute_history: false,
                ..Default::default()
            },
            library.clone(),
        )?;
        let start = |e: usize| EpisodeAssignment {
            motion: e % library.len(),
            start_time: 0.0,
            seed: e as u64,
            dr_level: DrLevel::L0,
        };
        env.reset(&(0..n).map(|e| (e, start(e))).collect::<Vec<_>>())?;
        let mut actions = vec![0.0f32; n * 58];
        for e in 0..n {
            for j in 0..29 {
                actions[e * 58 + j] = POLICY_DEFAULT_POSE[j] as f32;
            }
        }
        let t0 = Instant::now();
        for _ in 0..steps / n as u64 {
            env.step(&actions)?;
            let done: Vec<(usize, EpisodeAssignment)> = env
                .infos()
                .iter()
                .enumerate()
                .filter(|(_, i)| i.status != EpisodeStatus::Running)
                .map(|(e, _)| (e, start(e)))
                .collect();
            if !done.is_empty() {
                env.reset(&done)?;
            }
        }
        let standing = steps as f64 / t0.elapsed().as_secs_f64();
        println!(
            "run {run}: training {train:.0} env steps/s ({train_s:.2} s: envs {envs_s:.2} s, of which the replayed \
             simulator {:.2} s; policy and update {learn_s:.2} s), simulator replaying the same steps {replay:.0} \
             steps/s (ratio {:.2}), standing robot {standing:.0} steps/s ({:.2}); {n} envs, {} threads",
            replayed.seconds,
            train / replay,
            train / standing,
            config.env.threads
        );
        train_rates.push(train);
        sim_rates.push(replay);
        standing_rates.push(standing);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (train, sim) = (median(&mut train_rates), median(&mut sim_rates));
    if a.stub_physics {
        println!(
            "median over {} runs: training {train:.0} env steps/s with the physics stubbed out, the stubbed simulator \
             replaying the same steps {sim:.0} steps/s, ratio {:.2}",
            a.runs,
            train / sim
        );
        return Ok(());
    }
    let standing = median(&mut standing_rates);
    println!(
        "median over {} runs: training {train:.0} env steps/s, the simulator replaying the same steps {sim:.0} steps/s, \
         ratio {:.2} (the share of a training step's time the simulator takes); standing robot {standing:.0} steps/s ({:.2})",
        a.runs,
        train / sim,
        train / standing
    );
    Ok(())
}

/// The envs' seconds so far by part: simulator, rewards, resets, observations.
fn env_parts(s: &arena_ppo::envs::EnvStats) -> [f64; 4] {
    [s.physics_s, s.rewards_s, s.resets_s, s.observations_s]
}
