//! mjlab's tracking evaluation, exactly (mjlab 1.6.0: `tasks/tracking/mdp/metrics.py`,
//! `terminations.py`, `commands.py` and the G1 tracking config; the facts with their sources are
//! in docs/reference/mjlab-tracking-metrics.md). One definition serves scoring (the metrics
//! below) and training (`arena-ppo` calls [`terminations`]).
//!
//! How a recorded episode maps onto mjlab's step: row 0 is the reset pose (no step taken, so
//! nothing is measured); row k ≥ 1 is the state after step k, paired with the reference frame
//! that step had to reach (the arena's rows already pair them so, docs/ppo-tracker.md §1). The
//! re-anchored reference of row k is anchored on the robot's anchor at row k − 1, as mjlab
//! recomputes `body_pos_relative_w` at the end of each step for the next one. A metric is the
//! mean of its per-step values over steps 1..=the first terminating step (all steps if none),
//! as mjlab's `evaluate.py` stops accumulating at an env's first done step.
//!
//! One difference from mjlab's environment is left on purpose: mjlab reads body poses for its
//! terminations and metrics one physics substep stale (its `step` runs `forward()` only after
//! them, a documented approximation); the arena measures the state after the step.

use super::{Frame, Metric, MetricConfig, MetricError, MetricInfo, NUM_BODIES, NUM_JOINTS};

pub type Vec3 = [f64; 3];
/// A quaternion (w, x, y, z), Hamilton product.
pub type Quat = [f64; 4];

/// The 14 tracked bodies of mjlab's G1 tracking task, as indices of the arena's body order.
pub const TRACKED_BODIES: [usize; 14] = [0, 2, 4, 6, 8, 10, 12, 15, 17, 19, 22, 24, 26, 29];
/// Their names (mjlab's `body_names`), in the same order.
pub const TRACKED_BODY_NAMES: [&str; 14] = [
    "pelvis",
    "left_hip_roll_link",
    "left_knee_link",
    "left_ankle_roll_link",
    "right_hip_roll_link",
    "right_knee_link",
    "right_ankle_roll_link",
    "torso_link",
    "left_shoulder_roll_link",
    "left_elbow_link",
    "left_wrist_yaw_link",
    "right_shoulder_roll_link",
    "right_elbow_link",
    "right_wrist_yaw_link",
];
/// The four end effectors (ankle rolls, wrist yaws): the `ee_body_pos` termination's bodies and
/// those of `ee_pos_error` / `ee_ori_error`.
pub const END_EFFECTORS: [usize; 4] = [6, 12, 22, 29];
/// The anchor body (`torso_link`).
pub const ANCHOR: usize = 15;
/// The failure terminations, in the order of [`terminations`]' flags (mjlab's term names).
pub const TERMINATION_TERMS: [&str; 3] = ["anchor_pos", "anchor_ori", "ee_body_pos"];
/// Every metric of this module: each needs the frames' body orientations and joint velocities.
pub const MJLAB_METRICS: [&str; 7] = [
    "mjlab_success",
    "mjlab_failure_time_s",
    "mpkpe",
    "r_mpkpe",
    "joint_vel_error",
    "ee_pos_error",
    "ee_ori_error",
];

/// Whether metric `name` needs [`Frame::sim_body_quat`] and the other fields only mjlab's
/// metrics read, so callers compute them only when asked to.
pub fn needs_orientations(name: &str) -> bool {
    MJLAB_METRICS.contains(&name)
}

/// The thresholds of the G1 tracking config's terminations.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Thresholds {
    /// `anchor_pos` (`bad_anchor_pos_z_only`): |z_ref − z_robot| of the anchor (m).
    pub anchor_height: f64,
    /// `anchor_ori` (`bad_anchor_ori`): |g_z,ref − g_z,robot| of the anchor's projected gravity.
    pub anchor_ori: f64,
    /// `ee_body_pos` (`bad_motion_body_pos_z_only`): |z_ref − z_robot| of any end effector (m).
    pub end_effector_height: f64,
}

impl Thresholds {
    /// mjlab 1.6.0's G1 values.
    pub const MJLAB_G1: Thresholds = Thresholds {
        anchor_height: 0.25,
        anchor_ori: 0.8,
        end_effector_height: 0.25,
    };
}

/// The z component of gravity (0, 0, −1) seen in the frame of orientation `q`: −R₃₃.
pub fn projected_gravity_z(q: &Quat) -> f64 {
    let [_, x, y, _] = *q;
    2.0 * (x * x + y * y) - 1.0
}

/// Which failure terminations hold, in the order of [`TERMINATION_TERMS`]: the anchor's height,
/// the anchor's tilt, any end effector's height, each against the reference of the same step.
/// (The re-anchored reference keeps each body's own height, so no re-anchoring is needed.)
pub fn terminations(
    t: &Thresholds,
    ref_anchor: (&Vec3, &Quat),
    robot_anchor: (&Vec3, &Quat),
    ref_ee_z: &[f64; 4],
    robot_ee_z: &[f64; 4],
) -> [bool; 3] {
    let anchor_pos = (ref_anchor.0[2] - robot_anchor.0[2]).abs() > t.anchor_height;
    let anchor_ori = (projected_gravity_z(ref_anchor.1) - projected_gravity_z(robot_anchor.1)).abs() > t.anchor_ori;
    let ee = ref_ee_z
        .iter()
        .zip(robot_ee_z)
        .any(|(r, s)| (r - s).abs() > t.end_effector_height);
    [anchor_pos, anchor_ori, ee]
}

pub fn quat_mul(a: &Quat, b: &Quat) -> Quat {
    [
        a[0] * b[0] - a[1] * b[1] - a[2] * b[2] - a[3] * b[3],
        a[0] * b[1] + a[1] * b[0] + a[2] * b[3] - a[3] * b[2],
        a[0] * b[2] - a[1] * b[3] + a[2] * b[0] + a[3] * b[1],
        a[0] * b[3] + a[1] * b[2] - a[2] * b[1] + a[3] * b[0],
    ]
}

fn conjugate(q: &Quat) -> Quat {
    [q[0], -q[1], -q[2], -q[3]]
}

/// Rotates `v` by the unit quaternion `q`.
pub fn rotate(q: &Quat, v: &Vec3) -> Vec3 {
    let p = quat_mul(&quat_mul(q, &[0.0, v[0], v[1], v[2]]), &conjugate(q));
    [p[1], p[2], p[3]]
}

/// The rotation about world z that `q` contains (mjlab's `yaw_quat`).
pub fn yaw_quat(q: &Quat) -> Quat {
    let [w, x, y, z] = *q;
    let yaw = (2.0 * (w * z + x * y)).atan2(1.0 - 2.0 * (y * y + z * z));
    [(yaw / 2.0).cos(), 0.0, 0.0, (yaw / 2.0).sin()]
}

/// The geodesic angle between two unit quaternions (mjlab's `quat_error_magnitude`), in [0, π].
pub fn quat_angle(a: &Quat, b: &Quat) -> f64 {
    let d = quat_mul(a, &conjugate(b));
    let v = (d[1] * d[1] + d[2] * d[2] + d[3] * d[3]).sqrt();
    2.0 * v.atan2(d[0].abs())
}

/// The reference re-anchored on a robot anchor pose (mjlab's `update_relative_body_poses`): the
/// reference's yaw turned to the robot anchor's, its anchor moved horizontally onto the robot
/// anchor, heights kept.
#[derive(Debug, Clone, Copy)]
pub struct Reanchoring {
    delta_pos: Vec3,
    delta_rot: Quat,
    ref_anchor_pos: Vec3,
}

impl Reanchoring {
    pub fn new(ref_anchor: (&Vec3, &Quat), robot_anchor: (&Vec3, &Quat)) -> Self {
        let (p_a, q_a) = ref_anchor;
        let (p_ra, q_ra) = robot_anchor;
        Reanchoring {
            delta_pos: [p_ra[0], p_ra[1], p_a[2]],
            delta_rot: yaw_quat(&quat_mul(q_ra, &conjugate(q_a))),
            ref_anchor_pos: *p_a,
        }
    }

    pub fn position(&self, p: &Vec3) -> Vec3 {
        let d = [
            p[0] - self.ref_anchor_pos[0],
            p[1] - self.ref_anchor_pos[1],
            p[2] - self.ref_anchor_pos[2],
        ];
        let r = rotate(&self.delta_rot, &d);
        [
            self.delta_pos[0] + r[0],
            self.delta_pos[1] + r[1],
            self.delta_pos[2] + r[2],
        ]
    }

    pub fn orientation(&self, q: &Quat) -> Quat {
        quat_mul(&self.delta_rot, q)
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum MjlabKind {
    Success,
    FailureTime,
    Mpkpe,
    RMpkpe,
    JointVelError,
    EePosError,
    EeOriError,
}

/// One of mjlab's metrics over an episode: the per-step values up to the first termination.
pub(super) struct MjlabMetric {
    info: &'static MetricInfo,
    kind: MjlabKind,
    thresholds: Thresholds,
    /// The robot's anchor pose at the previous row (what this row's reference is anchored on).
    previous_anchor: Option<(Vec3, Quat)>,
    rows: usize,
    steps: usize,
    sum: f64,
    terminated_at: Option<f64>,
    last_time: f64,
}

impl MjlabMetric {
    pub(super) fn new(info: &'static MetricInfo, _config: MetricConfig, kind: MjlabKind) -> Self {
        MjlabMetric {
            info,
            kind,
            thresholds: Thresholds::MJLAB_G1,
            previous_anchor: None,
            rows: 0,
            steps: 0,
            sum: 0.0,
            terminated_at: None,
            last_time: 0.0,
        }
    }

    /// Whether a termination has held at some step so far.
    pub(super) fn terminated(&self) -> bool {
        self.terminated_at.is_some()
    }

    fn check(&self, f: &Frame<'_>) -> Result<(), MetricError> {
        super::check_frame(self.info.name, f)?;
        let sizes = [
            ("simulated body orientations", f.sim_body_quat.len(), 4 * NUM_BODIES),
            ("reference body orientations", f.ref_body_quat.len(), 4 * NUM_BODIES),
            ("simulated joint velocities", f.sim_joint_vel.len(), NUM_JOINTS),
            ("reference joint velocities", f.ref_joint_vel.len(), NUM_JOINTS),
        ];
        super::check_sizes(self.info.name, f, &sizes)
    }

    fn step_value(&self, f: &Frame<'_>, anchored: &Reanchoring) -> f64 {
        let distance =
            |a: &Vec3, b: &[f64]| ((a[0] - b[0]).powi(2) + (a[1] - b[1]).powi(2) + (a[2] - b[2]).powi(2)).sqrt();
        match self.kind {
            MjlabKind::Success | MjlabKind::FailureTime => 0.0,
            MjlabKind::Mpkpe => mean(
                TRACKED_BODIES
                    .iter()
                    .map(|&b| distance(&pos(f.ref_bodies, b), &f.sim_bodies[3 * b..])),
            ),
            MjlabKind::RMpkpe => mean(
                TRACKED_BODIES
                    .iter()
                    .map(|&b| distance(&anchored.position(&pos(f.ref_bodies, b)), &f.sim_bodies[3 * b..])),
            ),
            MjlabKind::JointVelError => {
                let sq: f64 = f
                    .ref_joint_vel
                    .iter()
                    .zip(f.sim_joint_vel)
                    .map(|(r, s)| (r - s) * (r - s))
                    .sum();
                (sq / NUM_JOINTS as f64).sqrt()
            }
            MjlabKind::EePosError => mean(
                END_EFFECTORS
                    .iter()
                    .map(|&b| distance(&anchored.position(&pos(f.ref_bodies, b)), &f.sim_bodies[3 * b..])),
            ),
            MjlabKind::EeOriError => mean(END_EFFECTORS.iter().map(|&b| {
                quat_angle(
                    &anchored.orientation(&quat(f.ref_body_quat, b)),
                    &quat(f.sim_body_quat, b),
                )
            })),
        }
    }
}

fn pos(bodies: &[f64], b: usize) -> Vec3 {
    [bodies[3 * b], bodies[3 * b + 1], bodies[3 * b + 2]]
}

fn quat(quats: &[f64], b: usize) -> Quat {
    [quats[4 * b], quats[4 * b + 1], quats[4 * b + 2], quats[4 * b + 3]]
}

fn mean(values: impl ExactSizeIterator<Item = f64>) -> f64 {
    let n = values.len() as f64;
    values.sum::<f64>() / n
}

impl Metric for MjlabMetric {
    fn info(&self) -> &'static MetricInfo {
        self.info
    }

    fn reset(&mut self) {
        self.previous_anchor = None;
        self.rows = 0;
        self.steps = 0;
        self.sum = 0.0;
        self.terminated_at = None;
        self.last_time = 0.0;
    }

    fn update(&mut self, f: &Frame<'_>) -> Result<(), MetricError> {
        self.check(f)?;
        self.rows += 1;
        if self.terminated_at.is_some() {
            return Ok(());
        }
        self.last_time = f.time;
        let robot_anchor = (pos(f.sim_bodies, ANCHOR), quat(f.sim_body_quat, ANCHOR));
        let Some(previous) = self.previous_anchor.replace(robot_anchor) else {
            return Ok(()); // the reset row: no step taken yet
        };
        let ref_anchor = (pos(f.ref_bodies, ANCHOR), quat(f.ref_body_quat, ANCHOR));
        let anchored = Reanchoring::new((&ref_anchor.0, &ref_anchor.1), (&previous.0, &previous.1));
        self.sum += self.step_value(f, &anchored);
        self.steps += 1;
        let ee_z = |bodies: &[f64]| END_EFFECTORS.map(|b| bodies[3 * b + 2]);
        let flags = terminations(
            &self.thresholds,
            (&ref_anchor.0, &ref_anchor.1),
            (&robot_anchor.0, &robot_anchor.1),
            &ee_z(f.ref_bodies),
            &ee_z(f.sim_bodies),
        );
        if flags.iter().any(|t| *t) {
            self.terminated_at = Some(f.time);
        }
        Ok(())
    }

    fn compute(&self) -> Result<Option<f64>, MetricError> {
        if self.rows == 0 {
            return Err(MetricError::NoFrames { metric: self.info.name });
        }
        Ok(Some(match self.kind {
            MjlabKind::Success => {
                if self.terminated_at.is_some() {
                    0.0
                } else {
                    1.0
                }
            }
            MjlabKind::FailureTime => self.terminated_at.unwrap_or(self.last_time),
            _ if self.steps == 0 => {
                return Err(MetricError::BadFrame {
                    metric: self.info.name,
                    message: "only the reset frame: no step to measure".into(),
                });
            }
            _ => self.sum / self.steps as f64,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn yaw_of_a_pure_yaw_is_itself_and_tilt_is_dropped() {
        let a = 0.7f64;
        let yaw = [(a / 2.0).cos(), 0.0, 0.0, (a / 2.0).sin()];
        let got = yaw_quat(&yaw);
        for k in 0..4 {
            assert!((got[k] - yaw[k]).abs() < 1e-15);
        }
        let b = 0.3f64;
        let pitch = [(b / 2.0).cos(), 0.0, (b / 2.0).sin(), 0.0];
        let got = yaw_quat(&quat_mul(&yaw, &pitch));
        assert!((got[0] - yaw[0]).abs() < 1e-12 && (got[3] - yaw[3]).abs() < 1e-12);
    }

    #[test]
    fn gravity_z_of_upright_and_tilted() {
        assert_eq!(projected_gravity_z(&[1.0, 0.0, 0.0, 0.0]), -1.0);
        let b = std::f64::consts::FRAC_PI_2;
        let pitched = [(b / 2.0).cos(), 0.0, (b / 2.0).sin(), 0.0];
        assert!(
            projected_gravity_z(&pitched).abs() < 1e-15,
            "lying on its side sees no z gravity"
        );
    }

    #[test]
    fn reanchoring_moves_the_reference_onto_the_robot_anchor() {
        // Reference anchor at (1, 0, 0.9) facing +x; robot anchor at (3, 2, 0.5) facing +y.
        let q_ref = [1.0, 0.0, 0.0, 0.0];
        let h = std::f64::consts::FRAC_PI_4;
        let q_robot = [h.cos(), 0.0, 0.0, h.sin()];
        let r = Reanchoring::new((&[1.0, 0.0, 0.9], &q_ref), (&[3.0, 2.0, 0.5], &q_robot));
        // A body 0.2 m ahead of the reference anchor and 0.4 m lower lands 0.2 m along +y of the
        // robot anchor, at the reference's own height.
        let p = r.position(&[1.2, 0.0, 0.5]);
        for (got, want) in p.iter().zip([3.0, 2.2, 0.5]) {
            assert!((got - want).abs() < 1e-12, "{p:?}");
        }
        assert!(quat_angle(&r.orientation(&q_ref), &q_robot) < 1e-12);
    }

    #[test]
    fn terminations_fire_on_each_threshold() {
        let up = [1.0, 0.0, 0.0, 0.0];
        let t = Thresholds::MJLAB_G1;
        let none = terminations(
            &t,
            (&[0.0, 0.0, 1.0], &up),
            (&[5.0, 5.0, 0.8], &up),
            &[0.1; 4],
            &[0.3; 4],
        );
        assert_eq!(none, [false; 3], "horizontal drift and 0.2 m are no failure");
        let low = terminations(
            &t,
            (&[0.0, 0.0, 1.0], &up),
            (&[0.0, 0.0, 0.7], &up),
            &[0.1; 4],
            &[0.1; 4],
        );
        assert_eq!(low, [true, false, false]);
        // g_z goes from −1 to −cos b: a tilt of 1.5 rad differs by 0.93 > 0.8, one of 1.2 by 0.64.
        let b = 1.5f64;
        let tilted = [(b / 2.0).cos(), (b / 2.0).sin(), 0.0, 0.0];
        let fallen = terminations(
            &t,
            (&[0.0, 0.0, 1.0], &up),
            (&[0.0, 0.0, 1.0], &tilted),
            &[0.1; 4],
            &[0.1; 4],
        );
        assert_eq!(fallen, [false, true, false]);
        let b = 1.2f64;
        let leaning = [(b / 2.0).cos(), (b / 2.0).sin(), 0.0, 0.0];
        let leaning = terminations(
            &t,
            (&[0.0, 0.0, 1.0], &up),
            (&[0.0, 0.0, 1.0], &leaning),
            &[0.1; 4],
            &[0.1; 4],
        );
        assert_eq!(leaning, [false; 3]);
        let foot = terminations(
            &t,
            (&[0.0, 0.0, 1.0], &up),
            (&[0.0, 0.0, 1.0], &up),
            &[0.1; 4],
            &[0.1, 0.1, 0.4, 0.1],
        );
        assert_eq!(foot, [false, false, true]);
    }
}
