//! Benchmark: what the robot-interface observation groups cost. The same joint-position
//! benchmark (g1-smoke-robot's motions, gains and actions, the reference-replay agent) is
//! evaluated in process twice — once sending `state` only, once sending every robot group
//! (`imu`, `imu_torso` with the accelerometer sensors compiled in, `motors`, `base_lin_vel`,
//! `motion_command`, `motion_anchor_*`) — interleaved with the order rotated each run, best of
//! N. Both also send the `reference` frame the replay agent targets, so both run the same
//! actions and physics. Reports control steps per second of each and the ratio robot groups / state only
//! (goal ≥ 0.95).

use arena_bench::spec::{BenchmarkSpec, find_benchmark, shipped_dir};
use arena_runner::local::{LocalOptions, run_local};
use arena_sdk::agents::ReplayAgent;
use clap::Parser;
use std::path::Path;
use std::time::Instant;

#[derive(Debug, Parser)]
struct Args {
    /// Times each of the six motions runs per evaluation.
    #[arg(long, default_value_t = 8)]
    repeats: u32,
    /// Episodes simulated together.
    #[arg(long, default_value_t = 16)]
    batch: usize,
    /// Simulation threads (0 = one per core).
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Evaluations of each side; the best counts.
    #[arg(long, default_value_t = 3)]
    runs: usize,
}

/// Control steps per second of one local evaluation of `spec`.
fn steps_per_s(spec: &BenchmarkSpec, a: &Args) -> anyhow::Result<f64> {
    let clips = arena_runner::episode::benchmark_clips(spec, Path::new("."), &arena_sim::RobotConfig::default())?;
    let options = LocalOptions {
        batch: a.batch,
        threads: a.threads,
        ..Default::default()
    };
    let mut steps = 0usize;
    let start = Instant::now();
    run_local(spec, &clips, &mut ReplayAgent::new(), &options, &mut |_, _, r| {
        steps += r.num_steps
    })?;
    Ok(steps as f64 / start.elapsed().as_secs_f64())
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    let names = arena_bench::metrics::metric_names();
    let (_, mut robot) = find_benchmark("g1-smoke-robot", &shipped_dir(), &names)?;
    robot.episodes.repeats = a.repeats;
    // Both sides send the next reference frame, which the replay agent targets: the same
    // actions, so the same physics, and only the observations differ.
    robot.observations.reference_horizon = 1;
    let mut state_only = robot.clone();
    state_only.observations.groups = vec!["state".into()];
    println!(
        "g1-smoke-robot × {} repeats, batch {}, joint-position replay; state + reference ({} values) vs robot groups + reference ({} values)",
        a.repeats,
        a.batch,
        arena_runner::episode::observation_layout(&state_only).size(),
        arena_runner::episode::observation_layout(&robot).size()
    );
    let (mut best_state, mut best_robot) = (0.0f64, 0.0f64);
    for run in 0..a.runs {
        let order: [bool; 2] = if run % 2 == 0 { [false, true] } else { [true, false] };
        for robot_side in order {
            let spec = if robot_side { &robot } else { &state_only };
            let rate = steps_per_s(spec, &a)?;
            if robot_side {
                best_robot = best_robot.max(rate);
            } else {
                best_state = best_state.max(rate);
            }
            println!(
                "  run {}: {:<13} {rate:9.0} control steps/s",
                run + 1,
                if robot_side { "robot groups" } else { "state only" }
            );
        }
    }
    println!(
        "best of {}: state only {best_state:.0} steps/s, robot groups {best_robot:.0} steps/s; ratio robot/state = {:.3} (goal >= 0.95)",
        a.runs,
        best_robot / best_state
    );
    Ok(())
}
