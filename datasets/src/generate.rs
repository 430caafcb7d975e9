//! Deterministic generator of the project's built-in G1 motions: smooth, slow, physically
//! plausible whole-body movements that start and end at rest in the standing pose, with the
//! feet kept on the ground. They let the main job and the tests run without external data.
//!
//! The generator knows joint names, not the robot's geometry: the caller passes a
//! [`FootKinematics`] (forward kinematics through the simulator) used to put the lowest foot
//! contact on the floor and keep the feet's midpoint fixed in the horizontal plane.

use crate::clip::{MotionClip, NUM_COLUMNS, NUM_JOINTS};

/// Frame rate of generated motions (the control rate).
pub const GENERATED_FPS: f64 = 50.0;

/// G1 joint order of the CSV format (and of actions, `dof_pos`, `dof_vel`).
pub use arena_g1::JOINT_NAMES as G1_JOINT_NAMES;

// Joint indices used by the generator (G1 order).
const L_HIP_PITCH: usize = 0;
const L_HIP_ROLL: usize = 1;
const L_KNEE: usize = 3;
const L_ANKLE_PITCH: usize = 4;
const L_ANKLE_ROLL: usize = 5;
const R_HIP_PITCH: usize = 6;
const R_HIP_ROLL: usize = 7;
const R_KNEE: usize = 9;
const R_ANKLE_PITCH: usize = 10;
const R_ANKLE_ROLL: usize = 11;
const WAIST_YAW: usize = 12;
const WAIST_PITCH: usize = 14;
const L_SHOULDER_PITCH: usize = 15;
const L_SHOULDER_ROLL: usize = 16;
const L_ELBOW: usize = 18;
const R_SHOULDER_PITCH: usize = 22;
const R_SHOULDER_ROLL: usize = 23;
const R_ELBOW: usize = 25;

/// Where the feet are for a given `qpos` (36 values, quaternion wxyz).
#[derive(Debug, Clone, Copy)]
pub struct FeetPlacement {
    /// World xy of the left and right foot (ankle roll) frames.
    pub left_xy: [f64; 2],
    pub right_xy: [f64; 2],
    /// Lowest world z of any foot contact surface.
    pub lowest_contact_z: f64,
}

/// Forward kinematics the generator needs; implemented by the simulator crate.
pub trait FootKinematics {
    fn feet(&mut self, qpos: &[f64]) -> FeetPlacement;
}

/// One built-in motion: a name and a joint-space pattern `offset(t, &mut dq)` added to the
/// standing pose, multiplied by a smooth envelope so the clip starts and ends at rest.
struct Pattern {
    name: &'static str,
    duration_s: f64,
    offset: fn(f64, &mut [f64; NUM_JOINTS]),
}

fn flex_leg(dq: &mut [f64; NUM_JOINTS], hip: usize, knee: usize, ankle: usize, amount: f64) {
    // hip + knee + ankle pitch stays constant, so the sole stays parallel to the floor.
    dq[hip] -= amount;
    dq[knee] += 2.0 * amount;
    dq[ankle] -= amount;
}

const TAU: f64 = std::f64::consts::TAU;

const PATTERNS: [Pattern; 6] = [
    Pattern {
        name: "stand",
        duration_s: 4.0,
        offset: |t, dq| {
            let s = (TAU * t / 4.0).sin();
            dq[L_ELBOW] += 0.1 * s;
            dq[R_ELBOW] += 0.1 * s;
            dq[WAIST_PITCH] += 0.03 * s;
        },
    },
    Pattern {
        name: "squat",
        duration_s: 6.0,
        offset: |t, dq| {
            let s = 0.35 * 0.5 * (1.0 - (TAU * t / 3.0).cos());
            flex_leg(dq, L_HIP_PITCH, L_KNEE, L_ANKLE_PITCH, s);
            flex_leg(dq, R_HIP_PITCH, R_KNEE, R_ANKLE_PITCH, s);
            dq[L_SHOULDER_PITCH] -= 1.2 * s;
            dq[R_SHOULDER_PITCH] -= 1.2 * s;
        },
    },
    Pattern {
        name: "arm_wave",
        duration_s: 6.0,
        offset: |t, dq| {
            let w = TAU / 2.0;
            dq[L_SHOULDER_ROLL] += 0.8 + 0.4 * (w * t).sin();
            dq[R_SHOULDER_ROLL] -= 0.8 + 0.4 * (w * t + 1.0).sin();
            dq[L_ELBOW] += 0.6 + 0.5 * (2.0 * w * t).sin();
            dq[R_ELBOW] += 0.6 + 0.5 * (2.0 * w * t + 1.0).sin();
            dq[L_SHOULDER_PITCH] -= 0.3 * (w * t).sin();
            dq[R_SHOULDER_PITCH] -= 0.3 * (w * t + 1.0).sin();
        },
    },
    Pattern {
        name: "torso_twist",
        duration_s: 6.0,
        offset: |t, dq| {
            let s = (TAU * t / 3.0).sin();
            dq[WAIST_YAW] += 0.5 * s;
            dq[L_SHOULDER_PITCH] += 0.4 * s;
            dq[R_SHOULDER_PITCH] -= 0.4 * s;
            dq[L_ELBOW] += 0.4;
            dq[R_ELBOW] += 0.4;
        },
    },
    Pattern {
        name: "weight_shift",
        duration_s: 6.0,
        offset: |t, dq| {
            // Hip roll and the opposite ankle roll move the pelvis sideways over the feet.
            let r = 0.08 * (TAU * t / 3.0).sin();
            dq[L_HIP_ROLL] += r;
            dq[R_HIP_ROLL] += r;
            dq[L_ANKLE_ROLL] -= r;
            dq[R_ANKLE_ROLL] -= r;
            dq[L_SHOULDER_ROLL] += 0.2 + r;
            dq[R_SHOULDER_ROLL] += -0.2 + r;
        },
    },
    Pattern {
        name: "step_in_place",
        duration_s: 6.0,
        offset: |t, dq| {
            let phase = TAU * t / 1.5;
            let lift_l = 0.25 * phase.sin().max(0.0).powi(2);
            let lift_r = 0.25 * (-phase.sin()).max(0.0).powi(2);
            flex_leg(dq, L_HIP_PITCH, L_KNEE, L_ANKLE_PITCH, lift_l);
            flex_leg(dq, R_HIP_PITCH, R_KNEE, R_ANKLE_PITCH, lift_r);
            dq[L_SHOULDER_PITCH] += 0.3 * phase.sin();
            dq[R_SHOULDER_PITCH] -= 0.3 * phase.sin();
            dq[L_ELBOW] += 0.3;
            dq[R_ELBOW] += 0.3;
        },
    },
];

/// Envelope that rises from 0 to 1 over `ramp` seconds at the start and falls back at the end,
/// with zero slope at both ends (smoothstep), so clips start and end at rest.
fn envelope(t: f64, duration: f64, ramp: f64) -> f64 {
    let smooth = |x: f64| {
        let x = x.clamp(0.0, 1.0);
        x * x * (3.0 - 2.0 * x)
    };
    smooth(t / ramp).min(smooth((duration - t) / ramp))
}

/// Names of the built-in motions, in generation order.
pub fn builtin_motion_names() -> Vec<&'static str> {
    PATTERNS.iter().map(|p| p.name).collect()
}

/// Generates every built-in motion at [`GENERATED_FPS`]. `stand_pose` is the robot's default
/// joint pose (29 values, G1 order). The output is identical on every call.
pub fn generate_builtin_motions(stand_pose: &[f64; NUM_JOINTS], kin: &mut dyn FootKinematics) -> Vec<MotionClip> {
    PATTERNS.iter().map(|p| generate_one(p, stand_pose, kin)).collect()
}

fn generate_one(p: &Pattern, stand_pose: &[f64; NUM_JOINTS], kin: &mut dyn FootKinematics) -> MotionClip {
    let frames = (p.duration_s * GENERATED_FPS).round() as usize + 1;
    let mut qpos = Vec::with_capacity(frames * NUM_COLUMNS);
    let mut row = [0.0f64; NUM_COLUMNS];
    for i in 0..frames {
        let t = i as f64 / GENERATED_FPS;
        let mut dq = [0.0; NUM_JOINTS];
        (p.offset)(t, &mut dq);
        let e = envelope(t, p.duration_s, 0.75);
        row[..3].copy_from_slice(&[0.0, 0.0, 0.0]);
        row[3..7].copy_from_slice(&[1.0, 0.0, 0.0, 0.0]);
        for j in 0..NUM_JOINTS {
            row[7 + j] = stand_pose[j] + e * dq[j];
        }
        let feet = kin.feet(&row);
        // The root is placed so that the feet's midpoint stays at the world origin and the
        // lowest foot contact touches the floor (kinematics ran with the root at the origin).
        row[0] = -0.5 * (feet.left_xy[0] + feet.right_xy[0]);
        row[1] = -0.5 * (feet.left_xy[1] + feet.right_xy[1]);
        row[2] = -feet.lowest_contact_z;
        qpos.extend_from_slice(&row);
    }
    MotionClip {
        name: p.name.to_string(),
        category: "builtin".to_string(),
        fps: GENERATED_FPS,
        qpos,
        witness: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stand-in kinematics for unit tests of the generator's bookkeeping only (the real one,
    /// through MuJoCo, is tested in arena-sim): feet 0.8 m below the root, at y = ±0.1.
    struct FlatKinematics;
    impl FootKinematics for FlatKinematics {
        fn feet(&mut self, q: &[f64]) -> FeetPlacement {
            FeetPlacement {
                left_xy: [q[0] + 0.01 * q[7 + L_KNEE], q[1] + 0.1],
                right_xy: [q[0], q[1] - 0.1],
                lowest_contact_z: q[2] - 0.8,
            }
        }
    }

    #[test]
    fn deterministic_and_starts_at_rest() {
        let pose = [0.0; NUM_JOINTS];
        let a = generate_builtin_motions(&pose, &mut FlatKinematics);
        let b = generate_builtin_motions(&pose, &mut FlatKinematics);
        assert_eq!(a, b);
        assert_eq!(a.len(), 6);
        for clip in &a {
            let first = clip.frame(0);
            let last = clip.frame(clip.num_frames() - 1);
            for j in 0..NUM_JOINTS {
                assert!(first[7 + j].abs() < 1e-12, "{} starts at the pose", clip.name);
                assert!(last[7 + j].abs() < 1e-12, "{} ends at the pose", clip.name);
            }
            assert!((first[2] - 0.8).abs() < 1e-12, "root height puts the feet on the floor");
        }
    }

    #[test]
    fn envelope_is_smooth_at_ends() {
        assert_eq!(envelope(0.0, 4.0, 0.5), 0.0);
        assert_eq!(envelope(4.0, 4.0, 0.5), 0.0);
        assert_eq!(envelope(2.0, 4.0, 0.5), 1.0);
        // Zero slope at the ends: the envelope grows quadratically from 0.
        assert!(envelope(0.001, 4.0, 0.5) < 2e-5);
        assert!(envelope(0.01, 4.0, 0.5) < 2e-3);
    }
}
