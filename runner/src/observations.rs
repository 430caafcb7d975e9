//! What an agent observes: a benchmark's observation layout (the groups it sends, in order) and
//! the filling of one episode's row from the env — BFM-Zero's groups from the env's batch, the
//! robot-interface groups (IMUs, motors, tracking command) from the handler and the reference
//! motion, the `reference` frames and the `reference_goal` rows computed with the simulator's
//! reference-observation terms. The server's lanes and the local runner both fill rows here.

use arena_bench::spec::BenchmarkSpec;
use arena_g1::{Group, REFERENCE_GOAL_GROUP, REFERENCE_GOAL_ROW, REFERENCE_GROUP, Source};
use arena_sdk::ObservationLayout;
use arena_sim::CONTROL_DT;
use arena_sim::env::TrackingEnv;
use arena_sim::handler::NQ;
use arena_sim::motion::MotionState;
use arena_sim::observation::{self, STATE_DIM};
use arena_sim::robot::{NUM_BODIES_EXT, TORSO_INDEX};
use arena_sim::robot_interface::{self as robot, RobotReadout};
use std::ops::Range;

/// Whether a benchmark sends a group that reads the IMU accelerometers (its model must be
/// compiled with them).
pub fn needs_imu(spec: &BenchmarkSpec) -> bool {
    spec.observations.granted().any(Group::reads_accelerometers)
}

/// The layout a benchmark's sessions announce (see [`ObservationPlan`]).
pub fn observation_layout(spec: &BenchmarkSpec) -> ObservationLayout {
    ObservationPlan::for_spec(spec).layout
}

/// What an agent observes under a benchmark, resolved once: the layout its sessions announce
/// (the benchmark's groups in its order, then `reference` when `reference_horizon` > 0, then
/// `reference_goal` when `reference_goal_horizon` > 0), where each part of a row comes from,
/// and the anchor body of the `motion_anchor_*` groups.
#[derive(Debug, Clone)]
pub struct ObservationPlan {
    layout: ObservationLayout,
    parts: Vec<(Part, Range<usize>)>,
    anchor: usize,
    reads_accelerometers: bool,
}

#[derive(Debug, Clone, Copy)]
enum Part {
    Group(Group),
    Reference { horizon: usize },
    ReferenceGoal { horizon: usize },
}

impl ObservationPlan {
    pub fn for_spec(spec: &BenchmarkSpec) -> Self {
        let obs = &spec.observations;
        let mut parts: Vec<(Part, String, usize)> = obs
            .granted()
            .map(|g| (Part::Group(g), g.name().to_string(), g.size()))
            .collect();
        let horizon = obs.reference_horizon as usize;
        if horizon > 0 {
            parts.push((Part::Reference { horizon }, REFERENCE_GROUP.into(), horizon * NQ));
        }
        let horizon = obs.reference_goal_horizon as usize;
        if horizon > 0 {
            let size = horizon * REFERENCE_GOAL_ROW;
            parts.push((Part::ReferenceGoal { horizon }, REFERENCE_GOAL_GROUP.into(), size));
        }
        let layout = ObservationLayout::from_groups(parts.iter().map(|(_, name, size)| (name.clone(), *size)));
        let parts = parts
            .into_iter()
            .zip(layout.groups())
            .map(|((part, _, _), (_, range))| (part, range))
            .collect();
        Self {
            layout,
            parts,
            // The benchmark's parser checked the name.
            anchor: robot::body_index(&obs.anchor_body).unwrap_or(TORSO_INDEX),
            reads_accelerometers: needs_imu(spec),
        }
    }

    /// The layout its sessions announce.
    pub fn layout(&self) -> &ObservationLayout {
        &self.layout
    }

    /// Values per episode row.
    pub fn size(&self) -> usize {
        self.layout.size()
    }

    /// Writes env `slot`'s observation into `out` ([`Self::size`] values): the benchmark's
    /// groups (BFM-Zero's from the env's observation batch, the robot's and the command from
    /// the handler and the reference motion), then the reference frames at t + dt, ..., t + H·dt,
    /// then the reference rows (state | privileged_state) at t + dt, ..., t + H_goal·dt.
    pub fn fill(&self, env: &TrackingEnv, slot: usize, scratch: &mut ReferenceScratch, out: &mut [f32]) {
        let obs = env.observations();
        // The robot groups share one handler readout and one reference state per row.
        let mut readout: Option<RobotReadout> = None;
        let mut reference_ready = false;
        for (part, range) in &self.parts {
            let dst = &mut out[range.clone()];
            let n = range.len();
            // BFM-Zero's groups: the env's observation batch, episode or not.
            let batch = match part {
                Part::Group(Group::State) => Some(&obs.state),
                Part::Group(Group::PrivilegedState) => Some(&obs.privileged_state),
                Part::Group(Group::LastAction) => Some(&obs.last_action),
                Part::Group(Group::HistoryActor) => Some(&obs.history_actor),
                _ => None,
            };
            if let Some(values) = batch {
                dst.copy_from_slice(&values[slot * n..(slot + 1) * n]);
                continue;
            }
            let (Some(a), info) = (env.assignment(slot), &env.infos()[slot]) else {
                dst.fill(0.0);
                continue;
            };
            match *part {
                Part::Reference { horizon } => {
                    let motion = &env.library().motions[a.motion];
                    for k in 0..horizon {
                        let t = info.motion_time + (k + 1) as f64 * CONTROL_DT;
                        motion.pose_at(t, &mut scratch.qpos, &mut scratch.body_pos);
                        for (d, s) in dst[k * NQ..(k + 1) * NQ].iter_mut().zip(&scratch.qpos) {
                            *d = *s as f32;
                        }
                    }
                }
                Part::ReferenceGoal { horizon } => {
                    let motion = &env.library().motions[a.motion];
                    let state = &mut scratch.state;
                    for (k, row) in dst.chunks_exact_mut(REFERENCE_GOAL_ROW).take(horizon).enumerate() {
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
                Part::Group(group) => {
                    let r = readout.get_or_insert_with(|| {
                        RobotReadout::read(env.handler(), slot, true, self.reads_accelerometers)
                    });
                    if group.source() == Source::Command && !reference_ready {
                        // The command is the frame this step's action must reach (mjlab /
                        // BeyondMimic: the command advances before the observation), at the
                        // env's own time formula for the next row, the reference that row is
                        // scored against.
                        let target = a.start_time + (info.step + 1) as f64 * CONTROL_DT;
                        env.library().motions[a.motion].state_at(target, &mut scratch.state);
                        reference_ready = true;
                    }
                    let (reference, anchor) = (&*scratch.state, self.anchor);
                    match group {
                        Group::Imu => robot::imu_pelvis(r, dst),
                        Group::ImuTorso => robot::imu_torso(r, dst),
                        Group::Motors => robot::motors(r, dst),
                        Group::BaseLinVel => robot::base_lin_vel(r, dst),
                        Group::MotionCommand => robot::motion_command(reference, dst),
                        Group::MotionAnchorPosB => robot::motion_anchor_pos_b(r, reference, anchor, dst),
                        Group::MotionAnchorOriB => robot::motion_anchor_ori_b(r, reference, anchor, dst),
                        Group::MotionAnchorPoseW => robot::motion_anchor_pose_w(reference, anchor, dst),
                        // Copied from the batch above.
                        Group::State | Group::PrivilegedState | Group::LastAction | Group::HistoryActor => {}
                    }
                }
            }
        }
    }
}

/// Buffers for sampling reference poses and states without allocating per step (one per
/// thread that fills rows).
#[derive(Debug)]
pub struct ReferenceScratch {
    qpos: [f64; NQ],
    body_pos: Vec<f64>,
    state: Box<MotionState>,
}

impl Default for ReferenceScratch {
    fn default() -> Self {
        Self {
            qpos: [0.0; NQ],
            body_pos: vec![0.0; 3 * NUM_BODIES_EXT],
            state: Box::default(),
        }
    }
}
