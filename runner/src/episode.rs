//! Episode mechanics shared by the server's simulator workers and the local runner, so a local
//! run and a remote run of the same benchmark see the same observations, end episodes by the
//! same rules and are scored by the same code.

use crate::gains::{self, SessionGains};
use arena_bench::aggregate::EpisodeStatus;
use arena_bench::metrics::{self, Frame, MetricConfig};
use arena_bench::spec::{BenchmarkSpec, Episode, FallSpec, MotionSource};
use arena_data::TrajectoryRows;
use arena_data::{MotionClip, NUM_JOINTS};
use arena_sdk::layout::{REFERENCE_FRAME_SIZE, REFERENCE_GOAL_ROW};
use arena_sdk::protocol::{EpisodeSpec, Reference};
use arena_sim::dr::DrLevel;
use arena_sim::env::{self, ACTION_CLIP, EpisodeAssignment, FallRule, TrackingEnv, TrackingEnvConfig};
use arena_sim::handler::{NQ, NV};
use arena_sim::kinematics::Kinematics;
use arena_sim::motion::{Motion, MotionLibrary};
use arena_sim::observation::{PRIVILEGED_STATE_DIM, STATE_DIM};
use arena_sim::robot::NUM_BODIES_EXT;
use arena_sim::{CONTROL_DT, RobotConfig};
use std::collections::BTreeMap;
use std::path::Path;

pub use crate::observations::{ObservationPlan, ReferenceScratch, needs_imu, observation_layout};

// The SDK states the reference groups' row sizes without the simulator; they are the simulator's.
const _: () = assert!(REFERENCE_FRAME_SIZE == NQ && REFERENCE_GOAL_ROW == STATE_DIM + PRIVILEGED_STATE_DIM);

/// A benchmark's motions and episodes as a server serves them, with every check the server
/// makes: the clips read (or generated), each made a [`Motion`] (at least two frames, at most
/// two hours, the body witness), a revealed reference that a binary message can hold, and at
/// least one episode. The server's catalog and `arena bench validate --motions-root` both call
/// it, so the validator accepts exactly what the server loads.
pub fn load_benchmark(
    spec: &BenchmarkSpec,
    motions_root: &Path,
    robot: &RobotConfig,
) -> anyhow::Result<(MotionLibrary, Vec<Episode>)> {
    load_benchmark_and_clips(spec, motions_root, robot).map(|(library, episodes, _)| (library, episodes))
}

/// [`load_benchmark`], with the clips as read (or generated), at their own frame rate: what
/// the organiser supplied, before resampling (the server's catalog digests them).
pub fn load_benchmark_and_clips(
    spec: &BenchmarkSpec,
    motions_root: &Path,
    robot: &RobotConfig,
) -> anyhow::Result<(MotionLibrary, Vec<Episode>, Vec<MotionClip>)> {
    let clips = benchmark_clips(spec, motions_root, robot)?;
    let library = MotionLibrary::from_clips(&clips, robot)?;
    // References a robot could track: not in degrees, not floating, not upside down.
    let limits = *Kinematics::new(robot)?.joint_limits();
    if let Some((m, why)) = (library.motions.iter()).find_map(|m| m.reference_problem(&limits).map(|why| (m, why))) {
        anyhow::bail!("motion {}: {why}", m.name);
    }
    if spec.observations.reveal_reference {
        // Binary frames and gRPC, the most compact encodings, beside the first reference_goal
        // rows a session that asks for each row once is sent with every episode's start.
        let largest = crate::revealed::longest_too_large(
            library.motions.iter().map(|m| (m.name.as_str(), m.length_s)),
            crate::revealed::BINARY_BYTES_PER_VALUE,
            crate::observations::first_goal_values(spec) * crate::revealed::BINARY_BYTES_PER_FLOAT,
        );
        if let Some(big) = largest {
            anyhow::bail!(
                "observations.reveal_reference: {big} in binary frames and gRPC, so no agent could receive it; \
                 shorten the clip or reveal no reference"
            );
        }
    }
    let lengths: Vec<f64> = library.motions.iter().map(|m| m.length_s).collect();
    let episodes = spec.expand_episodes(&lengths).map_err(|e| anyhow::anyhow!(e))?;
    if episodes.is_empty() {
        anyhow::bail!("the benchmark expands to no episodes");
    }
    Ok((library, episodes, clips))
}

/// The clips a benchmark names: generated for `builtin`, read from the motions root otherwise.
pub fn benchmark_clips(
    spec: &BenchmarkSpec,
    motions_root: &Path,
    robot: &RobotConfig,
) -> anyhow::Result<Vec<MotionClip>> {
    match &spec.motions.source {
        MotionSource::Builtin(names) => {
            let all = MotionLibrary::builtin_clips(robot)?;
            names
                .iter()
                .map(|n| {
                    all.iter()
                        .find(|c| &c.name == n)
                        .cloned()
                        .ok_or_else(|| anyhow::anyhow!("no built-in motion named {n:?}"))
                })
                .collect()
        }
        _ => Ok(spec.load_clips(motions_root)?),
    }
}

/// The TrackingEnv settings a benchmark implies, for `num_envs` envs on `threads` threads, with
/// the session's gains in the joint-position mode (`None`: the benchmark's default preset).
pub fn env_config(
    spec: &BenchmarkSpec,
    gains: Option<&SessionGains>,
    num_envs: usize,
    threads: usize,
) -> TrackingEnvConfig {
    TrackingEnvConfig {
        robot: gains::robot_config(&spec.action, gains, needs_imu(spec)),
        action_mode: gains::env_action_mode(&spec.action),
        num_envs,
        threads,
        fall_rule: match spec.fall {
            FallSpec::None => None,
            FallSpec::MinRootHeight(h) => Some(FallRule::MinRootHeight(h)),
            FallSpec::MaxBodyDeviation(d) => Some(FallRule::MaxBodyDeviation(d)),
        },
        // Only the groups the benchmark sends are worth their work each step.
        compute_privileged_state: sends(spec, "privileged_state"),
        compute_history: sends(spec, "history_actor"),
        ..Default::default()
    }
}

fn sends(spec: &BenchmarkSpec, group: &str) -> bool {
    spec.observations.groups.iter().any(|g| g == group)
}

/// The simulator assignment of a benchmark episode.
pub fn assignment(spec: &BenchmarkSpec, episode: &Episode) -> anyhow::Result<EpisodeAssignment> {
    Ok(EpisodeAssignment {
        motion: episode.motion,
        start_time: episode.start_s,
        seed: episode.seed,
        dr_level: DrLevel::try_from(spec.episodes.dr_level).map_err(anyhow::Error::msg)?,
    })
}

/// Control steps an episode lasts unless it ends early: at least one (its window is checked
/// after each step, so even a window of a microsecond runs one).
pub fn episode_steps(episode: &Episode) -> u32 {
    (episode.duration_s / CONTROL_DT - 1e-6).ceil().max(1.0) as u32
}

/// The metric parameters a benchmark file sets.
pub fn metric_config(spec: &BenchmarkSpec) -> MetricConfig {
    MetricConfig {
        state_slice: spec.metrics.state_slice,
        success_threshold_m: spec.metrics.success_threshold_m,
        ndtw_window_s: spec.metrics.ndtw_window_s,
        frame_dt: CONTROL_DT,
        success_rule: spec
            .ranking
            .success
            .as_deref()
            .and_then(|s| metrics::SUCCESS_METRICS.iter().copied().find(|m| *m == s)),
    }
}

/// The episode spec a session announces for a benchmark (with the session's gains in the
/// joint-position mode).
pub fn episode_spec(
    spec: &BenchmarkSpec,
    gains: Option<&SessionGains>,
    max_batch: u32,
    max_in_flight: u32,
    step_timeout_s: f64,
) -> EpisodeSpec {
    let robot = RobotConfig::default();
    let driven = gains::robot_config(&spec.action, gains, false);
    EpisodeSpec {
        observations: observation_layout(spec).to_protocol(),
        action_size: NUM_JOINTS as u32,
        control_hz: spec.limits.control_hz as f64,
        max_batch,
        max_in_flight,
        step_timeout_s,
        default_joint_pos: robot.default_pose.to_vec(),
        action_scale: (0..NUM_JOINTS).map(|j| ACTION_CLIP * robot.action_scale(j)).collect(),
        action_mode: gains::env_action_mode(&spec.action).name().to_string(),
        joint_stiffness: driven.kp.to_vec(),
        joint_damping: driven.kd.to_vec(),
        effort_limit: driven.effort.to_vec(),
        anchor_body: spec.observations.anchor_body.clone(),
        // A session that grants it sets it (docs/protocol.md §5).
        reference_goal_once: false,
    }
}

/// Frames of [`reference_of`]'s reference: the motion at the control rate, both ends included.
pub fn reference_frames(motion: &Motion) -> usize {
    crate::revealed::reference_frames(motion.length_s)
}

/// The whole reference motion sampled at the control rate, for benchmarks that reveal it.
pub fn reference_of(motion: &Motion) -> Reference {
    let frames = reference_frames(motion);
    let mut qpos = [0.0; NQ];
    let mut body = vec![0.0; 3 * NUM_BODIES_EXT];
    let mut out = Vec::with_capacity(frames * NQ);
    for k in 0..frames {
        motion.pose_at(k as f64 * CONTROL_DT, &mut qpos, &mut body);
        out.extend_from_slice(&qpos);
    }
    Reference {
        fps: 1.0 / CONTROL_DT,
        frames: frames as u32,
        qpos: out,
    }
}

/// Whether env `slot`'s running episode has run its window ([`finished_status`] then stops it).
fn window_over(env: &TrackingEnv, slot: usize, episode: &Episode) -> bool {
    let info = &env.infos()[slot];
    info.status == env::EpisodeStatus::Running && info.motion_time >= episode.start_s + episode.duration_s - 1e-9
}

/// Before [`finished_status`] of the envs in `running` (env slot, its episode): when some
/// episode's window ends at this step, the rows waiting under
/// [`TrackingEnv::record_behind_physics`] are appended for every env at once, on the env's
/// threads, rather than one env at a time as each is stopped (4096 episodes that end together).
pub fn settle_recordings<'a>(env: &mut TrackingEnv, mut running: impl Iterator<Item = (usize, &'a Episode)>) {
    if running.any(|(slot, episode)| window_over(env, slot, episode)) {
        env.flush_recording();
    }
}

/// Ends env `slot`'s episode when its window is over (a window shorter than the rest of the clip
/// ends by time, not by the motion's end) and reports how it ended, or `None` while it runs.
pub fn finished_status(
    env: &mut TrackingEnv,
    slot: usize,
    episode: &Episode,
) -> Option<(EpisodeStatus, Option<String>)> {
    if window_over(env, slot, episode) {
        env.stop(slot);
    }
    match &env.infos()[slot].status {
        env::EpisodeStatus::Running | env::EpisodeStatus::Idle => None,
        env::EpisodeStatus::Fell => Some((EpisodeStatus::Fell, None)),
        env::EpisodeStatus::Failed(r) => Some((EpisodeStatus::Failed, Some(r.clone()))),
        env::EpisodeStatus::Truncated => Some((EpisodeStatus::Completed, None)),
    }
}

/// Scores one recorded episode with the named metrics, over all its rows.
pub fn score_trajectory(
    trajectory: &TrajectoryRows,
    names: &[String],
    config: &MetricConfig,
) -> Result<BTreeMap<String, f64>, metrics::MetricError> {
    let inputs = ScoringInputs::new(trajectory, names.iter().any(|n| metrics::mjlab::needs_orientations(n)))?;
    metrics::evaluate(names, config, inputs.frames(trajectory.len()))
}

/// A recorded episode as metric frames.
///
/// Metrics that need body orientations and joint velocities (mjlab's) get them from what a
/// trajectory file stores too, so a live score and a rescore of the file agree: orientations by
/// forward kinematics of `qpos` and `ref_qpos`, the robot's joint velocities from `qvel`, the
/// reference's as mjlab's motion files hold them ([`mjlab_reference_joint_velocities`]).
struct ScoringInputs<'t> {
    trajectory: &'t TrajectoryRows,
    orientations: bool,
    sim_quat: Vec<f64>,
    ref_quat: Vec<f64>,
    ref_joint_vel: Vec<f64>,
}

impl<'t> ScoringInputs<'t> {
    fn new(trajectory: &'t TrajectoryRows, orientations: bool) -> Result<Self, metrics::MetricError> {
        let (sim_quat, ref_quat) = if orientations {
            body_orientations(trajectory)?
        } else {
            (Vec::new(), Vec::new())
        };
        let ref_joint_vel = if orientations {
            mjlab_reference_joint_velocities(trajectory)
        } else {
            Vec::new()
        };
        Ok(ScoringInputs {
            trajectory,
            orientations,
            sim_quat,
            ref_quat,
            ref_joint_vel,
        })
    }

    /// The first `rows` rows as frames.
    fn frames(&self, rows: usize) -> impl Iterator<Item = Frame<'_>> {
        let t = self.trajectory;
        let (w, q) = (3 * NUM_BODIES_EXT, 4 * NUM_BODIES_EXT);
        let t0 = t.times.first().copied().unwrap_or(0.0);
        let with = |on: bool, s: &'t [f64]| if on { s } else { &[] };
        (0..rows.min(t.len())).map(move |k| Frame {
            time: elapsed_s(t.times[k], t0),
            sim_joints: &t.qpos[k * NQ + 7..(k + 1) * NQ],
            ref_joints: &t.ref_qpos[k * NQ + 7..(k + 1) * NQ],
            sim_bodies: &t.body_pos[k * w..(k + 1) * w],
            ref_bodies: &t.ref_body_pos[k * w..(k + 1) * w],
            sim_state: &t.state[k * STATE_DIM..(k + 1) * STATE_DIM],
            ref_state: &t.ref_state[k * STATE_DIM..(k + 1) * STATE_DIM],
            sim_body_quat: if self.orientations {
                &self.sim_quat[k * q..(k + 1) * q]
            } else {
                &[]
            },
            ref_body_quat: if self.orientations {
                &self.ref_quat[k * q..(k + 1) * q]
            } else {
                &[]
            },
            sim_joint_vel: with(self.orientations, &t.qvel[k * NV + 6..(k + 1) * NV]),
            ref_joint_vel: if self.orientations {
                &self.ref_joint_vel[k * NUM_JOINTS..(k + 1) * NUM_JOINTS]
            } else {
                &[]
            },
        })
    }
}

/// The reference's joint velocities of every recorded row as mjlab's motion files hold them:
/// `csv_to_npz.py` writes `joint_vel` as `torch.gradient` of the 50 Hz joint positions, central
/// differences inside the clip and one-sided at its ends. The motion library (and the reference
/// `state` rows agents see) keeps BFM-Zero's forward difference q̇_k = (q_{k+1} − q_k)/Δt (at a
/// clip's last frame the difference before it), so a row's recorded velocity gives the step
/// ahead: (q̇_k + (q_k − q_{k−1})/Δt) / 2 is the central difference inside the clip and the
/// backward one at its last frame, as torch.gradient's, to the recorded velocity's float32. Row
/// k's value reads rows k − 1 and k alone, so rows after a break cannot change a score that
/// stops there. Row 0 (the reset, never measured) keeps the recorded velocity.
fn mjlab_reference_joint_velocities(t: &TrajectoryRows) -> Vec<f64> {
    let rows = t.len();
    let joints = |k: usize| &t.ref_qpos[k * NQ + 7..(k + 1) * NQ];
    let mut out = vec![0.0; rows * NUM_JOINTS];
    for k in 0..rows {
        let recorded = &t.ref_state[k * STATE_DIM + NUM_JOINTS..k * STATE_DIM + 2 * NUM_JOINTS];
        let row = &mut out[k * NUM_JOINTS..(k + 1) * NUM_JOINTS];
        let dt = if k > 0 { t.times[k] - t.times[k - 1] } else { 0.0 };
        if dt > 0.0 {
            let (now, before) = (joints(k), joints(k - 1));
            for j in 0..NUM_JOINTS {
                row[j] = 0.5 * (recorded[j] + (now[j] - before[j]) / dt);
            }
        } else {
            row.copy_from_slice(recorded);
        }
    }
    out
}

thread_local! {
    /// One forward-kinematics model per scoring thread (compiling it takes milliseconds).
    static KINEMATICS: std::cell::RefCell<Option<Kinematics>> = const { std::cell::RefCell::new(None) };
}

/// World orientations of the 31 extended bodies of every row, robot and reference (31 × 4 per
/// row, (w, x, y, z)), by forward kinematics of the rows' qpos.
fn body_orientations(trajectory: &TrajectoryRows) -> Result<(Vec<f64>, Vec<f64>), metrics::MetricError> {
    KINEMATICS.with(|cell| {
        let mut slot = cell.borrow_mut();
        if slot.is_none() {
            *slot = Some(
                Kinematics::new(&RobotConfig::default())
                    .map_err(|e| metrics::MetricError::Kinematics(e.to_string()))?,
            );
        }
        let kin = slot.as_mut().expect("just built");
        // Row by row into one buffer of the final size (an iterator flattening the quaternions
        // value by value was a twentieth of an evaluation's scoring).
        let mut of = |qpos: &[f64]| -> Vec<f64> {
            let mut out = Vec::with_capacity(qpos.len() / NQ * 4 * NUM_BODIES_EXT);
            for row in qpos.chunks_exact(NQ) {
                out.extend_from_slice(kin.body_orientations(row).as_flattened());
            }
            out
        };
        Ok((of(&trajectory.qpos), of(&trajectory.ref_qpos)))
    })
}

/// Scores a finished episode by its benchmark's rules (docs/metrics.md, "Where scoring stops").
///
/// - Scoring stops at the first frame that breaks the benchmark's success rule
///   (`config.success_rule`): every metric is computed on the frames up to and including it,
///   so nothing the agent does after the break changes the score. The success rules and their
///   failure times judge all recorded frames (each as a benchmark ranked by it would).
/// - An episode that ended unscored (agent error, timeout, simulator failure) after such a
///   break is a scored fall at the break: a robot on the floor whose policy then sends NaN
///   scores what one that kept trying scores. One that erred while still tracking stays
///   unscored.
/// - A fell episode gets the fall penalty ([`metrics::apply_fall_penalty`]): never a success.
/// - A scoring error fails the episode.
pub fn score_finished(
    trajectory: &TrajectoryRows,
    status: EpisodeStatus,
    reason: Option<String>,
    names: &[String],
    config: &MetricConfig,
) -> (EpisodeStatus, BTreeMap<String, f64>, Option<String>) {
    let scoring_failed = |e: metrics::MetricError| {
        (
            EpisodeStatus::Failed,
            BTreeMap::new(),
            Some(format!("scoring failed: {e}")),
        )
    };
    if !status.is_scored() && (config.success_rule.is_none() || trajectory.is_empty()) {
        return (status, BTreeMap::new(), reason);
    }
    let orientations = names
        .iter()
        .map(String::as_str)
        .chain(config.success_rule)
        .any(metrics::mjlab::needs_orientations);
    let inputs = match ScoringInputs::new(trajectory, orientations) {
        Ok(i) => i,
        Err(e) if status.is_scored() => return scoring_failed(e),
        Err(_) => return (status, BTreeMap::new(), reason),
    };
    let broken_at = match config.success_rule {
        Some(rule) => match metrics::break_time(rule, config, inputs.frames(trajectory.len())) {
            Ok(t) => t.map(|t| (rule, t)),
            Err(e) if status.is_scored() => return scoring_failed(e),
            Err(_) => return (status, BTreeMap::new(), reason),
        },
        None => None,
    };
    let (status, reason) = match (status.is_scored(), broken_at) {
        (true, _) => (status, reason),
        (false, Some((rule, t))) => (
            EpisodeStatus::Fell,
            Some(format!(
                "{} after the episode had broken {rule} at {t:.2} s: scored as a fall up to there",
                reason.as_deref().unwrap_or(&status.to_string())
            )),
        ),
        (false, None) => return (status, BTreeMap::new(), reason),
    };
    let t0 = trajectory.times.first().copied().unwrap_or(0.0);
    let rows = match broken_at {
        Some((_, t)) => trajectory
            .times
            .iter()
            .take_while(|&&s| elapsed_s(s, t0) <= t + 1e-9)
            .count(),
        None => trajectory.len(),
    };
    // The success rules themselves (both, and PHC's two criteria) judge every recorded row, so
    // each reads as it would on a benchmark ranked by it: stopping PHC's rule where mjlab's broke
    // would call a robot on the floor a PHC success. Their own break needs no stop. mjlab's
    // metrics stop at mjlab's own first termination, as its `evaluate.py` does, whatever rule
    // ranks the benchmark: cut at PHC's break (usually earlier) they were not mjlab's numbers.
    let is_rule = |n: &String| {
        metrics::SUCCESS_METRICS.contains(&n.as_str())
            || metrics::SURVIVAL_METRICS.contains(&n.as_str())
            || metrics::mjlab::MJLAB_METRICS.contains(&n.as_str())
    };
    let (rule_names, others): (Vec<String>, Vec<String>) = names.iter().cloned().partition(is_rule);
    let scored = metrics::evaluate(&others, config, inputs.frames(rows)).and_then(|mut m| {
        m.extend(metrics::evaluate(&rule_names, config, inputs.frames(trajectory.len()))?);
        Ok(m)
    });
    match scored {
        Ok(mut m) => {
            if status == EpisodeStatus::Fell {
                // The last recorded row: the fall, or the error after the ranked rule broke. The
                // ranked rule's failure time is at its break already; the other rule's runs on
                // the rows it judged (capping it at the ranked rule's break gave a time that
                // rule never produced).
                let fell_at = elapsed_s(trajectory.times.last().copied().unwrap_or(t0), t0);
                metrics::apply_fall_penalty(&mut m, fell_at);
            }
            (status, m, reason)
        }
        Err(e) => scoring_failed(e),
    }
}

/// Seconds from an episode's first row (`t0`) to a row's `time`, to the microsecond. Rows are
/// motion times on the control clock (start + k · 0.02 s); their difference carries the
/// subtraction's rounding (0.019999999999999574 for one step after 5.0 s), which a stored
/// `failure_time_s` kept and a filter such as `failure_time_s >= 0.02` tripped on.
fn elapsed_s(time: f64, t0: f64) -> f64 {
    ((time - t0) * 1e6).round() / 1e6
}

#[cfg(test)]
mod tests {
    use super::*;
    use arena_sdk::ObservationLayout;
    use arena_sdk::layout::{REFERENCE_GOAL_GROUP, REFERENCE_GROUP};
    use std::ops::Range;

    /// mjlab's metrics get the reference's joint velocities as mjlab's motion files hold them
    /// (`torch.gradient` of the clip's joint positions), from rows that record BFM-Zero's
    /// forward difference: central inside the clip, backward at its last frame.
    #[test]
    fn mjlab_reference_joint_velocities_are_the_clips_gradient() {
        let (dt, frames, first) = (0.02, 60usize, 10usize);
        let q = |f: usize, j: usize| 0.5 * (2.0 * std::f64::consts::PI * f as f64 * dt + j as f64).sin();
        let forward = |f: usize, j: usize| {
            if f + 1 < frames {
                (q(f + 1, j) - q(f, j)) / dt
            } else {
                (q(f, j) - q(f - 1, j)) / dt
            }
        };
        let mut t = TrajectoryRows::default();
        for f in first..frames {
            t.times.push(f as f64 * dt);
            let mut qpos = [0.0; NQ];
            qpos[3] = 1.0;
            let mut state = [0.0; STATE_DIM];
            for j in 0..NUM_JOINTS {
                qpos[7 + j] = q(f, j);
                state[NUM_JOINTS + j] = forward(f, j);
            }
            t.ref_qpos.extend_from_slice(&qpos);
            t.ref_state.extend_from_slice(&state);
        }
        let v = mjlab_reference_joint_velocities(&t);
        let mut worst_forward_error = 0.0f64;
        for (k, f) in (first..frames).enumerate() {
            for j in 0..NUM_JOINTS {
                let gradient = match (k, f + 1 < frames) {
                    (0, _) => forward(f, j),
                    (_, true) => (q(f + 1, j) - q(f - 1, j)) / (2.0 * dt),
                    (_, false) => (q(f, j) - q(f - 1, j)) / dt,
                };
                let got = v[k * NUM_JOINTS + j];
                assert!(
                    (got - gradient).abs() < 1e-9,
                    "row {k} joint {j}: {got} against {gradient}"
                );
                worst_forward_error = worst_forward_error.max((forward(f, j) - gradient).abs());
            }
        }
        assert!(
            worst_forward_error > 0.1,
            "the recorded forward difference differs: {worst_forward_error}"
        );
    }

    #[test]
    fn an_episode_lasts_at_least_one_step() {
        let steps = |duration_s: f64| {
            episode_steps(&Episode {
                index: 0,
                motion: 0,
                start_s: 0.0,
                duration_s,
                repeat: 0,
                seed: 0,
            })
        };
        // A microsecond's window still runs one step (episode_start said 0, episode_end 1).
        assert_eq!(steps(1e-8), 1);
        assert_eq!(steps(0.02), 1);
        assert_eq!(steps(0.0201), 2);
        assert_eq!(steps(6.0), 300);
    }

    fn smoke() -> BenchmarkSpec {
        let names = arena_bench::metrics::metric_names();
        arena_bench::spec::find_benchmark("g1-smoke", &arena_bench::spec::shipped_dir(), &names)
            .unwrap()
            .1
    }

    fn layout_of(groups: &[&str], horizon: u32, goal_horizon: u32) -> ObservationLayout {
        let mut spec = smoke();
        spec.observations.groups = groups.iter().map(|g| g.to_string()).collect();
        spec.observations.reference_horizon = horizon;
        spec.observations.reference_goal_horizon = goal_horizon;
        observation_layout(&spec)
    }

    #[test]
    fn g1_smoke_layout_ends_with_the_reference_rows() {
        let spec = smoke();
        let layout = observation_layout(&spec);
        let groups: Vec<(&str, Range<usize>)> = layout.groups().collect();
        assert_eq!(
            groups,
            [
                ("state", 0..64),
                ("last_action", 64..93),
                ("history_actor", 93..465),
                ("reference", 465..501),
                ("reference_goal", 501..501 + 8 * 527),
            ]
        );
        assert_eq!(layout.size(), 4717);
        assert_eq!((layout.reference_horizon(), layout.reference_goal_horizon()), (1, 8));
        // What Connected announces reads back as the same layout (the client's side).
        let announced = episode_spec(&spec, None, 4, 2, 1.0);
        assert_eq!(
            announced.observations.last().map(|g| (g.name.as_str(), g.size)),
            Some((REFERENCE_GOAL_GROUP, 8 * 527))
        );
        assert_eq!(ObservationLayout::from_spec(&announced), layout);
    }

    #[test]
    fn reference_goal_follows_whatever_comes_before_it() {
        let layout = layout_of(&["privileged_state"], 0, 2);
        assert_eq!(layout.group("privileged_state"), Some(0..463));
        assert_eq!(layout.group(REFERENCE_GROUP), None);
        assert_eq!(
            layout.group(REFERENCE_GOAL_GROUP),
            Some(463..463 + 2 * REFERENCE_GOAL_ROW)
        );
        assert_eq!(layout.size(), 463 + 1054);
        let layout = layout_of(&["state"], 3, 0);
        assert_eq!(layout.group(REFERENCE_GOAL_GROUP), None, "0 = not sent");
        assert_eq!(layout.reference_goal_horizon(), 0);
        assert_eq!(layout.size(), 64 + 3 * NQ);
        let layout = layout_of(&[], 0, 1);
        assert_eq!(layout.group(REFERENCE_GOAL_GROUP), Some(0..527));
        let spec = EpisodeSpec {
            observations: layout.to_protocol(),
            ..Default::default()
        };
        assert_eq!(ObservationLayout::from_spec(&spec).reference_goal_horizon(), 1);
    }

    #[test]
    fn robot_benchmark_announces_its_groups_and_gains() {
        let names = arena_bench::metrics::metric_names();
        let (_, spec) =
            arena_bench::spec::find_benchmark("g1-smoke-robot", &arena_bench::spec::shipped_dir(), &names).unwrap();
        let layout = observation_layout(&spec);
        let groups: Vec<(&str, Range<usize>)> = layout.groups().collect();
        assert_eq!(
            groups,
            [
                ("imu", 0..10),
                ("imu_torso", 10..20),
                ("motors", 20..107),
                ("base_lin_vel", 107..110),
                ("motion_command", 110..168),
                ("motion_anchor_pos_b", 168..171),
                ("motion_anchor_ori_b", 171..177),
                ("motion_anchor_pose_w", 177..184),
            ]
        );
        let announced = episode_spec(&spec, None, 4, 2, 1.0);
        assert_eq!(announced.action_mode, "joint_position");
        let armature = arena_sim::RobotConfig::new(arena_sim::GainSet::Armature);
        assert_eq!(announced.joint_stiffness, armature.kp.to_vec());
        assert_eq!(announced.effort_limit[1], 139.0, "hip roll is the 7520-22 motor");
        let config = env_config(&spec, None, 2, 1);
        assert!(config.robot.imu_sensors);
        assert_eq!(config.action_mode.width(), 58);
        // The normalized benchmarks keep the arena's gains and no IMU sensors.
        let smoke = smoke();
        let config = env_config(&smoke, None, 2, 1);
        assert_eq!(
            (config.robot.kp, config.robot.imu_sensors),
            (RobotConfig::default().kp, false)
        );
        assert_eq!(episode_spec(&smoke, None, 4, 2, 1.0).action_mode, "normalized");
    }
}
