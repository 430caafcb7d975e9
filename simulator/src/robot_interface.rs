//! The G1's own interface as observation terms: the two IMUs and the motors as the robot
//! reports them (unitree_sdk2's LowState), the pelvis velocity a state estimator gives, and the
//! tracking command in the BeyondMimic / mjlab convention (reference joint positions and
//! velocities, the reference anchor body relative to the robot's). Each term is a pure function
//! written into an f32 row; docs/protocol.md §5 defines them for clients.

use crate::handler::{Field, Handler, NQ, NV};
use crate::math::{self, Quat, Vec3};
use crate::motion::MotionState;
use crate::robot::{BODY_NAMES, NUM_BODIES_EXT, TORSO_INDEX};
use arena_data::NUM_JOINTS;

pub use arena_g1::{
    BASE_LIN_VEL_DIM, IMU_DIM, MOTION_ANCHOR_ORI_DIM, MOTION_ANCHOR_POS_DIM, MOTION_ANCHOR_POSE_DIM,
    MOTION_COMMAND_DIM, MOTORS_DIM,
};
/// The anchor body of the tracking command unless a benchmark names another (BeyondMimic's).
pub const DEFAULT_ANCHOR_BODY: &str = "torso_link";

/// Index of a body in [`BODY_NAMES`] order (the virtual head excluded), for the anchor.
pub fn body_index(name: &str) -> Option<usize> {
    BODY_NAMES.iter().position(|b| *b == name)
}

/// The robot's state that the robot groups read, from one env of a handler.
#[derive(Debug, Clone)]
pub struct RobotReadout {
    pub qpos: [f64; NQ],
    pub qvel: [f64; NV],
    pub torque: [f64; NUM_JOINTS],
    pub body_pos: [f64; 3 * NUM_BODIES_EXT],
    pub body_rot: [f64; 4 * NUM_BODIES_EXT],
    /// World-frame angular velocity of each body.
    pub body_ang_vel: [f64; 3 * NUM_BODIES_EXT],
    /// Pelvis xyz then torso xyz (NaN when the model has no IMU sensors).
    pub accelerometer: [f64; 6],
}

impl Default for RobotReadout {
    /// Zeros, and NaN for the accelerometers.
    fn default() -> Self {
        RobotReadout {
            qpos: [0.0; NQ],
            qvel: [0.0; NV],
            torque: [0.0; NUM_JOINTS],
            body_pos: [0.0; 3 * NUM_BODIES_EXT],
            body_rot: [0.0; 4 * NUM_BODIES_EXT],
            body_ang_vel: [0.0; 3 * NUM_BODIES_EXT],
            accelerometer: [f64::NAN; 6],
        }
    }
}

/// Which parts of a [`RobotReadout`] a set of robot groups uses, so that a row reads those
/// alone ([`RobotReadout::read_parts`]): the tracking command's groups need the anchor's pose,
/// not the joints, torques and 31 bodies.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadoutParts {
    /// `qpos` and `qvel`.
    pub joints: bool,
    pub torque: bool,
    /// Bit b: body b's position and orientation.
    pub body_poses: u32,
    /// Bit b: body b's angular velocity.
    pub body_ang_vels: u32,
    pub accelerometers: bool,
}

const ALL_BODIES: u32 = (1 << NUM_BODIES_EXT) - 1;

impl ReadoutParts {
    /// Everything ([`RobotReadout::read`] with bodies and accelerometers).
    pub const ALL: ReadoutParts = ReadoutParts {
        joints: true,
        torque: true,
        body_poses: ALL_BODIES,
        body_ang_vels: ALL_BODIES,
        accelerometers: true,
    };

    /// What the term of `group` reads, with the tracking command relative to body `anchor`
    /// (the functions below); nothing for the groups that come from elsewhere.
    pub fn of_group(group: arena_g1::Group, anchor: usize) -> Self {
        use arena_g1::Group;
        let body = |b: usize| 1u32 << b;
        let none = ReadoutParts::default();
        match group {
            Group::Imu => ReadoutParts {
                joints: true,
                accelerometers: true,
                ..none
            },
            Group::ImuTorso => ReadoutParts {
                body_poses: body(TORSO_INDEX),
                body_ang_vels: body(TORSO_INDEX),
                accelerometers: true,
                ..none
            },
            Group::Motors => ReadoutParts {
                joints: true,
                torque: true,
                ..none
            },
            Group::BaseLinVel => ReadoutParts { joints: true, ..none },
            Group::MotionAnchorPosB | Group::MotionAnchorOriB => ReadoutParts {
                body_poses: body(anchor),
                ..none
            },
            Group::MotionCommand
            | Group::MotionAnchorPoseW
            | Group::State
            | Group::PrivilegedState
            | Group::LastAction
            | Group::HistoryActor => none,
        }
    }

    /// What either reads.
    pub fn union(self, other: Self) -> Self {
        ReadoutParts {
            joints: self.joints || other.joints,
            torque: self.torque || other.torque,
            body_poses: self.body_poses | other.body_poses,
            body_ang_vels: self.body_ang_vels | other.body_ang_vels,
            accelerometers: self.accelerometers || other.accelerometers,
        }
    }
}

/// Reads body field `field` (`width` values a body) of the bodies in `mask` into `out` (all 31
/// bodies' places): the whole row at once when every body is wanted.
fn read_bodies(handler: &dyn Handler, env: usize, field: Field, mask: u32, width: usize, out: &mut [f64]) {
    if mask == ALL_BODIES {
        handler.read_env_into(env, field, out);
        return;
    }
    let mut left = mask;
    while left != 0 {
        let b = left.trailing_zeros() as usize;
        left &= left - 1;
        handler.read_env_body_into(env, field, b, &mut out[width * b..width * (b + 1)]);
    }
}

impl RobotReadout {
    pub fn read(handler: &dyn Handler, env: usize, with_bodies: bool, with_imu: bool) -> Self {
        // What is not read stays as the default leaves it: zero bodies, NaN accelerometers.
        let bodies = if with_bodies { ALL_BODIES } else { 0 };
        let parts = ReadoutParts {
            joints: true,
            torque: true,
            body_poses: bodies,
            body_ang_vels: bodies,
            accelerometers: with_imu,
        };
        let mut r = RobotReadout::default();
        r.read_parts(handler, env, &parts);
        r
    }

    /// Reads the `parts` of env `env` into this readout, leaving every other value as it was:
    /// what a row's groups read, each group's term using only its [`ReadoutParts::of_group`]
    /// (tested against whole readouts for every group and anchor).
    pub fn read_parts(&mut self, handler: &dyn Handler, env: usize, parts: &ReadoutParts) {
        if parts.joints {
            handler.read_env_into(env, Field::Qpos, &mut self.qpos);
            handler.read_env_into(env, Field::Qvel, &mut self.qvel);
        }
        if parts.torque {
            handler.read_env_into(env, Field::DofTorque, &mut self.torque);
        }
        read_bodies(handler, env, Field::BodyPos, parts.body_poses, 3, &mut self.body_pos);
        read_bodies(handler, env, Field::BodyRot, parts.body_poses, 4, &mut self.body_rot);
        read_bodies(
            handler,
            env,
            Field::BodyAngVel,
            parts.body_ang_vels,
            3,
            &mut self.body_ang_vel,
        );
        if parts.accelerometers {
            handler.read_env_into(env, Field::ImuAccelerometer, &mut self.accelerometer);
        }
    }

    pub fn pelvis_rot(&self) -> Quat {
        [self.qpos[3], self.qpos[4], self.qpos[5], self.qpos[6]]
    }

    pub fn body_rot(&self, b: usize) -> Quat {
        self.body_rot[4 * b..4 * b + 4].try_into().expect("4")
    }

    pub fn body_pos(&self, b: usize) -> Vec3 {
        self.body_pos[3 * b..3 * b + 3].try_into().expect("3")
    }
}

fn write(out: &mut [f32], values: &[f64]) {
    for (o, v) in out.iter_mut().zip(values) {
        *o = *v as f32;
    }
}

/// `imu` (pelvis): orientation wxyz (the pelvis's: the IMU site is not rotated), the free
/// joint's angular velocity (MuJoCo keeps it in the pelvis frame), the pelvis accelerometer.
pub fn imu_pelvis(r: &RobotReadout, out: &mut [f32]) {
    write(&mut out[..4], &r.pelvis_rot());
    write(&mut out[4..7], &r.qvel[3..6]);
    write(&mut out[7..10], &r.accelerometer[..3]);
}

/// `imu_torso`: torso_link orientation wxyz, its angular velocity in its own frame, the torso
/// accelerometer. Needs a readout with bodies.
pub fn imu_torso(r: &RobotReadout, out: &mut [f32]) {
    let rot = r.body_rot(TORSO_INDEX);
    let w_world: Vec3 = r.body_ang_vel[3 * TORSO_INDEX..3 * TORSO_INDEX + 3]
        .try_into()
        .expect("3");
    write(&mut out[..4], &rot);
    write(&mut out[4..7], &math::rotate_inv(&rot, &w_world));
    write(&mut out[7..10], &r.accelerometer[3..]);
}

/// `motors`: joint positions (rad, absolute), velocities (rad/s), the torque of the last
/// physics substep (N·m, after the effort clip).
pub fn motors(r: &RobotReadout, out: &mut [f32]) {
    write(&mut out[..NUM_JOINTS], &r.qpos[7..]);
    write(&mut out[NUM_JOINTS..2 * NUM_JOINTS], &r.qvel[6..]);
    write(&mut out[2 * NUM_JOINTS..], &r.torque);
}

/// `base_lin_vel`: the pelvis origin's linear velocity (MuJoCo's free joint keeps it in the
/// world frame) rotated into the pelvis frame.
pub fn base_lin_vel(r: &RobotReadout, out: &mut [f32]) {
    let v: Vec3 = r.qvel[..3].try_into().expect("3");
    write(out, &math::rotate_inv(&r.pelvis_rot(), &v));
}

/// `motion_command`: the reference's joint positions (absolute) and velocities, the velocities
/// as mjlab's and BeyondMimic's motion files give them (central differences,
/// [`crate::motion::Motion::joint_vel_central`]).
pub fn motion_command(reference: &MotionState, out: &mut [f32]) {
    write(&mut out[..NUM_JOINTS], &reference.qpos[7..]);
    write(&mut out[NUM_JOINTS..], &reference.command_joint_vel);
}

/// `motion_anchor_pos_b`: R_robotᵀ·(p_reference − p_robot) for the anchor body.
pub fn motion_anchor_pos_b(r: &RobotReadout, reference: &MotionState, anchor: usize, out: &mut [f32]) {
    let d = math::sub(&reference.body_pos[anchor], &r.body_pos(anchor));
    write(out, &math::rotate_inv(&r.body_rot(anchor), &d));
}

/// `motion_anchor_ori_b`: the first two columns of R_robotᵀ·R_reference for the anchor body,
/// row by row (R00, R01, R10, R11, R20, R21).
pub fn motion_anchor_ori_b(r: &RobotReadout, reference: &MotionState, anchor: usize, out: &mut [f32]) {
    let relative = math::quat_mul(&math::quat_conj(&r.body_rot(anchor)), &reference.body_rot[anchor]);
    let m = math::quat_to_matrix(&relative);
    write(out, &[m[0][0], m[0][1], m[1][0], m[1][1], m[2][0], m[2][1]]);
}

/// `motion_anchor_pose_w`: the reference anchor's world position and quaternion wxyz.
pub fn motion_anchor_pose_w(reference: &MotionState, anchor: usize, out: &mut [f32]) {
    write(&mut out[..3], &reference.body_pos[anchor]);
    write(&mut out[3..], &reference.body_rot[anchor]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anchor_terms_follow_the_mjlab_definitions() {
        let mut r = RobotReadout {
            qpos: [0.0; NQ],
            qvel: [0.0; NV],
            torque: [0.0; NUM_JOINTS],
            body_pos: [0.0; 3 * NUM_BODIES_EXT],
            body_rot: [0.0; 4 * NUM_BODIES_EXT],
            body_ang_vel: [0.0; 3 * NUM_BODIES_EXT],
            accelerometer: [0.0; 6],
        };
        let a = TORSO_INDEX;
        // Robot torso yawed +90° at (1, 2, 1); reference torso unrotated at (1, 3, 1).
        let yaw = math::quat_from_yaw(std::f64::consts::FRAC_PI_2);
        r.body_rot[4 * a..4 * a + 4].copy_from_slice(&yaw);
        r.body_pos[3 * a..3 * a + 3].copy_from_slice(&[1.0, 2.0, 1.0]);
        let mut reference = MotionState::default();
        reference.body_pos[a] = [1.0, 3.0, 1.0];
        let mut pos = [0.0f32; 3];
        motion_anchor_pos_b(&r, &reference, a, &mut pos);
        // One metre along world +y is along the robot's +x once it faces +y.
        assert!(
            (pos[0] - 1.0).abs() < 1e-6 && pos[1].abs() < 1e-6 && pos[2].abs() < 1e-6,
            "{pos:?}"
        );
        let mut ori = [0.0f32; 6];
        motion_anchor_ori_b(&r, &reference, a, &mut ori);
        // R_robotᵀ = yaw(−90°): columns (0,−1,0) and (1,0,0), row by row.
        let expect = [0.0, 1.0, -1.0, 0.0, 0.0, 0.0];
        for (o, e) in ori.iter().zip(expect) {
            assert!((o - e).abs() < 1e-6, "{ori:?}");
        }
        assert_eq!(body_index("torso_link"), Some(TORSO_INDEX));
        assert_eq!(body_index("head_link"), None);
    }
}
