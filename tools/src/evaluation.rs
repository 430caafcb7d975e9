//! In-process benchmark evaluation (`arena eval`): the SDK's local runner with a built-in agent,
//! plus the report of a run and the metrics of a rollout file against its reference.

use arena_bench::aggregate::Report;
use arena_bench::metrics::{self, Frame, MetricConfig};
use arena_bench::spec::BenchmarkSpec;
use arena_data::MotionClip;
use arena_runner::local::{LocalRun, Progress, run_local_described};
use arena_sdk::Agent;
use arena_sim::CONTROL_DT;
use arena_sim::observation::STATE_DIM;
use arena_sim::{RobotConfig, kinematics::Kinematics};
use std::collections::BTreeMap;

/// Options of one evaluation run.
pub use arena_runner::local::LocalOptions as EvalOptions;

/// Runs every episode of `spec` with a built-in agent through the SDK's local runner (the same
/// observations, episode ends and scoring as a server session); with the engine that ran them.
pub fn run_benchmark(
    spec: &BenchmarkSpec,
    clips: &[MotionClip],
    agent: &mut dyn Agent,
    options: &EvalOptions,
    progress: &mut Progress<'_>,
) -> anyhow::Result<LocalRun> {
    run_local_described(spec, clips, agent, options, progress)
}

/// The report of a finished run, with the benchmark and run settings as its `config`, and, as a
/// server's report names them (`config.engines`), the engine that ran its episodes.
pub fn report(spec: &BenchmarkSpec, run: &LocalRun, settings: serde_json::Value) -> Report {
    let config = serde_json::json!({
        "benchmark": spec,
        "run": settings,
        "arena_version": env!("CARGO_PKG_VERSION"),
        "engines": engines(run),
    });
    // Episodes finish out of order in a batch; the report lists them in benchmark order.
    run.aggregator.report(&spec.name, config)
}

/// `[{"engine", "episodes"}]` as a server's report has it: one engine ran every episode here.
fn engines(run: &LocalRun) -> serde_json::Value {
    match run.aggregator.episodes().len() {
        0 => serde_json::json!([]),
        n => serde_json::json!([{"engine": run.engine, "episodes": n}]),
    }
}

/// Reference and simulated frames for `arena metrics track`: the rollout's qpos rows become a
/// 50 Hz motion of their own (FK and velocities exactly as for references), so both sides get
/// body positions and noise-free `state` rows by the same code.
pub fn track_metrics(
    rollout_times: &[f64],
    rollout_qpos: &[f64],
    reference: &MotionClip,
    names: &[String],
    config: &MetricConfig,
) -> anyhow::Result<BTreeMap<String, f64>> {
    use arena_sim::motion::{Motion, MotionState};
    use arena_sim::observation::reference_state_row;
    let robot = RobotConfig::default();
    let mut kin = Kinematics::new(&robot)?;
    let reference = Motion::from_clip(reference, &mut kin)?;
    let sim_clip = MotionClip {
        name: "rollout".into(),
        category: "rollout".into(),
        fps: 1.0 / CONTROL_DT,
        qpos: rollout_qpos.to_vec(),
        witness: None,
    };
    let simulated = Motion::from_clip(&sim_clip, &mut kin)?;
    let rows = rollout_times.len();
    let t0 = rollout_times[0];
    let (mut s, mut r) = (MotionState::default(), MotionState::default());
    let mut per_frame: Vec<[Vec<f64>; 10]> = Vec::with_capacity(rows);
    for (k, &t) in rollout_times.iter().enumerate() {
        simulated.state_at(k as f64 * CONTROL_DT, &mut s);
        reference.state_at(t.min(reference.length_s), &mut r);
        let (mut ss, mut rs) = ([0.0f32; STATE_DIM], [0.0f32; STATE_DIM]);
        reference_state_row(&s, &robot, &mut ss);
        reference_state_row(&r, &robot, &mut rs);
        per_frame.push([
            s.qpos[7..].to_vec(),
            r.qpos[7..].to_vec(),
            s.body_pos.iter().flatten().copied().collect(),
            r.body_pos.iter().flatten().copied().collect(),
            ss.iter().map(|v| *v as f64).collect(),
            rs.iter().map(|v| *v as f64).collect(),
            s.body_rot.iter().flatten().copied().collect(),
            r.body_rot.iter().flatten().copied().collect(),
            s.dof_vel.to_vec(),
            r.dof_vel.to_vec(),
        ]);
    }
    let frames = per_frame.iter().enumerate().map(|(k, f)| Frame {
        time: rollout_times[k] - t0,
        sim_joints: &f[0],
        ref_joints: &f[1],
        sim_bodies: &f[2],
        ref_bodies: &f[3],
        sim_state: &f[4],
        ref_state: &f[5],
        sim_body_quat: &f[6],
        ref_body_quat: &f[7],
        sim_joint_vel: &f[8],
        ref_joint_vel: &f[9],
    });
    Ok(metrics::evaluate(names, config, frames)?)
}
