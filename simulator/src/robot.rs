//! The Unitree G1 (29 DOF): the project's MJCF, joint and body orders, PD gains and limits
//! (BFM_ZERO_FACTS §1), and the action → PD target mapping (§1.3).

use crate::SimError;
use arena_data::NUM_JOINTS;
use mujoco_rs::prelude::MjModel;
use serde::{Deserialize, Serialize};

pub use arena_data::G1_JOINT_NAMES as JOINT_NAMES;

/// The project's G1 model as authored (base gain set's force limits).
pub const G1_MJCF: &str = include_str!("../assets/g1/g1_29dof.xml");

/// Real bodies in the order of BFM-Zero's body tensors (DFS order of the MJCF tree).
pub const BODY_NAMES: [&str; 30] = [
    "pelvis",
    "left_hip_pitch_link",
    "left_hip_roll_link",
    "left_hip_yaw_link",
    "left_knee_link",
    "left_ankle_pitch_link",
    "left_ankle_roll_link",
    "right_hip_pitch_link",
    "right_hip_roll_link",
    "right_hip_yaw_link",
    "right_knee_link",
    "right_ankle_pitch_link",
    "right_ankle_roll_link",
    "waist_yaw_link",
    "waist_roll_link",
    "torso_link",
    "left_shoulder_pitch_link",
    "left_shoulder_roll_link",
    "left_shoulder_yaw_link",
    "left_elbow_link",
    "left_wrist_roll_link",
    "left_wrist_pitch_link",
    "left_wrist_yaw_link",
    "right_shoulder_pitch_link",
    "right_shoulder_roll_link",
    "right_shoulder_yaw_link",
    "right_elbow_link",
    "right_wrist_roll_link",
    "right_wrist_pitch_link",
    "right_wrist_yaw_link",
];
/// Bodies including the virtual head (index 30).
pub const NUM_BODIES_EXT: usize = 31;
pub const NUM_BODIES: usize = 30;
pub const HEAD_NAME: &str = "head_link";
/// Torso body index and the virtual head's offset in the torso frame.
pub const TORSO_INDEX: usize = 15;
pub const HEAD_OFFSET: [f64; 3] = [0.0, 0.0, 0.35];

/// Default joint pose q0 (rad), G1 order.
pub const DEFAULT_POSE: [f64; NUM_JOINTS] = [
    -0.1, 0.0, 0.0, 0.3, -0.2, 0.0, //
    -0.1, 0.0, 0.0, 0.3, -0.2, 0.0, //
    0.0, 0.0, 0.0, //
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, //
    0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0,
];

const KP_HIP: f64 = 99.09843;
const KD_HIP: f64 = 6.3088;
const KP_YAW: f64 = 40.17924;
const KD_YAW: f64 = 2.55789;
const KP_ANKLE: f64 = 28.50125;
const KD_ANKLE: f64 = 1.81445;
const KP_ARM: f64 = 14.25062;
const KD_ARM: f64 = 0.90722;
const KP_WRIST: f64 = 16.77833;
const KD_WRIST: f64 = 1.06814;

const KP_BASE: [f64; NUM_JOINTS] = [
    KP_HIP, KP_HIP, KP_YAW, KP_HIP, KP_ANKLE, KP_ANKLE, //
    KP_HIP, KP_HIP, KP_YAW, KP_HIP, KP_ANKLE, KP_ANKLE, //
    KP_YAW, KP_ANKLE, KP_ANKLE, //
    KP_ARM, KP_ARM, KP_ARM, KP_ARM, KP_ARM, KP_WRIST, KP_WRIST, //
    KP_ARM, KP_ARM, KP_ARM, KP_ARM, KP_ARM, KP_WRIST, KP_WRIST,
];
const KD_BASE: [f64; NUM_JOINTS] = [
    KD_HIP, KD_HIP, KD_YAW, KD_HIP, KD_ANKLE, KD_ANKLE, //
    KD_HIP, KD_HIP, KD_YAW, KD_HIP, KD_ANKLE, KD_ANKLE, //
    KD_YAW, KD_ANKLE, KD_ANKLE, //
    KD_ARM, KD_ARM, KD_ARM, KD_ARM, KD_ARM, KD_WRIST, KD_WRIST, //
    KD_ARM, KD_ARM, KD_ARM, KD_ARM, KD_ARM, KD_WRIST, KD_WRIST,
];
const EFFORT_BASE: [f64; NUM_JOINTS] = [
    88.0, 88.0, 88.0, 139.0, 50.0, 50.0, //
    88.0, 88.0, 88.0, 139.0, 50.0, 50.0, //
    88.0, 50.0, 50.0, //
    25.0, 25.0, 25.0, 25.0, 25.0, 5.0, 5.0, //
    25.0, 25.0, 25.0, 25.0, 25.0, 5.0, 5.0,
];

/// Which PD gain set drives the robot (BFM_ZERO_FACTS §10.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GainSet {
    /// `g1_29dof.yaml`: the gains and action scales of the released policy (default).
    #[default]
    Base,
    /// `g1_29dof_hard_waist.yaml`: waist kp 300 / kd 5, hip pitch/roll effort 139.
    HardWaist,
}

/// Robot configuration: gain set plus the derived per-joint PD constants.
#[derive(Debug, Clone, PartialEq)]
pub struct RobotConfig {
    pub gains: GainSet,
    pub kp: [f64; NUM_JOINTS],
    pub kd: [f64; NUM_JOINTS],
    pub effort: [f64; NUM_JOINTS],
    pub default_pose: [f64; NUM_JOINTS],
}

impl Default for RobotConfig {
    fn default() -> Self {
        Self::new(GainSet::Base)
    }
}

impl RobotConfig {
    pub fn new(gains: GainSet) -> Self {
        let (mut kp, mut kd, mut effort) = (KP_BASE, KD_BASE, EFFORT_BASE);
        if gains == GainSet::HardWaist {
            for j in 12..15 {
                kp[j] = 300.0;
                kd[j] = 5.0;
            }
            for j in [0, 1, 6, 7] {
                effort[j] = 139.0;
            }
        }
        Self {
            gains,
            kp,
            kd,
            effort,
            default_pose: DEFAULT_POSE,
        }
    }

    /// Per-joint action scale 0.25·effort/kp: a normalised action of 1 (a5 = 5) moves the
    /// target by 5× this many radians.
    pub fn action_scale(&self, j: usize) -> f64 {
        0.25 * self.effort[j] / self.kp[j]
    }

    /// The MJCF the simulator compiles for this configuration: the authored model with the
    /// joints' actuator force ranges set to this gain set's effort limits.
    pub fn mjcf(&self) -> String {
        let mut xml = String::with_capacity(G1_MJCF.len());
        for line in G1_MJCF.lines() {
            let patched = JOINT_NAMES.iter().enumerate().find_map(|(j, name)| {
                let tag = format!("<joint name=\"{name}\"");
                line.contains(&tag).then(|| {
                    let start = line
                        .find("actuatorfrcrange=\"")
                        .expect("authored joints carry a force range");
                    let rest = &line[start + 18..];
                    let end = rest.find('"').expect("closed attribute");
                    let e = self.effort[j];
                    format!("{}actuatorfrcrange=\"-{e} {e}\"{}", &line[..start], &rest[end + 1..])
                })
            });
            xml.push_str(patched.as_deref().unwrap_or(line));
            xml.push('\n');
        }
        xml
    }

    /// Compiles [`Self::mjcf`].
    pub fn compile(&self) -> Result<MjModel, SimError> {
        MjModel::from_xml_string(&self.mjcf()).map_err(|e| SimError::Model(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn action_scales_match_facts() {
        let c = RobotConfig::default();
        let expect = [0.22200, 0.22200, 0.54755, 0.35066, 0.43858, 0.43858];
        for (j, e) in expect.iter().enumerate() {
            assert!((c.action_scale(j) - e).abs() < 1e-5, "joint {j}");
        }
        assert!((c.action_scale(20) - 0.07450).abs() < 1e-5);
        let hw = RobotConfig::new(GainSet::HardWaist);
        assert_eq!(hw.kp[12], 300.0);
        assert_eq!(hw.effort[0], 139.0);
        assert!(hw.mjcf().contains("name=\"left_hip_pitch_joint\" class=\"leg_motor\" axis=\"0 1 0\" range=\"-2.5307 2.8798\" actuatorfrcrange=\"-139 139\""));
        assert_eq!(c.mjcf(), format!("{G1_MJCF}"));
    }
}
