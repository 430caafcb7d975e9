//! What an agent observes: a benchmark's observation layout (the groups it sends, in order) and
//! the filling of one episode's row from the env — BFM-Zero's groups from the env's batch, the
//! robot-interface groups (IMUs, motors, tracking command) from the handler and the reference
//! motion, the `reference` frames and the `reference_goal` rows computed with the simulator's
//! reference-observation terms. The server's lanes and the local runner both fill rows here.

use arena_bench::spec::BenchmarkSpec;
use arena_sdk::ObservationLayout;
use arena_sdk::layout::{REFERENCE_GOAL_GROUP, REFERENCE_GOAL_ROW, REFERENCE_GROUP};
use arena_sim::CONTROL_DT;
use arena_sim::env::TrackingEnv;
use arena_sim::handler::NQ;
use arena_sim::motion::MotionState;
use arena_sim::observation::{self, HISTORY_ACTOR_DIM, LAST_ACTION_DIM, PRIVILEGED_STATE_DIM, STATE_DIM};
use arena_sim::robot::{NUM_BODIES_EXT, TORSO_INDEX};
use arena_sim::robot_interface::{self as robot, RobotReadout};

/// Whether a benchmark sends a group that reads the IMU accelerometers (its model must be
/// compiled with them).
pub fn needs_imu(spec: &BenchmarkSpec) -> bool {
    spec.observations
        .groups
        .iter()
        .any(|g| robot::IMU_GROUPS.contains(&g.as_str()))
}

/// The layout a benchmark's sessions announce: the benchmark's groups in its order, then
/// `reference` when `reference_horizon` > 0, then `reference_goal` when
/// `reference_goal_horizon` > 0.
pub fn observation_layout(spec: &BenchmarkSpec) -> ObservationLayout {
    let mut groups: Vec<(&str, usize)> = spec
        .observations
        .groups
        .iter()
        .map(|g| (g.as_str(), group_size(g)))
        .collect();
    let horizon = spec.observations.reference_horizon as usize;
    if horizon > 0 {
        groups.push((REFERENCE_GROUP, horizon * NQ));
    }
    let goal_horizon = spec.observations.reference_goal_horizon as usize;
    if goal_horizon > 0 {
        groups.push((REFERENCE_GOAL_GROUP, goal_horizon * REFERENCE_GOAL_ROW));
    }
    ObservationLayout::from_groups(groups)
}

/// Writes env `slot`'s observation into `out` (`size()` values): the benchmark's groups from
/// the env's observation batch, then the reference frames at t + dt, ..., t + H·dt, then the
/// reference rows (state | privileged_state) at t + dt, ..., t + H_goal·dt.
pub fn fill_observation(
    layout: &ObservationLayout,
    env: &TrackingEnv,
    slot: usize,
    scratch: &mut ReferenceScratch,
    out: &mut [f32],
) {
    let obs = env.observations();
    // The robot groups share one handler readout and one reference state per row.
    let mut readout: Option<RobotReadout> = None;
    let mut reference_ready = false;
    for (name, range) in layout.groups() {
        let dst = &mut out[range.clone()];
        let n = range.len();
        match name {
            "state" => dst.copy_from_slice(&obs.state[slot * n..(slot + 1) * n]),
            "privileged_state" => dst.copy_from_slice(&obs.privileged_state[slot * n..(slot + 1) * n]),
            "last_action" => dst.copy_from_slice(&obs.last_action[slot * n..(slot + 1) * n]),
            "history_actor" => dst.copy_from_slice(&obs.history_actor[slot * n..(slot + 1) * n]),
            REFERENCE_GROUP => {
                let (Some(a), info) = (env.assignment(slot), &env.infos()[slot]) else {
                    dst.fill(0.0);
                    continue;
                };
                let motion = &env.library().motions[a.motion];
                for k in 0..layout.reference_horizon() {
                    let t = info.motion_time + (k + 1) as f64 * CONTROL_DT;
                    motion.pose_at(t, &mut scratch.qpos, &mut scratch.body_pos);
                    for (d, s) in dst[k * NQ..(k + 1) * NQ].iter_mut().zip(&scratch.qpos) {
                        *d = *s as f32;
                    }
                }
            }
            REFERENCE_GOAL_GROUP => {
                let (Some(a), info) = (env.assignment(slot), &env.infos()[slot]) else {
                    dst.fill(0.0);
                    continue;
                };
                let motion = &env.library().motions[a.motion];
                let state = &mut scratch.state;
                for (k, row) in dst.chunks_exact_mut(REFERENCE_GOAL_ROW).enumerate() {
                    // The env's own time formula (start + step·dt) one to H steps ahead, so
                    // row k is exactly the reference observation of episode step t + k + 1.
                    let t = a.start_time + (info.step + k + 1) as f64 * CONTROL_DT;
                    motion.state_at(t, state);
                    let (s, p) = row.split_at_mut(STATE_DIM);
                    observation::reference_state_row(state, env.robot(), s);
                    observation::privileged_state(
                        &state.body_pos,
                        &state.body_rot,
                        &state.body_vel,
                        &state.body_ang_vel,
                        p,
                    );
                }
            }
            robot_group => {
                let (Some(a), info) = (env.assignment(slot), &env.infos()[slot]) else {
                    dst.fill(0.0);
                    continue;
                };
                let r = readout.get_or_insert_with(|| {
                    RobotReadout::read(
                        env.handler(),
                        slot,
                        true,
                        layout.group("imu").is_some() || layout.group("imu_torso").is_some(),
                    )
                });
                if robot_group.starts_with("motion_") && !reference_ready {
                    // The command is the frame this step's action must reach (mjlab / BeyondMimic:
                    // the command advances before the observation), at the env's own time formula
                    // for the next row, the reference that row is scored against.
                    let target = a.start_time + (info.step + 1) as f64 * CONTROL_DT;
                    env.library().motions[a.motion].state_at(target, &mut scratch.state);
                    reference_ready = true;
                }
                let (reference, anchor) = (&*scratch.state, scratch.anchor);
                match robot_group {
                    "imu" => robot::imu_pelvis(r, dst),
                    "imu_torso" => robot::imu_torso(r, dst),
                    "motors" => robot::motors(r, dst),
                    "base_lin_vel" => robot::base_lin_vel(r, dst),
                    "motion_command" => robot::motion_command(reference, dst),
                    "motion_anchor_pos_b" => robot::motion_anchor_pos_b(r, reference, anchor, dst),
                    "motion_anchor_ori_b" => robot::motion_anchor_ori_b(r, reference, anchor, dst),
                    "motion_anchor_pose_w" => robot::motion_anchor_pose_w(reference, anchor, dst),
                    other => unreachable!("observation group {other:?} passed benchmark validation"),
                }
            }
        }
    }
}

/// Values per episode of a simulator observation group.
fn group_size(name: &str) -> usize {
    match name {
        "state" => STATE_DIM,
        "privileged_state" => PRIVILEGED_STATE_DIM,
        "last_action" => LAST_ACTION_DIM,
        "history_actor" => HISTORY_ACTOR_DIM,
        other => robot::GROUPS
            .iter()
            .find(|(g, _)| *g == other)
            .map(|(_, size)| *size)
            .unwrap_or_else(|| unreachable!("observation group {other:?} passed benchmark validation")),
    }
}

/// Buffers for sampling reference poses and states without allocating per step, and the
/// anchor body of the `motion_anchor_*` groups.
#[derive(Debug)]
pub struct ReferenceScratch {
    qpos: [f64; NQ],
    body_pos: Vec<f64>,
    state: Box<MotionState>,
    anchor: usize,
}

impl Default for ReferenceScratch {
    fn default() -> Self {
        Self {
            qpos: [0.0; NQ],
            body_pos: vec![0.0; 3 * NUM_BODIES_EXT],
            state: Box::default(),
            anchor: TORSO_INDEX,
        }
    }
}

impl ReferenceScratch {
    /// Scratch for a benchmark's rows: its anchor body (validated by the benchmark's parser).
    pub fn for_spec(spec: &BenchmarkSpec) -> Self {
        Self {
            anchor: robot::body_index(&spec.observations.anchor_body).unwrap_or(TORSO_INDEX),
            ..Self::default()
        }
    }
}
