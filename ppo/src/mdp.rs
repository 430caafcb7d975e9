//! The tracking MDP of BeyondMimic (as mjlab reimplements it), term by term: the actor's and
//! the critic's observations, the reward terms and the failure terminations. Pure functions of
//! one env's robot state and the reference frame; docs/ppo-tracker.md §2-5 gives each with its
//! source. The actor's terms reuse the arena's robot-interface functions, so what the policy
//! trains on is what `arena serve` sends.

use crate::config::{RewardConfig, TerminationConfig};
use arena_bench::metrics::mjlab;
use arena_data::NUM_JOINTS;
use arena_sim::handler::{Field, Handler};
use arena_sim::math::{self, Quat, Vec3};
use arena_sim::motion::MotionState;
use arena_sim::robot::{NUM_BODIES_EXT, TORSO_INDEX};
use arena_sim::robot_interface::{self as ri, RobotReadout};

/// The 14 tracked bodies, their names, the end effectors and the anchor: mjlab's, as the
/// arena's scoring defines them.
pub use arena_bench::metrics::mjlab::{ANCHOR, END_EFFECTORS, TERMINATION_TERMS, TRACKED_BODIES, TRACKED_BODY_NAMES};
const _: () = assert!(ANCHOR == TORSO_INDEX, "mjlab's anchor is the arena's torso_link");
/// The bodies whose contacts are not penalised (the end effectors).
pub const CONTACT_ALLOWED: [usize; 4] = END_EFFECTORS;

/// The actor's input terms, in order, with their sizes (the ONNX `observation_names`).
pub const ACTOR_TERMS: [(&str, usize); 8] = [
    ("command", 2 * NUM_JOINTS),
    ("motion_anchor_pos_b", 3),
    ("motion_anchor_ori_b", 6),
    ("base_lin_vel", 3),
    ("base_ang_vel", 3),
    ("joint_pos", NUM_JOINTS),
    ("joint_vel", NUM_JOINTS),
    ("actions", NUM_JOINTS),
];
pub const ACTOR_DIM: usize = 160;
/// The critic's privileged input (BeyondMimic's `critic` group).
pub const CRITIC_DIM: usize = 286;

/// Training noise of the actor's terms (uniform ±n, §2), per term of [`ACTOR_TERMS`].
pub const ACTOR_NOISE: [f64; 8] = [0.0, 0.25, 0.05, 0.5, 0.2, 0.01, 0.5, 0.0];

/// The reward terms, in the order of [`RewardTerms::values`] (mjlab's names).
pub const REWARD_TERMS: [&str; 9] = [
    "motion_global_anchor_pos",
    "motion_global_anchor_ori",
    "motion_body_pos",
    "motion_body_ori",
    "motion_body_lin_vel",
    "motion_body_ang_vel",
    "action_rate_l2",
    "joint_limit",
    "undesired_contacts",
];

/// The mjlab G1 default pose (`KNEES_BENT_KEYFRAME`), G1 order: the zero of `joint_pos` and the
/// offset of the action.
pub const POLICY_DEFAULT_POSE: [f64; NUM_JOINTS] = {
    let mut q = [0.0; NUM_JOINTS];
    q[0] = -0.312; // left hip pitch
    q[3] = 0.669; // left knee
    q[4] = -0.363; // left ankle pitch
    q[6] = -0.312;
    q[9] = 0.669;
    q[10] = -0.363;
    q[15] = 0.2; // left shoulder pitch
    q[16] = 0.2; // left shoulder roll
    q[18] = 0.6; // left elbow
    q[22] = 0.2;
    q[23] = -0.2;
    q[25] = 0.6;
    q
};

/// One env's robot state: the robot-interface readout plus world linear velocities of the bodies
/// (at each body's centre of mass, as the handler reports them) and the net contact forces.
#[derive(Debug, Clone)]
pub struct RobotFrame {
    pub readout: RobotReadout,
    pub body_vel: [f64; 3 * NUM_BODIES_EXT],
    pub contact_force: [f64; 3 * NUM_BODIES_EXT],
}

impl RobotFrame {
    pub fn read(handler: &dyn Handler, env: usize) -> Self {
        let mut f = RobotFrame {
            readout: RobotReadout::read(handler, env, true, false),
            body_vel: [0.0; 3 * NUM_BODIES_EXT],
            contact_force: [0.0; 3 * NUM_BODIES_EXT],
        };
        handler.read_env_into(env, Field::BodyVel, &mut f.body_vel);
        handler.read_env_into(env, Field::BodyContactForce, &mut f.contact_force);
        f
    }

    pub fn pos(&self, b: usize) -> Vec3 {
        self.readout.body_pos(b)
    }
    pub fn rot(&self, b: usize) -> Quat {
        self.readout.body_rot(b)
    }
    fn vel(&self, b: usize) -> Vec3 {
        self.body_vel[3 * b..3 * b + 3].try_into().expect("3")
    }
    fn ang_vel(&self, b: usize) -> Vec3 {
        self.readout.body_ang_vel[3 * b..3 * b + 3].try_into().expect("3")
    }
    /// The anchor's pose, which the next step's body targets are aligned to.
    pub fn anchor_pose(&self) -> (Vec3, Quat) {
        (self.pos(ANCHOR), self.rot(ANCHOR))
    }
}

fn put(out: &mut [f32], values: &[f64]) {
    for (o, v) in out.iter_mut().zip(values) {
        *o = *v as f32;
    }
}

/// The first two columns of a rotation, row by row (the recipe's 6-D orientation).
fn two_columns(q: &Quat) -> [f64; 6] {
    let m = math::quat_to_matrix(q);
    [m[0][0], m[0][1], m[1][0], m[1][1], m[2][0], m[2][1]]
}

/// The actor's 160 inputs (§2, without noise): the command at `reference` (the frame the
/// action must reach), the robot's proprioception relative to `default_pose`, and the previous
/// raw action.
pub fn actor_observation(
    frame: &RobotFrame,
    reference: &MotionState,
    default_pose: &[f64; NUM_JOINTS],
    last_action: &[f32],
    out: &mut [f32],
) {
    let r = &frame.readout;
    let j = NUM_JOINTS;
    ri::motion_command(reference, &mut out[..2 * j]);
    let mut o = 2 * j;
    ri::motion_anchor_pos_b(r, reference, ANCHOR, &mut out[o..o + 3]);
    o += 3;
    ri::motion_anchor_ori_b(r, reference, ANCHOR, &mut out[o..o + 6]);
    o += 6;
    ri::base_lin_vel(r, &mut out[o..o + 3]);
    o += 3;
    put(&mut out[o..o + 3], &r.qvel[3..6]);
    o += 3;
    for k in 0..j {
        out[o + k] = (r.qpos[7 + k] - default_pose[k]) as f32;
    }
    o += j;
    put(&mut out[o..o + j], &r.qvel[6..]);
    o += j;
    out[o..o + j].copy_from_slice(last_action);
    debug_assert_eq!(o + j, ACTOR_DIM);
}

/// How many uniform draws [`add_actor_noise`] takes per row when its scale is not 0.
pub const ACTOR_NOISE_DRAWS: usize = {
    let (mut k, mut draws) = (0, 0);
    while k < ACTOR_TERMS.len() {
        if ACTOR_NOISE[k] > 0.0 {
            draws += ACTOR_TERMS[k].1;
        }
        k += 1;
    }
    draws
};

/// Adds the training noise (uniform ±`scale`·n per element, §2) to an actor row.
pub fn add_actor_noise(row: &mut [f32], scale: f64, mut uniform: impl FnMut() -> f64) {
    if scale == 0.0 {
        return;
    }
    let mut o = 0;
    for ((_, size), n) in ACTOR_TERMS.iter().zip(ACTOR_NOISE) {
        if n > 0.0 {
            for v in &mut row[o..o + size] {
                *v += (scale * n * uniform()) as f32;
            }
        }
        o += size;
    }
}

/// The critic's 286 inputs (§3): command, anchor terms, the tracked bodies' positions and
/// orientations in the robot anchor's frame, pelvis velocities, joints and the last action.
pub fn critic_observation(
    frame: &RobotFrame,
    reference: &MotionState,
    default_pose: &[f64; NUM_JOINTS],
    last_action: &[f32],
    out: &mut [f32],
) {
    let mut actor = [0.0f32; ACTOR_DIM];
    actor_observation(frame, reference, default_pose, last_action, &mut actor);
    let head = 2 * NUM_JOINTS + 9;
    out[..head].copy_from_slice(&actor[..head]);
    let (p_ra, q_ra) = frame.anchor_pose();
    let mut o = head;
    for &b in &TRACKED_BODIES {
        put(
            &mut out[o..o + 3],
            &math::rotate_inv(&q_ra, &math::sub(&frame.pos(b), &p_ra)),
        );
        o += 3;
    }
    for &b in &TRACKED_BODIES {
        let relative = math::quat_mul(&math::quat_conj(&q_ra), &frame.rot(b));
        put(&mut out[o..o + 6], &two_columns(&relative));
        o += 6;
    }
    out[o..].copy_from_slice(&actor[head..]);
    debug_assert_eq!(o + ACTOR_DIM - head, CRITIC_DIM);
}

/// θ(q1, q2) = ‖axis-angle(q1 ⊗ q2*)‖ in [0, π].
pub fn quat_error(q1: &Quat, q2: &Quat) -> f64 {
    let d = math::quat_mul(q1, &math::quat_conj(q2));
    let v = (d[1] * d[1] + d[2] * d[2] + d[3] * d[3]).sqrt();
    2.0 * v.atan2(d[0].abs())
}

/// The yaw of a quaternion as a quaternion about z (Isaac Lab's `yaw_quat`).
pub fn yaw_quat(q: &Quat) -> Quat {
    let [w, x, y, z] = *q;
    let yaw = (2.0 * (w * z + x * y)).atan2(1.0 - 2.0 * (y * y + z * z));
    math::quat_from_yaw(yaw)
}

/// The values of the reward terms of one step, before weights and dt.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RewardTerms {
    pub values: [f64; 9],
}

impl RewardTerms {
    /// Σ weight·value·dt: the step's reward.
    pub fn total(&self, w: &RewardConfig) -> f64 {
        let weights = weights(w);
        self.values.iter().zip(weights).map(|(v, w)| v * w).sum::<f64>() * arena_sim::CONTROL_DT
    }
}

/// The weights in the order of [`REWARD_TERMS`].
pub fn weights(w: &RewardConfig) -> [f64; 9] {
    [
        w.anchor_pos,
        w.anchor_ori,
        w.body_pos,
        w.body_ori,
        w.body_lin_vel,
        w.body_ang_vel,
        w.action_rate,
        w.joint_limit,
        w.undesired_contacts,
    ]
}

/// Soft joint limits: the range's midpoint ± 0.45·range (`soft_joint_pos_limit_factor` 0.9).
pub fn soft_limits(ranges: &[(f64, f64); NUM_JOINTS]) -> [(f64, f64); NUM_JOINTS] {
    ranges.map(|(lo, hi)| {
        let (mid, half) = (0.5 * (lo + hi), 0.5 * (hi - lo) * 0.9);
        (mid - half, mid + half)
    })
}

/// The reward terms (§4.2) of the state after an action, against the reference frame that
/// action had to reach. `aligned_from` is the robot anchor's pose when the action was chosen:
/// the body targets are the reference bodies moved to it in x, y and yaw (§4.1).
pub fn reward_terms(
    frame: &RobotFrame,
    reference: &MotionState,
    aligned_from: (Vec3, Quat),
    action: &[f32],
    last_action: &[f32],
    soft_limits: &[(f64, f64); NUM_JOINTS],
    c: &RewardConfig,
) -> RewardTerms {
    let kernel = |e: f64, std: f64| (-e / (std * std)).exp();
    let (p_ma, q_ma) = (reference.body_pos[ANCHOR], reference.body_rot[ANCHOR]);
    let (p_ra, q_ra) = frame.anchor_pose();
    let anchor_pos = kernel(norm2(&math::sub(&p_ma, &p_ra)), c.anchor_pos_std);
    let anchor_ori = kernel(quat_error(&q_ma, &q_ra).powi(2), c.anchor_ori_std);
    let (p_align, q_align) = aligned_from;
    let delta_p = [p_align[0], p_align[1], p_ma[2]];
    let delta_q = yaw_quat(&math::quat_mul(&q_align, &math::quat_conj(&q_ma)));
    let n = TRACKED_BODIES.len() as f64;
    let (mut pos_e, mut ori_e, mut lin_e, mut ang_e) = (0.0, 0.0, 0.0, 0.0);
    for &b in &TRACKED_BODIES {
        let target = math::add(
            &delta_p,
            &math::rotate(&delta_q, &math::sub(&reference.body_pos[b], &p_ma)),
        );
        pos_e += norm2(&math::sub(&target, &frame.pos(b)));
        let target_rot = math::quat_mul(&delta_q, &reference.body_rot[b]);
        ori_e += quat_error(&target_rot, &frame.rot(b)).powi(2);
        lin_e += norm2(&math::sub(&reference.body_vel[b], &frame.vel(b)));
        ang_e += norm2(&math::sub(&reference.body_ang_vel[b], &frame.ang_vel(b)));
    }
    let action_rate: f64 = action
        .iter()
        .zip(last_action)
        .map(|(a, p)| ((*a - *p) as f64).powi(2))
        .sum();
    let q = &frame.readout.qpos[7..];
    let joint_limit: f64 = (0..NUM_JOINTS)
        .map(|j| (soft_limits[j].0 - q[j]).max(0.0) + (q[j] - soft_limits[j].1).max(0.0))
        .sum();
    let contacts = (0..NUM_BODIES_EXT - 1)
        .filter(|b| !CONTACT_ALLOWED.contains(b))
        .filter(|&b| norm2(&frame.contact_force[3 * b..3 * b + 3].try_into().expect("3")) > 1.0)
        .count() as f64;
    RewardTerms {
        values: [
            anchor_pos,
            anchor_ori,
            kernel(pos_e / n, c.body_pos_std),
            kernel(ori_e / n, c.body_ori_std),
            kernel(lin_e / n, c.body_lin_vel_std),
            kernel(ang_e / n, c.body_ang_vel_std),
            action_rate,
            joint_limit,
            contacts,
        ],
    }
}

fn norm2(v: &Vec3) -> f64 {
    v[0] * v[0] + v[1] * v[1] + v[2] * v[2]
}

/// Which failure terminations fired (§5), in the order of [`TERMINATION_TERMS`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Terminations {
    pub flags: [bool; 3],
}

impl Terminations {
    pub fn any(&self) -> bool {
        self.flags.iter().any(|f| *f)
    }
}

/// The failure terminations of the state after an action, against the same reference frame:
/// the definition the arena scores by ([`arena_bench::metrics::mjlab::terminations`]), with
/// the training config's thresholds.
pub fn terminations(frame: &RobotFrame, reference: &MotionState, t: &TerminationConfig) -> Terminations {
    let thresholds = mjlab::Thresholds {
        anchor_height: t.anchor_height,
        anchor_ori: t.anchor_ori,
        end_effector_height: t.end_effector_height,
    };
    let (p_ra, q_ra) = frame.anchor_pose();
    Terminations {
        flags: mjlab::terminations(
            &thresholds,
            (&reference.body_pos[ANCHOR], &reference.body_rot[ANCHOR]),
            (&p_ra, &q_ra),
            &END_EFFECTORS.map(|b| reference.body_pos[b][2]),
            &END_EFFECTORS.map(|b| frame.pos(b)[2]),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arena_sim::robot::BODY_NAMES;

    #[test]
    fn tracked_bodies_are_named_as_mjlab_names_them() {
        for (i, name) in TRACKED_BODIES.iter().zip(TRACKED_BODY_NAMES) {
            assert_eq!(BODY_NAMES[*i], name);
        }
        assert_eq!(ACTOR_TERMS.iter().map(|t| t.1).sum::<usize>(), ACTOR_DIM);
        assert_eq!(BODY_NAMES[ANCHOR], "torso_link");
        for (i, name) in END_EFFECTORS.iter().zip([
            "left_ankle_roll_link",
            "right_ankle_roll_link",
            "left_wrist_yaw_link",
            "right_wrist_yaw_link",
        ]) {
            assert_eq!(BODY_NAMES[*i], name);
        }
    }

    #[test]
    fn quaternion_error_and_yaw() {
        let a = math::quat_from_yaw(0.3);
        let b = math::quat_from_yaw(-0.2);
        assert!((quat_error(&a, &b) - 0.5).abs() < 1e-12);
        // q and −q are the same rotation.
        let neg = [-a[0], -a[1], -a[2], -a[3]];
        assert!(quat_error(&a, &neg) < 1e-7);
        let tilt = math::quat_from_axis_angle(&[1.0, 0.0, 0.0], 0.4);
        let y = yaw_quat(&math::quat_mul(&a, &tilt));
        assert!((math::heading(&y) - 0.3).abs() < 1e-12);
    }
}
