//! The Unitree G1 (29 DOF): the project's MJCF, joint and body orders, PD gains and limits
//! (BFM_ZERO_FACTS §1), and the action → PD target mapping (§1.3).

use crate::SimError;
use arena_data::NUM_JOINTS;
use mujoco_rs::prelude::MjModel;
use serde::{Deserialize, Serialize};

pub use arena_data::G1_JOINT_NAMES as JOINT_NAMES;

/// The project's G1 model as authored (base gain set's force limits).
pub const G1_MJCF: &str = include_str!("../assets/g1/g1_29dof.xml");

/// Real bodies in the order of BFM-Zero's body tensors (DFS order of the MJCF tree, MuJoCo's
/// body order): the list lives in arena-data, beside the joint order, for the crates that do
/// not link the simulator.
pub use arena_data::G1_BODY_NAMES as BODY_NAMES;
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

/// The G1's motors by joint (G1 order): Unitree's published motor types, as mjlab's G1 model
/// groups them. Hip roll and knee are the 139 N·m 7520-22; hip pitch, hip yaw and waist yaw the
/// 88 N·m 7520-14; ankles and waist roll / pitch a pair of 5020 (2 × 25 N·m) through a linkage;
/// shoulders, elbows and wrist roll a 5020; wrist pitch / yaw a 4010.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Motor {
    M7520_14,
    M7520_22,
    Dual5020,
    M5020,
    M4010,
}

impl Motor {
    /// Reflected rotor inertia (kg·m²), the joint armature mjlab's gains derive from.
    pub fn armature(self) -> f64 {
        match self {
            Motor::M7520_14 => 0.010_177_520,
            Motor::M7520_22 => 0.025_101_925,
            Motor::Dual5020 => 2.0 * 0.003_609_725,
            Motor::M5020 => 0.003_609_725,
            Motor::M4010 => 0.004_25,
        }
    }

    /// Peak torque (N·m) of the published motor specs.
    pub fn effort_limit(self) -> f64 {
        match self {
            Motor::M7520_14 => 88.0,
            Motor::M7520_22 => 139.0,
            Motor::Dual5020 => 50.0,
            Motor::M5020 => 25.0,
            Motor::M4010 => 5.0,
        }
    }
}

/// The motor of each joint, G1 order.
pub const MOTORS: [Motor; NUM_JOINTS] = {
    use Motor::*;
    [
        M7520_14, M7520_22, M7520_14, M7520_22, Dual5020, Dual5020, //
        M7520_14, M7520_22, M7520_14, M7520_22, Dual5020, Dual5020, //
        M7520_14, Dual5020, Dual5020, //
        M5020, M5020, M5020, M5020, M5020, M4010, M4010, //
        M5020, M5020, M5020, M5020, M5020, M4010, M4010,
    ]
};

/// Natural frequency (rad/s) and damping ratio of the armature-based gains: kp = J·ω²,
/// kd = 2·ζ·J·ω (BeyondMimic / mjlab).
pub const ARMATURE_GAIN_OMEGA: f64 = 10.0 * 2.0 * std::f64::consts::PI;
pub const ARMATURE_GAIN_ZETA: f64 = 2.0;

/// Which PD gain set drives the robot (BFM_ZERO_FACTS §10.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum GainSet {
    /// `g1_29dof.yaml`: the gains and action scales of the released policy (default).
    #[default]
    Base,
    /// `g1_29dof_hard_waist.yaml`: waist kp 300 / kd 5, hip pitch/roll effort 139.
    HardWaist,
    /// The armature-based gains of BeyondMimic / mjlab (kp = J·ω², kd = 2ζJω, ω = 2π·10 rad/s,
    /// ζ = 2, J per [`MOTORS`]) with the motors' published effort limits: the robot of the
    /// joint-position action mode.
    Armature,
}

/// Robot configuration: gain set plus the derived per-joint PD constants.
#[derive(Debug, Clone, PartialEq)]
pub struct RobotConfig {
    pub gains: GainSet,
    pub kp: [f64; NUM_JOINTS],
    pub kd: [f64; NUM_JOINTS],
    pub effort: [f64; NUM_JOINTS],
    pub default_pose: [f64; NUM_JOINTS],
    /// Compile the model with accelerometer sensors at the two IMU sites (`imu` groups): off by
    /// default, since MuJoCo then runs its post-constraint pass every substep.
    pub imu_sensors: bool,
}

impl Default for RobotConfig {
    fn default() -> Self {
        Self::new(GainSet::Base)
    }
}

impl RobotConfig {
    pub fn new(gains: GainSet) -> Self {
        let (mut kp, mut kd, mut effort) = (KP_BASE, KD_BASE, EFFORT_BASE);
        match gains {
            GainSet::Base => {}
            GainSet::HardWaist => {
                for j in 12..15 {
                    kp[j] = 300.0;
                    kd[j] = 5.0;
                }
                for j in [0, 1, 6, 7] {
                    effort[j] = 139.0;
                }
            }
            GainSet::Armature => {
                let (w, z) = (ARMATURE_GAIN_OMEGA, ARMATURE_GAIN_ZETA);
                for (j, m) in MOTORS.iter().enumerate() {
                    kp[j] = m.armature() * w * w;
                    kd[j] = 2.0 * z * m.armature() * w;
                    effort[j] = m.effort_limit();
                }
            }
        }
        Self {
            gains,
            kp,
            kd,
            effort,
            default_pose: DEFAULT_POSE,
            imu_sensors: false,
        }
    }

    /// Sites of the G1's two IMUs (pelvis, torso_link), whose accelerometers the `imu` groups read.
    pub const IMU_SITES: [&'static str; 2] = ["imu_in_pelvis", "imu_in_torso"];

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
            if self.imu_sensors && line.trim() == "</actuator>" {
                xml.push_str(line);
                xml.push_str("\n  <sensor>\n");
                for site in Self::IMU_SITES {
                    xml.push_str(&format!(
                        "    <accelerometer name=\"{site}_accelerometer\" site=\"{site}\"/>\n"
                    ));
                }
                xml.push_str("  </sensor>\n");
                continue;
            }
            xml.push_str(patched.as_deref().unwrap_or(line));
            xml.push('\n');
        }
        xml
    }

    /// Compiles [`Self::mjcf`]: a copy of the model compiled once per process for the same MJCF
    /// (`mj_copyModel`, the same arrays), since a server compiles the same one or two for
    /// every lane, every scoring thread's kinematics and every warm simulator; a parse that fails
    /// is not kept.
    pub fn compile(&self) -> Result<MjModel, SimError> {
        use std::sync::{Mutex, PoisonError};
        /// The models compiled last, newest last: a few configurations (joint efforts, the IMU
        /// sensors) per process.
        static COMPILED: Mutex<Vec<(String, MjModel)>> = Mutex::new(Vec::new());
        const KEPT: usize = 8;
        let xml = self.mjcf();
        let cached = |compiled: &[(String, MjModel)]| compiled.iter().find(|(k, _)| *k == xml).map(|(_, m)| m.clone());
        if let Some(model) = cached(&COMPILED.lock().unwrap_or_else(PoisonError::into_inner)) {
            return Ok(model);
        }
        let model = MjModel::from_xml_string(&xml).map_err(|e| SimError::Model(e.to_string()))?;
        let mut compiled = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
        if cached(&compiled).is_none() {
            if compiled.len() == KEPT {
                compiled.remove(0);
            }
            compiled.push((xml, model.clone()));
        }
        Ok(model)
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

    #[test]
    fn a_compiled_model_is_a_copy_of_its_configurations_own() {
        // The same MJCF gives the same model, another configuration its own, and a change to a
        // model handed out (domain randomisation writes masses) reaches no later compile.
        let mut first = RobotConfig::default().compile().unwrap();
        let nominal = first.body_mass().to_vec();
        first.body_mass_mut()[1] += 10.0;
        let again = RobotConfig::default().compile().unwrap();
        assert_eq!(again.body_mass(), nominal.as_slice());
        let sensors = RobotConfig {
            imu_sensors: true,
            ..RobotConfig::default()
        }
        .compile()
        .unwrap();
        assert!(sensors.ffi().nsensor > again.ffi().nsensor);
        assert_eq!(
            RobotConfig::default().compile().unwrap().ffi().nsensor,
            again.ffi().nsensor
        );
    }

    #[test]
    fn armature_gains_follow_the_motor_specs() {
        let a = RobotConfig::new(GainSet::Armature);
        // Hip roll and knee: 7520-22, J = 0.025101925 → kp ≈ 99.098, kd ≈ 6.309, 139 N·m.
        for j in [1, 3, 7, 9] {
            assert!((a.kp[j] - 99.0984).abs() < 1e-3, "joint {j}: {}", a.kp[j]);
            assert!((a.kd[j] - 6.3088).abs() < 1e-3);
            assert_eq!(a.effort[j], 139.0);
        }
        // Hip pitch: 7520-14, kp ≈ 40.179 (the base set drives it with 99.1).
        assert!((a.kp[0] - 40.1792).abs() < 1e-3);
        assert_eq!(a.effort[0], 88.0);
        assert_eq!(
            (a.effort[4], a.effort[13], a.effort[15], a.effort[20]),
            (50.0, 50.0, 25.0, 5.0)
        );
        assert!((a.kp[20] - 16.7783).abs() < 1e-3);
        let xml = RobotConfig { imu_sensors: true, ..a }.mjcf();
        assert!(xml.contains("<accelerometer name=\"imu_in_pelvis_accelerometer\" site=\"imu_in_pelvis\"/>"));
        RobotConfig {
            imu_sensors: true,
            ..RobotConfig::default()
        }
        .compile()
        .unwrap();
    }
}
