//! What an agent observes: a benchmark's observation layout (the groups it sends, in order) and
//! the filling of one episode's row from the env — BFM-Zero's groups from the env's batch, the
//! robot-interface groups (IMUs, motors, tracking command) from the handler and the reference
//! motion, the `reference` frames and the `reference_goal` rows computed with the simulator's
//! reference-observation terms. The server's lanes and the local runner both fill rows here.

use arena_bench::spec::BenchmarkSpec;
use arena_g1::{Group, REFERENCE_GOAL_GROUP, REFERENCE_GOAL_ROW, REFERENCE_GROUP, Source};
use arena_sdk::ObservationLayout;
use arena_sim::CONTROL_DT;
use arena_sim::env::{EpisodeAssignment, TrackingEnv};
use arena_sim::handler::NQ;
use arena_sim::motion::MotionState;
use arena_sim::observation::{self, STATE_DIM};
use arena_sim::robot::{NUM_BODIES_EXT, TORSO_INDEX};
use arena_sim::robot_interface::{self as robot, ReadoutParts, RobotReadout};
use std::ops::Range;
use std::sync::Mutex;

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
///
/// A plan made for an env's slots ([`ObservationPlan::for_slots`]) keeps each slot's
/// `reference_goal` rows from one fill to the next ([`GoalRows`]); one made without
/// ([`ObservationPlan::for_spec`]) computes every row each time. Both fill the same values.
#[derive(Debug)]
pub struct ObservationPlan {
    layout: ObservationLayout,
    parts: Vec<(Part, Range<usize>)>,
    anchor: usize,
    /// What the robot and command groups read of the robot, and only that, each row.
    readout: ReadoutParts,
    /// Per env slot (one env: one motion library), its last fill's `reference_goal` rows.
    goal_rows: Vec<Mutex<GoalRows>>,
    /// Each `reference_goal` row is sent once ([`ObservationPlan::sending_goal_rows_once`]): a
    /// row holds only the newest, and an episode's first rows go with its start.
    goal_rows_once: bool,
}

#[derive(Debug, Clone, Copy)]
enum Part {
    Group(Group),
    Reference { horizon: usize },
    ReferenceGoal { horizon: usize },
}

impl ObservationPlan {
    /// The plan of `spec` for an env of `slots` envs: each slot's `reference_goal` rows are kept
    /// between fills, so a step computes the one row that enters its horizon instead of all
    /// of them (the server's lanes, `arena eval`).
    pub fn for_slots(spec: &BenchmarkSpec, slots: usize) -> Self {
        let mut plan = Self::for_spec(spec);
        let goal = plan.parts.iter().any(|(p, _)| matches!(p, Part::ReferenceGoal { .. }));
        if goal {
            plan.goal_rows = (0..slots).map(|_| Mutex::default()).collect();
        }
        plan
    }

    /// The plan of `spec`, keeping nothing between fills (a layout, a single row).
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
        // The benchmark's parser checked the name.
        let anchor = robot::body_index(&obs.anchor_body).unwrap_or(TORSO_INDEX);
        let readout = obs
            .granted()
            .map(|g| ReadoutParts::of_group(g, anchor))
            .fold(ReadoutParts::default(), ReadoutParts::union);
        Self {
            layout,
            parts,
            anchor,
            readout,
            goal_rows: Vec::new(),
            goal_rows_once: false,
        }
    }

    /// The plan of a session that sends each `reference_goal` row once (docs/protocol.md §5,
    /// `connect.reference_goal_once`), when `once` and the layout has the group: a row then
    /// holds only the group's newest row ([`Self::size`] is 527 × (H − 1) values smaller), and
    /// [`Self::first_goal_rows`] gives what an episode's start carries. Nothing is kept between
    /// fills: each row is computed once, when it enters the horizon.
    pub fn sending_goal_rows_once(mut self, once: bool) -> Self {
        self.goal_rows_once = once && self.goal_horizon() > 0;
        if self.goal_rows_once {
            self.goal_rows = Vec::new();
        }
        self
    }

    /// Whether a row holds only the newest `reference_goal` row.
    pub fn goal_rows_once(&self) -> bool {
        self.goal_rows_once
    }

    /// The `reference_goal` horizon H of the layout (0 without the group).
    fn goal_horizon(&self) -> usize {
        self.parts
            .iter()
            .find_map(|(p, _)| match p {
                Part::ReferenceGoal { horizon } => Some(*horizon),
                _ => None,
            })
            .unwrap_or(0)
    }

    /// What a session that sends each `reference_goal` row once sends at an episode's start:
    /// its rows 1 … H − 1 (row j: the reference at `start_time + j·dt`), 527 values each; empty
    /// for a plan that sends every row each step.
    pub fn first_goal_rows(&self, env: &TrackingEnv, assignment: &EpisodeAssignment) -> Vec<f32> {
        if !self.goal_rows_once {
            return Vec::new();
        }
        let horizon = self.goal_horizon();
        let mut rows = vec![0.0f32; (horizon - 1) * REFERENCE_GOAL_ROW];
        let mut state = Box::<MotionState>::default();
        for (k, row) in rows.chunks_exact_mut(REFERENCE_GOAL_ROW).enumerate() {
            goal_row(env, assignment, k + 1, &mut state, row);
        }
        rows
    }

    /// The layout its sessions announce.
    pub fn layout(&self) -> &ObservationLayout {
        &self.layout
    }

    /// Values per episode row as sent: the layout's, less 527 × (H − 1) when each
    /// `reference_goal` row is sent once.
    pub fn size(&self) -> usize {
        match self.goal_rows_once {
            true => self.layout.size() - (self.goal_horizon() - 1) * REFERENCE_GOAL_ROW,
            false => self.layout.size(),
        }
    }

    /// Writes env `slot`'s observation into `out` ([`Self::size`] values): the benchmark's
    /// groups (BFM-Zero's from the env's observation batch, the robot's and the command from
    /// the handler and the reference motion), then the reference frames at t + dt, ..., t + H·dt,
    /// then the reference rows (state | privileged_state) at t + dt, ..., t + H_goal·dt (only
    /// the last when each is sent once).
    pub fn fill(&self, env: &TrackingEnv, slot: usize, scratch: &mut ReferenceScratch, out: &mut [f32]) {
        let obs = env.observations();
        // Each part's place in the row as sent: the layout's ranges, `reference_goal` (the last
        // part) cut to one row when each is sent once.
        let goal_cut = match self.goal_rows_once {
            true => (self.goal_horizon() - 1) * REFERENCE_GOAL_ROW,
            false => 0,
        };
        // The robot groups share one handler readout and one reference state per row.
        let mut readout_ready = false;
        let mut reference_ready = false;
        for (part, range) in &self.parts {
            let range = match part {
                Part::ReferenceGoal { .. } => range.start..range.end - goal_cut,
                _ => range.clone(),
            };
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
                Part::ReferenceGoal { horizon } if self.goal_rows_once => {
                    // Only the row that enters the horizon: step + H.
                    goal_row(env, &a, info.step + horizon, &mut scratch.state, dst);
                }
                Part::ReferenceGoal { horizon } => {
                    let state = &mut scratch.state;
                    // Row k of this fill is the episode's row step + k + 1.
                    let row_at = |j: usize, row: &mut [f32]| goal_row(env, &a, j, state, row);
                    match self.goal_rows.get(slot) {
                        Some(kept) => {
                            // A panic inside a fill leaves the kept rows unusable, not wrong:
                            // start again from nothing.
                            let mut kept = kept.lock().unwrap_or_else(|poisoned| {
                                let mut kept = poisoned.into_inner();
                                *kept = GoalRows::default();
                                kept
                            });
                            kept.fill((a.motion, a.start_time.to_bits()), info.step + 1, horizon, dst, row_at);
                        }
                        None => {
                            let mut row_at = row_at;
                            for (k, row) in dst.chunks_exact_mut(REFERENCE_GOAL_ROW).take(horizon).enumerate() {
                                row_at(info.step + k + 1, row);
                            }
                        }
                    }
                }
                Part::Group(group) => {
                    if !readout_ready {
                        scratch.readout.read_parts(env.handler(), slot, &self.readout);
                        readout_ready = true;
                    }
                    let r = &scratch.readout;
                    if group.source() == Source::Command && !reference_ready {
                        // The command is the frame this step's action must reach (mjlab /
                        // BeyondMimic: the command advances before the observation), at the
                        // env's own time formula for the next row, the reference that row is
                        // scored against.
                        let target = a.start_time + (info.step + 1) as f64 * CONTROL_DT;
                        env.library().motions[a.motion].command_at(target, self.anchor, &mut scratch.state);
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

/// Values of an episode's first `reference_goal` rows (1 … H − 1) under `spec`, what its
/// EpisodeInfo carries in a session that sends each row once; 0 without the group.
pub fn first_goal_values(spec: &BenchmarkSpec) -> usize {
    (spec.observations.reference_goal_horizon as usize).saturating_sub(1) * REFERENCE_GOAL_ROW
}

/// Row j of an episode's `reference_goal` group: the reference observation (state |
/// privileged_state) at the env's own time formula for its step j, start + j·dt.
fn goal_row(env: &TrackingEnv, a: &EpisodeAssignment, j: usize, state: &mut MotionState, row: &mut [f32]) {
    let motion = &env.library().motions[a.motion];
    motion.state_at(a.start_time + j as f64 * CONTROL_DT, state);
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

/// One env slot's `reference_goal` rows, kept from one fill to the next. Row j of an episode
/// depends on its motion, its start time and j alone, and a step's rows j = step + 1 … step + H
/// share H − 1 with the step before's: a fill computes the rows it lacks (one per step of a
/// running episode) and copies the rest. A ring of H rows, oldest first from `head`.
#[derive(Debug, Default)]
struct GoalRows {
    /// The motion and the start time's bits the rows are of; None before the first fill.
    key: Option<(usize, u64)>,
    /// Episode row index of the oldest row kept.
    first: usize,
    /// Rows kept, from `head` on (wrapping).
    len: usize,
    head: usize,
    rows: Vec<f32>,
}

impl GoalRows {
    /// Writes rows `first` … `first + horizon − 1` of episode `key` into `out`, computing the
    /// ones not kept with `row_at(j, row)`.
    fn fill(
        &mut self,
        key: (usize, u64),
        first: usize,
        horizon: usize,
        out: &mut [f32],
        mut row_at: impl FnMut(usize, &mut [f32]),
    ) {
        const W: usize = REFERENCE_GOAL_ROW;
        if horizon == 0 {
            return;
        }
        if self.rows.len() != horizon * W {
            self.rows = vec![0.0; horizon * W];
            self.len = 0;
        }
        if self.key == Some(key) && first >= self.first && first - self.first < self.len {
            let gone = first - self.first;
            self.head = (self.head + gone) % horizon;
            self.len -= gone;
        } else {
            (self.head, self.len) = (0, 0);
        }
        (self.key, self.first) = (Some(key), first);
        while self.len < horizon {
            let at = (self.head + self.len) % horizon;
            row_at(first + self.len, &mut self.rows[at * W..(at + 1) * W]);
            self.len += 1;
        }
        let (wrapped, oldest) = self.rows.split_at(self.head * W);
        out[..oldest.len()].copy_from_slice(oldest);
        out[oldest.len()..horizon * W].copy_from_slice(wrapped);
    }
}

/// Buffers for sampling reference poses and states without allocating per step (one per
/// thread that fills rows).
#[derive(Debug)]
pub struct ReferenceScratch {
    qpos: [f64; NQ],
    body_pos: Vec<f64>,
    state: Box<MotionState>,
    /// The robot groups' handler readout of the row being filled.
    readout: Box<RobotReadout>,
}

impl Default for ReferenceScratch {
    fn default() -> Self {
        Self {
            qpos: [0.0; NQ],
            body_pos: vec![0.0; 3 * NUM_BODIES_EXT],
            state: Box::default(),
            readout: Box::default(),
        }
    }
}
