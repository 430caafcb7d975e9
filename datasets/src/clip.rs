//! The in-memory motion clip: frames of root pose and joint angles at a source frame rate.

use serde::{Deserialize, Serialize};

/// Number of actuated joints of the G1 (29 DOF).
pub use arena_g1::NUM_JOINTS;
/// Columns of a G1 motion row: root xyz (3), root quaternion (4), joint angles (29).
pub const NUM_COLUMNS: usize = arena_g1::QPOS_WIDTH;

/// Which part of a benchmark a clip belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Split {
    #[default]
    Train,
    Val,
    Test,
}

/// A reference motion as read from a file: `frames` rows of [`NUM_COLUMNS`] values in MuJoCo's
/// `qpos` layout (root position, root quaternion **wxyz**, 29 joint angles in G1 order).
/// Files store the quaternion as xyzw; readers and writers reorder at the boundary.
#[derive(Debug, Clone, PartialEq)]
pub struct MotionClip {
    pub name: String,
    pub category: String,
    pub fps: f64,
    /// Row-major, `num_frames() * NUM_COLUMNS` values.
    pub qpos: Vec<f64>,
    /// Body positions the file carried beside its joint angles (NPZ `body_pos_w`), checked by
    /// the simulator against forward kinematics of `qpos`; `None` for formats without them.
    pub witness: Option<Box<BodyWitness>>,
}

/// Body positions a motion file stores beside its joint angles. Forward kinematics of the
/// clip must reproduce them: that establishes the joint order of a file that names no joints,
/// and catches a file made for another robot model.
#[derive(Debug, Clone, PartialEq)]
pub struct BodyWitness {
    /// The file's body names, or `None`: MuJoCo's body order of the G1, pelvis first.
    pub body_names: Option<Vec<String>>,
    pub num_bodies: usize,
    /// frames × num_bodies × 3 (m, world frame).
    pub positions: Vec<f64>,
    /// Whether the joint order came from the file's `joint_names` (else it was assumed).
    pub joint_names_given: bool,
}

impl MotionClip {
    pub fn num_frames(&self) -> usize {
        self.qpos.len() / NUM_COLUMNS
    }

    pub fn frame(&self, i: usize) -> &[f64] {
        &self.qpos[i * NUM_COLUMNS..(i + 1) * NUM_COLUMNS]
    }

    /// Duration in seconds from the first to the last frame.
    pub fn duration_s(&self) -> f64 {
        (self.num_frames().saturating_sub(1)) as f64 / self.fps
    }
}

/// Splits a file stem `<category>__<clip>` into (category, clip name). Stems without the
/// separator get the category `uncategorised`.
pub fn name_and_category(stem: &str) -> (String, String) {
    match stem.split_once("__") {
        Some((cat, name)) if !cat.is_empty() && !name.is_empty() => (name.to_string(), cat.to_string()),
        _ => (stem.to_string(), "uncategorised".to_string()),
    }
}

/// The G1's 30 bodies in MuJoCo's body order (pelvis first): the order of BFM-Zero's body
/// tensors and of mjlab's motion files.
pub use arena_g1::BODY_NAMES as G1_BODY_NAMES;
