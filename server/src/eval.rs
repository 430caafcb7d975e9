//! In-process benchmark evaluation: expands a benchmark into episodes, runs them in batched
//! TrackingEnvs with a built-in policy, scores each finished episode and aggregates.
//! The server's orchestrator will drive remote agents through the same episode expansion,
//! scoring and aggregation.

use anyhow::Context;
use arena_bench::aggregate::{EpisodeResult, EpisodeStatus, MetricsAggregator, Report};
use arena_bench::metrics::{self, Frame, MetricConfig};
use arena_bench::spec::{BenchmarkSpec, Episode, FallSpec, MotionSource};
use arena_data::MotionClip;
use arena_sim::CONTROL_DT;
use arena_sim::dr::DrLevel;
use arena_sim::env::{self, EpisodeAssignment, FallRule, TrackingEnv, TrackingEnvConfig, Trajectory};
use arena_sim::handler::NQ;
use arena_sim::motion::MotionLibrary;
use arena_sim::observation::STATE_DIM;
use arena_sim::policy::Policy;
use arena_sim::robot::NUM_BODIES_EXT;
use arena_sim::{RobotConfig, kinematics::Kinematics};
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

/// The clips a benchmark names: generated for `builtin`, read from the motions root otherwise.
pub fn benchmark_clips(
    spec: &BenchmarkSpec,
    motions_root: &Path,
    robot: &RobotConfig,
) -> anyhow::Result<Vec<MotionClip>> {
    match &spec.motions.source {
        MotionSource::Builtin(names) => {
            let all = MotionLibrary::builtin_clips(robot)?;
            Ok(names
                .iter()
                .map(|n| {
                    all.iter()
                        .find(|c| &c.name == n)
                        .cloned()
                        .ok_or_else(|| anyhow::anyhow!("no built-in motion named {n:?}"))
                })
                .collect::<anyhow::Result<_>>()?)
        }
        _ => Ok(spec.load_clips(motions_root)?),
    }
}

/// Options of one evaluation run.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// Envs stepped together (episodes in flight).
    pub batch: usize,
    /// Simulation threads.
    pub threads: usize,
}

/// The metric parameters a benchmark file sets.
pub fn metric_config(spec: &BenchmarkSpec) -> MetricConfig {
    MetricConfig {
        state_slice: spec.metrics.state_slice,
        success_threshold_m: spec.metrics.success_threshold_m,
        ndtw_window_s: spec.metrics.ndtw_window_s,
        frame_dt: CONTROL_DT,
    }
}

/// Scores one recorded episode with the named metrics.
pub fn score_trajectory(
    trajectory: &Trajectory,
    names: &[String],
    config: &MetricConfig,
) -> Result<BTreeMap<String, f64>, metrics::MetricError> {
    let w = 3 * NUM_BODIES_EXT;
    let t0 = trajectory.times.first().copied().unwrap_or(0.0);
    let frames = (0..trajectory.len()).map(|k| Frame {
        time: trajectory.times[k] - t0,
        sim_joints: &trajectory.qpos[k * NQ + 7..(k + 1) * NQ],
        ref_joints: &trajectory.ref_qpos[k * NQ + 7..(k + 1) * NQ],
        sim_bodies: &trajectory.body_pos[k * w..(k + 1) * w],
        ref_bodies: &trajectory.ref_body_pos[k * w..(k + 1) * w],
        sim_state: &trajectory.state[k * STATE_DIM..(k + 1) * STATE_DIM],
        ref_state: &trajectory.ref_state[k * STATE_DIM..(k + 1) * STATE_DIM],
    });
    metrics::evaluate(names, config, frames)
}

/// Progress callback: (episodes finished, episodes in all, the result just finished).
pub type Progress<'a> = dyn FnMut(usize, usize, &EpisodeResult) + 'a;

/// Runs every episode of `spec` with `policy` and returns the aggregator holding the results.
pub fn run_benchmark(
    spec: &BenchmarkSpec,
    clips: &[MotionClip],
    policy: &mut dyn Policy,
    options: &EvalOptions,
    progress: &mut Progress<'_>,
) -> anyhow::Result<MetricsAggregator> {
    let robot = RobotConfig::default();
    let library = Arc::new(MotionLibrary::from_clips(clips, &robot).context("building the motion library")?);
    let lengths: Vec<f64> = library.motions.iter().map(|m| m.length_s).collect();
    let episodes = spec.expand_episodes(&lengths);
    anyhow::ensure!(!episodes.is_empty(), "benchmark {} expands to no episodes", spec.name);
    let batch = options.batch.clamp(1, episodes.len());
    let config = TrackingEnvConfig {
        robot,
        num_envs: batch,
        threads: options.threads,
        fall_rule: match spec.fall {
            FallSpec::None => None,
            FallSpec::MinRootHeight(h) => Some(FallRule::MinRootHeight(h)),
            FallSpec::MaxBodyDeviation(d) => Some(FallRule::MaxBodyDeviation(d)),
        },
        ..Default::default()
    };
    let mut env = TrackingEnv::new(config, library.clone())?;
    let dr_level = DrLevel::try_from(spec.episodes.dr_level).map_err(anyhow::Error::msg)?;
    let metric_names = spec.metrics.list.clone();
    let metric_config = metric_config(spec);
    let mut aggregator = MetricsAggregator::new();
    // Which episode each env runs.
    let mut running: Vec<Option<&Episode>> = vec![None; batch];
    let mut queue = episodes.iter();
    let mut finished = 0;
    let mut actions = vec![0.0f32; batch * arena_data::NUM_JOINTS];
    let start_next = |env: &mut TrackingEnv, slot: usize, ep: &Episode| -> anyhow::Result<()> {
        let assignment = EpisodeAssignment {
            motion: ep.motion,
            start_time: ep.start_s,
            seed: ep.seed,
            dr_level,
        };
        env.reset(&[(slot, assignment)])?;
        Ok(())
    };
    for (slot, ep) in queue.by_ref().take(batch).enumerate() {
        start_next(&mut env, slot, ep)?;
        running[slot] = Some(ep);
    }
    while running.iter().any(Option::is_some) {
        policy.act(&env, &mut actions);
        env.step(&actions)?;
        for slot in 0..batch {
            let Some(ep) = running[slot] else { continue };
            let info = &env.infos()[slot];
            // A window shorter than the rest of the clip ends by time, not by the motion's end.
            if info.status == env::EpisodeStatus::Running && info.motion_time >= ep.start_s + ep.duration_s - 1e-9 {
                env.stop(slot);
            }
            let status = env.infos()[slot].status.clone();
            if status == env::EpisodeStatus::Running {
                continue;
            }
            let motion = &library.motions[ep.motion];
            let trajectory = env.trajectory(slot);
            let (status, reason) = match status {
                env::EpisodeStatus::Fell => (EpisodeStatus::Fell, None),
                env::EpisodeStatus::Failed(r) => (EpisodeStatus::Failed, Some(r)),
                _ => (EpisodeStatus::Completed, None),
            };
            let (metrics, status, reason) = if status.is_scored() {
                match score_trajectory(trajectory, &metric_names, &metric_config) {
                    Ok(m) => (m, status, reason),
                    Err(e) => (
                        BTreeMap::new(),
                        EpisodeStatus::Failed,
                        Some(format!("scoring failed: {e}")),
                    ),
                }
            } else {
                (BTreeMap::new(), status, reason)
            };
            let result = EpisodeResult {
                episode_id: format!("ep{:04}", ep.index),
                motion: motion.name.clone(),
                category: motion.category.clone(),
                status,
                metrics,
                num_steps: trajectory.len().saturating_sub(1),
                start_s: ep.start_s,
                duration_s: ep.duration_s,
                seed: ep.seed,
                dr_level: spec.episodes.dr_level,
                reason,
            };
            finished += 1;
            progress(finished, episodes.len(), &result);
            aggregator.add_episode(result);
            running[slot] = None;
            if let Some(next) = queue.next() {
                start_next(&mut env, slot, next)?;
                running[slot] = Some(next);
            }
        }
    }
    Ok(aggregator)
}

/// The report of a finished run, with the benchmark and run settings as its `config`.
pub fn report(spec: &BenchmarkSpec, aggregator: &MetricsAggregator, run: serde_json::Value) -> Report {
    let config = serde_json::json!({
        "benchmark": spec,
        "run": run,
        "arena_version": env!("CARGO_PKG_VERSION"),
    });
    let mut report = aggregator.report(&spec.name, config);
    // Episodes finish out of order in a batch; the report lists them in benchmark order.
    report.episodes.sort_by(|a, b| a.episode_id.cmp(&b.episode_id));
    report
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
    };
    let simulated = Motion::from_clip(&sim_clip, &mut kin)?;
    let rows = rollout_times.len();
    let t0 = rollout_times[0];
    let (mut s, mut r) = (MotionState::default(), MotionState::default());
    let mut per_frame: Vec<[Vec<f64>; 6]> = Vec::with_capacity(rows);
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
    });
    Ok(metrics::evaluate(names, config, frames)?)
}
