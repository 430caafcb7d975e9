//! One recorded episode's rows: the arrays the simulator records (`arena_sim::env::Trajectory`),
//! the HDF5 trajectory file stores ([`crate::trajectory_file::EpisodeRecord`]) and scoring reads.
//! Both embed this one type, so no layer converts (or clones) another's copy of the same arrays.

/// Values per row of each array.
pub const QPOS_WIDTH: usize = crate::NUM_COLUMNS;
pub const QVEL_WIDTH: usize = 35;
/// 31 bodies (the 30 of the G1 model and the virtual head) × xyz.
pub const BODY_WIDTH: usize = 93;
pub const ACTION_WIDTH: usize = crate::NUM_JOINTS;
/// The `state` observation (BFM-Zero's proprioception).
pub const STATE_WIDTH: usize = arena_g1::STATE_DIM;

/// The required arrays' names (the trajectory file's dataset names) and widths, in file order.
/// `times` (width 1) is 1-D.
pub const DATASETS: [(&str, usize); 9] = [
    ("times", 1),
    ("qpos", QPOS_WIDTH),
    ("qvel", QVEL_WIDTH),
    ("body_pos", BODY_WIDTH),
    ("actions", ACTION_WIDTH),
    ("ref_qpos", QPOS_WIDTH),
    ("ref_body_pos", BODY_WIDTH),
    ("state", STATE_WIDTH),
    ("ref_state", STATE_WIDTH),
];

/// The arrays an episode may leave empty (the feed-forward torques outside the joint-position
/// mode; files written before the targets and torques were recorded), in file order.
pub const OPTIONAL_DATASETS: [(&str, usize); 3] = [
    ("targets", ACTION_WIDTH),
    ("torques", ACTION_WIDTH),
    ("feedforward", ACTION_WIDTH),
];

/// The rows of one episode, every array row-major with `times.len()` rows. Row k is the state
/// at motion time start + k·dt (row 0 is the reset state); `actions` row k is the action that
/// produced row k (zeros in row 0).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TrajectoryRows {
    /// T: the reference motion's time of each row (s).
    pub times: Vec<f64>,
    /// T × 36: MuJoCo qpos (root position, root quaternion wxyz, 29 joints).
    pub qpos: Vec<f64>,
    /// T × 35: MuJoCo qvel.
    pub qvel: Vec<f64>,
    /// T × 93: world positions of the 31 bodies.
    pub body_pos: Vec<f64>,
    /// T × 29: the agent's actions: the normalised values, or in the joint-position mode the
    /// absolute PD targets (rad).
    pub actions: Vec<f64>,
    /// T × 36: the reference motion's qpos at the same time.
    pub ref_qpos: Vec<f64>,
    /// T × 93: the reference's body positions.
    pub ref_body_pos: Vec<f64>,
    /// T × 64: the `state` observation the agent received (noise included).
    pub state: Vec<f64>,
    /// T × 64: the reference motion's `state` row at the same time.
    pub ref_state: Vec<f64>,
    /// T × 29 or empty: the PD targets the motors tracked to reach each row (rad; row 0: the
    /// reset pose), after the action mapping, the default-joint offset and any control delay.
    pub targets: Vec<f64>,
    /// T × 29 or empty: the torque each motor applied in the last physics substep before each
    /// row (N·m, after the effort clip; zeros in row 0).
    pub torques: Vec<f64>,
    /// T × 29 or empty: the joint-position mode's feed-forward torques of each row's action
    /// (zeros in row 0).
    pub feedforward: Vec<f64>,
}

impl TrajectoryRows {
    /// Number of rows (T).
    pub fn len(&self) -> usize {
        self.times.len()
    }

    pub fn is_empty(&self) -> bool {
        self.times.is_empty()
    }

    /// The required arrays in [`DATASETS`] order.
    pub fn arrays(&self) -> [&[f64]; 9] {
        [
            &self.times,
            &self.qpos,
            &self.qvel,
            &self.body_pos,
            &self.actions,
            &self.ref_qpos,
            &self.ref_body_pos,
            &self.state,
            &self.ref_state,
        ]
    }

    /// The required arrays in [`DATASETS`] order, to fill.
    pub fn arrays_mut(&mut self) -> [&mut Vec<f64>; 9] {
        [
            &mut self.times,
            &mut self.qpos,
            &mut self.qvel,
            &mut self.body_pos,
            &mut self.actions,
            &mut self.ref_qpos,
            &mut self.ref_body_pos,
            &mut self.state,
            &mut self.ref_state,
        ]
    }

    /// The optional arrays in [`OPTIONAL_DATASETS`] order.
    pub fn optional_arrays(&self) -> [&[f64]; 3] {
        [&self.targets, &self.torques, &self.feedforward]
    }

    /// The optional arrays in [`OPTIONAL_DATASETS`] order, to fill.
    pub fn optional_arrays_mut(&mut self) -> [&mut Vec<f64>; 3] {
        [&mut self.targets, &mut self.torques, &mut self.feedforward]
    }
}
