//! The env's public vocabulary: what an env runs (assignment, start pose, fall rule, action
//! mode, configuration) and what it reports (status, per-step info, the observation batch,
//! the recorded trajectory).

use super::BODY_W;
use crate::RobotConfig;
use crate::dr::DrLevel;
use crate::handler::{NQ, NV, SimBackend};
use crate::observation::{HISTORY_ACTOR_DIM, HistoryTiming, LAST_ACTION_DIM, PRIVILEGED_STATE_DIM, STATE_DIM};
use arena_data::{NUM_JOINTS, TrajectoryRows};
use serde::{Deserialize, Serialize};

/// What one env runs: a motion of the library from a start time, with a seed and DR level.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EpisodeAssignment {
    pub motion: usize,
    pub start_time: f64,
    pub seed: u64,
    pub dr_level: DrLevel,
}

/// A lying-down start: on which side of ±90° about world x the root is turned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LieDown {
    Plus,
    Minus,
}

impl LieDown {
    /// Root height of a lying-down start (m).
    pub const HEIGHT: f64 = 0.5;

    pub(super) fn sign(self) -> f64 {
        match self {
            LieDown::Plus => 1.0,
            LieDown::Minus => -1.0,
        }
    }
}

/// Optional early termination: the episode ends ("fell") when the robot leaves the reference.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FallRule {
    /// Root height below this many metres.
    MinRootHeight(f64),
    /// Any body farther than this many metres from its reference position.
    MaxBodyDeviation(f64),
}

/// How [`TrackingEnv::step`] reads an env's action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionMode {
    /// 29 normalised values a: target = default + offset + clip(5a, ±5)·0.25·effort/kp (BFM-Zero).
    #[default]
    Normalized,
    /// 29 absolute joint position targets (rad), then 29 feed-forward torques (N·m): the
    /// LowCmd semantics, τ = clip(kp·(q* − q) − kd·q̇ + τ_ff, ±effort) at every substep.
    JointPosition,
}

impl ActionMode {
    /// Values per env in the action batch `step` takes.
    pub fn width(self) -> usize {
        match self {
            ActionMode::Normalized => NUM_JOINTS,
            ActionMode::JointPosition => 2 * NUM_JOINTS,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ActionMode::Normalized => "normalized",
            ActionMode::JointPosition => "joint_position",
        }
    }
}

/// How far outside a joint's range a joint-position target may lie (rad): farther is a broken
/// action, not a policy's overshoot.
pub const TARGET_RANGE_MARGIN: f64 = std::f64::consts::PI;

#[derive(Debug, Clone)]
pub struct TrackingEnvConfig {
    pub robot: RobotConfig,
    pub num_envs: usize,
    /// Worker threads (0 = rayon's default).
    pub threads: usize,
    pub history: HistoryTiming,
    pub fall_rule: Option<FallRule>,
    /// Record trajectories (qpos, qvel, bodies, actions, reference) per env.
    pub record: bool,
    /// Which physics backend simulates the envs.
    pub backend: SimBackend,
    /// Whether the DR levels that randomise PD gains (2, 3) and add a control delay (3) do so.
    /// Scoring keeps the levels whole; the BFM-Zero trainer turns both off, as BFM-Zero does.
    pub dr_gains_and_delay: bool,
    /// How actions become PD targets (and feed-forward torques).
    pub action_mode: ActionMode,
    /// Whether the `privileged_state` rows are computed (left at zero otherwise): a benchmark
    /// that sends no such group, or a trainer that reads the handler itself, saves the work.
    pub compute_privileged_state: bool,
    /// Whether the `history_actor` rows are kept (the history ring pushed and written).
    pub compute_history: bool,
}

impl Default for TrackingEnvConfig {
    fn default() -> Self {
        Self {
            robot: RobotConfig::default(),
            num_envs: 1,
            threads: 0,
            history: HistoryTiming::default(),
            fall_rule: None,
            record: true,
            backend: SimBackend::Cpu,
            dr_gains_and_delay: true,
            action_mode: ActionMode::Normalized,
            compute_privileged_state: true,
            compute_history: true,
        }
    }
}

/// Why an env is not running.
#[derive(Debug, Clone, PartialEq)]
pub enum EpisodeStatus {
    /// No episode assigned (after construction).
    Idle,
    Running,
    /// Reached the end of its motion.
    Truncated,
    /// Ended by the fall rule.
    Fell,
    /// Stopped with a reason (bad action, simulator instability).
    Failed(String),
}

/// Lower-case words for people: `running`, `truncated`, `fell`, `failed: <reason>`.
impl std::fmt::Display for EpisodeStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            EpisodeStatus::Idle => f.write_str("idle"),
            EpisodeStatus::Running => f.write_str("running"),
            EpisodeStatus::Truncated => f.write_str("truncated"),
            EpisodeStatus::Fell => f.write_str("fell"),
            EpisodeStatus::Failed(reason) => write!(f, "failed: {reason}"),
        }
    }
}

impl EpisodeStatus {
    pub fn is_done(&self) -> bool {
        !matches!(self, EpisodeStatus::Running)
    }
}

/// Per-env result of a step.
#[derive(Debug, Clone, PartialEq)]
pub struct StepInfo {
    /// Control steps since reset.
    pub step: usize,
    /// Time within the reference motion (start time + step·dt).
    pub motion_time: f64,
    pub status: EpisodeStatus,
}

/// Observation groups for all envs, row-major (N × dim), f32. A step leaves the rows of an env
/// that does not run as they were, and those of an env it fails (a refused action, the physics)
/// too, except `history_actor`: the frames that env completed, newest first, under either
/// [`HistoryTiming`](crate::observation::HistoryTiming).
#[derive(Debug, Clone, Default)]
pub struct ObservationBatch {
    pub num_envs: usize,
    pub state: Vec<f32>,
    pub privileged_state: Vec<f32>,
    pub last_action: Vec<f32>,
    pub history_actor: Vec<f32>,
}

impl ObservationBatch {
    pub(super) fn new(n: usize) -> Self {
        Self {
            num_envs: n,
            state: vec![0.0; n * STATE_DIM],
            privileged_state: vec![0.0; n * PRIVILEGED_STATE_DIM],
            last_action: vec![0.0; n * LAST_ACTION_DIM],
            history_actor: vec![0.0; n * HISTORY_ACTOR_DIM],
        }
    }
}

/// One env's recorded episode: which episode it was, and its rows (the arrays the trajectory
/// file stores and scoring reads; `actions` hold the normalised values, or in the
/// joint-position mode the 29 targets in rad).
#[derive(Debug, Clone, Default)]
pub struct Trajectory {
    pub motion: usize,
    pub start_time: f64,
    pub seed: u64,
    pub dr_level: DrLevel,
    pub rows: TrajectoryRows,
}

impl Trajectory {
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    pub(super) fn reset(&mut self, a: &EpisodeAssignment, rows: usize) {
        self.motion = a.motion;
        self.start_time = a.start_time;
        self.seed = a.seed;
        self.dr_level = a.dr_level;
        let r = &mut self.rows;
        for (v, w) in [
            (&mut r.times, 1),
            (&mut r.qpos, NQ),
            (&mut r.qvel, NV),
            (&mut r.body_pos, BODY_W),
            (&mut r.actions, NUM_JOINTS),
            (&mut r.ref_qpos, NQ),
            (&mut r.ref_body_pos, BODY_W),
            // Recorded in the joint-position mode only.
            (&mut r.feedforward, 0),
            (&mut r.targets, NUM_JOINTS),
            (&mut r.torques, NUM_JOINTS),
            (&mut r.state, STATE_DIM),
            (&mut r.ref_state, STATE_DIM),
        ] {
            v.clear();
            v.reserve(rows * w);
        }
    }
}
