//! Observation terms (BFM_ZERO_FACTS §2, §3.4). Each term is a pure function of one env's
//! state written into an f32 row; the TrackingEnv assembles them per env in parallel.
//! Choices where the facts list ambiguities are documented in docs/observations.md.

use crate::math::{self, Quat, Vec3};
use crate::motion::{Motion, MotionState};
use crate::robot::{NUM_BODIES_EXT, RobotConfig};
use arena_data::NUM_JOINTS;
use serde::{Deserialize, Serialize};

pub use arena_g1::{HISTORY_ACTOR_DIM, HISTORY_FRAMES, LAST_ACTION_DIM, PRIVILEGED_STATE_DIM, STATE_DIM};
/// Scale of the body-frame angular velocity in the robot's `state` and history.
pub const ANG_VEL_SCALE: f64 = 0.25;

/// Uniform observation noise σ per term (added before scaling), used from DR level 2 on.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoiseScales {
    pub dof_pos: f64,
    pub dof_vel: f64,
    pub projected_gravity: f64,
    pub base_ang_vel: f64,
}

pub const TRAINING_NOISE: NoiseScales = NoiseScales {
    dof_pos: 0.01,
    dof_vel: 0.5,
    projected_gravity: 0.05,
    base_ang_vel: 0.2,
};

/// Which frames `history_actor` holds at step t (§10.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum HistoryTiming {
    /// Training convention: frames t−1 … t−4 (the current frame is pushed after reading).
    #[default]
    Previous,
    /// Released-policy (MI / deploy) convention: frames t … t−3 (current frame pushed first).
    IncludeCurrent,
}

/// The proprioceptive quantities of one frame, as they enter `state` and the history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProprioFrame {
    /// dof_pos − q0 − default joint offset.
    pub dof_pos: [f64; NUM_JOINTS],
    pub dof_vel: [f64; NUM_JOINTS],
    pub projected_gravity: Vec3,
    /// Body-frame angular velocity × 0.25.
    pub base_ang_vel: Vec3,
}

impl ProprioFrame {
    pub const ZERO: ProprioFrame = ProprioFrame {
        dof_pos: [0.0; NUM_JOINTS],
        dof_vel: [0.0; NUM_JOINTS],
        projected_gravity: [0.0; 3],
        base_ang_vel: [0.0; 3],
    };

    /// Builds the robot's frame from simulator state; `noise(σ)` returns U(−1,1)·σ (or 0).
    pub fn from_robot(
        dof_pos: &[f64],
        dof_vel: &[f64],
        root_rot: &Quat,
        root_ang_vel_world: &Vec3,
        defaults: &[f64; NUM_JOINTS],
        noise: &mut impl FnMut(f64) -> f64,
        scales: &NoiseScales,
    ) -> Self {
        let mut f = ProprioFrame::ZERO;
        for j in 0..NUM_JOINTS {
            f.dof_pos[j] = dof_pos[j] - defaults[j] + noise(scales.dof_pos);
            f.dof_vel[j] = dof_vel[j] + noise(scales.dof_vel);
        }
        let g = math::rotate_inv(root_rot, &[0.0, 0.0, -1.0]);
        let w = math::rotate_inv(root_rot, root_ang_vel_world);
        for k in 0..3 {
            f.projected_gravity[k] = g[k] + noise(scales.projected_gravity);
            f.base_ang_vel[k] = (w[k] + noise(scales.base_ang_vel)) * ANG_VEL_SCALE;
        }
        f
    }

    /// `state` (64): [dof_pos (29), dof_vel (29), projected_gravity (3), base_ang_vel (3)].
    pub fn write_state(&self, out: &mut [f32]) {
        for j in 0..NUM_JOINTS {
            out[j] = self.dof_pos[j] as f32;
            out[NUM_JOINTS + j] = self.dof_vel[j] as f32;
        }
        for k in 0..3 {
            out[2 * NUM_JOINTS + k] = self.projected_gravity[k] as f32;
            out[2 * NUM_JOINTS + 3 + k] = self.base_ang_vel[k] as f32;
        }
    }
}

/// Ring of the last [`HISTORY_FRAMES`] frames and actions (a5), kept as the f32 values they
/// are written as, group by group. A push overwrites the oldest slot and moves the ring's head
/// (no frames shifted); `write` reads the slots newest first.
#[derive(Debug, Clone)]
pub struct History {
    actions: [[f32; NUM_JOINTS]; HISTORY_FRAMES],
    base_ang_vel: [[f32; 3]; HISTORY_FRAMES],
    dof_pos: [[f32; NUM_JOINTS]; HISTORY_FRAMES],
    dof_vel: [[f32; NUM_JOINTS]; HISTORY_FRAMES],
    projected_gravity: [[f32; 3]; HISTORY_FRAMES],
    /// The slot of the newest frame; older ones follow it cyclically.
    newest: usize,
}

impl Default for History {
    fn default() -> Self {
        Self {
            actions: [[0.0; NUM_JOINTS]; HISTORY_FRAMES],
            base_ang_vel: [[0.0; 3]; HISTORY_FRAMES],
            dof_pos: [[0.0; NUM_JOINTS]; HISTORY_FRAMES],
            dof_vel: [[0.0; NUM_JOINTS]; HISTORY_FRAMES],
            projected_gravity: [[0.0; 3]; HISTORY_FRAMES],
            newest: 0,
        }
    }
}

/// Two histories are equal when they hold the same frames in the same order, wherever the
/// ring's head is.
impl PartialEq for History {
    fn eq(&self, other: &Self) -> bool {
        let (mut a, mut b) = ([0.0f32; HISTORY_ACTOR_DIM], [0.0f32; HISTORY_ACTOR_DIM]);
        self.write(&mut a);
        other.write(&mut b);
        a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits())
    }
}

impl History {
    pub fn clear(&mut self) {
        *self = Self::default();
    }

    pub fn push(&mut self, frame: &ProprioFrame, action_a5: &[f64; NUM_JOINTS]) {
        let k = (self.newest + HISTORY_FRAMES - 1) % HISTORY_FRAMES;
        self.newest = k;
        put_f32(&mut self.actions[k], action_a5);
        put_f32(&mut self.base_ang_vel[k], &frame.base_ang_vel);
        put_f32(&mut self.dof_pos[k], &frame.dof_pos);
        put_f32(&mut self.dof_vel[k], &frame.dof_vel);
        put_f32(&mut self.projected_gravity[k], &frame.projected_gravity);
    }

    /// `history_actor` (372): terms in alphabetical order — actions (4×29), base_ang_vel (4×3),
    /// dof_pos (4×29), dof_vel (4×29), projected_gravity (4×3) — newest frame first in each.
    pub fn write(&self, out: &mut [f32]) {
        self.write_frames(out, self.newest, 0..HISTORY_FRAMES);
    }

    /// The part of the row that the next push leaves as it is: each group's second to last
    /// frame as they will be after it (the newest frames now, moved one along). Then
    /// [`History::push`] and [`History::write_newest`] complete the row that `push` then
    /// [`History::write`] gives, so that most of it can be written before the new frame exists
    /// (while the backend simulates the step that makes it).
    pub fn write_older_after_push(&self, out: &mut [f32]) {
        let newest_after_push = (self.newest + HISTORY_FRAMES - 1) % HISTORY_FRAMES;
        self.write_frames(out, newest_after_push, 1..HISTORY_FRAMES);
    }

    /// Each group's first frame of the row (the newest); see [`History::write_older_after_push`].
    pub fn write_newest(&self, out: &mut [f32]) {
        self.write_frames(out, self.newest, 0..1);
    }

    /// Writes the frames at `positions` (0 = newest) of every group, the newest being slot
    /// `newest`, and leaves the row's other values as they are.
    fn write_frames(&self, out: &mut [f32], newest: usize, positions: std::ops::Range<usize>) {
        let p = positions;
        let rest = write_group(out, &self.actions, newest, p.clone());
        let rest = write_group(rest, &self.base_ang_vel, newest, p.clone());
        let rest = write_group(rest, &self.dof_pos, newest, p.clone());
        let rest = write_group(rest, &self.dof_vel, newest, p.clone());
        write_group(rest, &self.projected_gravity, newest, p);
    }
}

/// Copies one group's frames at `positions` (0 = newest, slot `newest`; older ones follow
/// cyclically) into the front of `out`, which holds the group's [`HISTORY_FRAMES`] frames;
/// returns the rest of `out`.
fn write_group<'a, const W: usize>(
    out: &'a mut [f32],
    slots: &[[f32; W]; HISTORY_FRAMES],
    newest: usize,
    positions: std::ops::Range<usize>,
) -> &'a mut [f32] {
    let (group, rest) = out.split_at_mut(HISTORY_FRAMES * W);
    for k in positions {
        group[k * W..(k + 1) * W].copy_from_slice(&slots[(newest + k) % HISTORY_FRAMES]);
    }
    rest
}

/// `out[i] = values[i] as f32` over the shorter of the two.
fn put_f32(out: &mut [f32], values: &[f64]) {
    for (o, v) in out.iter_mut().zip(values) {
        *o = *v as f32;
    }
}

/// `privileged_state` (463, max_local_self): root height, root-relative body positions, body
/// rotations (tangent-normal) and velocities, all in the heading-aligned root frame.
/// Inputs are world-frame arrays over the 31 extended bodies (body 0 = pelvis).
pub fn privileged_state(pos: &[[f64; 3]], rot: &[Quat], vel: &[[f64; 3]], ang_vel: &[[f64; 3]], out: &mut [f32]) {
    // Slices, so that flat handler rows are used in place (`as_chunks`); each holds the 31 bodies.
    assert!(
        [pos.len(), rot.len(), vel.len(), ang_vel.len()] == [NUM_BODIES_EXT; 4],
        "privileged_state needs {NUM_BODIES_EXT} bodies in each input"
    );
    // The heading-aligned frame is a yaw rotation: by (cos, sin) of minus the root's heading,
    // applied as a 2-D rotation (no quaternion products per body).
    let (c, s) = math::heading_cos_sin(&rot[0]);
    let unyaw = |v: &[f64; 3]| [c * v[0] + s * v[1], c * v[1] - s * v[0], v[2]];
    let (height, rest) = out[..PRIVILEGED_STATE_DIM].split_at_mut(1);
    height[0] = pos[0][2] as f32;
    let (rel_pos, rest) = rest.split_at_mut(3 * (NUM_BODIES_EXT - 1));
    for (o, p) in rel_pos.chunks_exact_mut(3).zip(&pos[1..]) {
        put_f32(o, &unyaw(&math::sub(p, &pos[0])));
    }
    let (rotations, rest) = rest.split_at_mut(6 * NUM_BODIES_EXT);
    for (o, q) in rotations.chunks_exact_mut(6).zip(rot) {
        // tan_norm of (heading⁻¹ · q): the yaw rotation of q's x and z axes.
        put_f32(&mut o[..3], &unyaw(&math::x_axis(q)));
        put_f32(&mut o[3..], &unyaw(&math::z_axis(q)));
    }
    let (velocities, angular) = rest.split_at_mut(3 * NUM_BODIES_EXT);
    for (o, v) in velocities.chunks_exact_mut(3).zip(vel) {
        put_f32(o, &unyaw(v));
    }
    for (o, w) in angular.chunks_exact_mut(3).zip(ang_vel) {
        put_f32(o, &unyaw(w));
    }
}

/// Flattened SoA rows (frame-major) → per-body arrays.
pub fn bodies3(flat: &[f64]) -> [[f64; 3]; NUM_BODIES_EXT] {
    std::array::from_fn(|b| [flat[3 * b], flat[3 * b + 1], flat[3 * b + 2]])
}

pub fn bodies4(flat: &[f64]) -> [Quat; NUM_BODIES_EXT] {
    std::array::from_fn(|b| [flat[4 * b], flat[4 * b + 1], flat[4 * b + 2], flat[4 * b + 3]])
}

/// Reference (backward) observations of a motion (§3.4), rows at t = k·0.02 s for
/// k = 0 … ceil(length/0.02) − 1: `state` uses dof_pos − q0 and the **world-frame, unscaled**
/// root angular velocity; `privileged_state` is max_local_self of the reference bodies.
#[derive(Debug, Clone, PartialEq)]
pub struct ReferenceObservations {
    pub rows: usize,
    pub state: Vec<f32>,
    pub privileged_state: Vec<f32>,
}

pub fn reference_observations(motion: &Motion, config: &RobotConfig) -> ReferenceObservations {
    let rows = ((motion.length_s / crate::CONTROL_DT) - 1e-9).ceil().max(1.0) as usize;
    let mut state = vec![0.0f32; rows * STATE_DIM];
    let mut privileged = vec![0.0f32; rows * PRIVILEGED_STATE_DIM];
    let mut s = MotionState::default();
    for k in 0..rows {
        motion.state_at(k as f64 * crate::CONTROL_DT, &mut s);
        reference_state_row(&s, config, &mut state[k * STATE_DIM..(k + 1) * STATE_DIM]);
        privileged_state(
            &s.body_pos,
            &s.body_rot,
            &s.body_vel,
            &s.body_ang_vel,
            &mut privileged[k * PRIVILEGED_STATE_DIM..(k + 1) * PRIVILEGED_STATE_DIM],
        );
    }
    ReferenceObservations {
        rows,
        state,
        privileged_state: privileged,
    }
}

/// One reference `state` row (64) from a motion state.
pub fn reference_state_row(s: &MotionState, config: &RobotConfig, out: &mut [f32]) {
    reference_state_row_from(&s.qpos, &s.dof_vel, &s.body_ang_vel[0], config, out);
}

/// One reference `state` row (64) from its inputs: qpos (36), joint velocities and the root's
/// world angular velocity (unscaled, the reference convention of §10.2).
pub fn reference_state_row_from(
    qpos: &[f64],
    dof_vel: &[f64; NUM_JOINTS],
    root_ang_vel: &Vec3,
    config: &RobotConfig,
    out: &mut [f32],
) {
    let rot: Quat = qpos[3..7].try_into().expect("4");
    let g = math::rotate_inv(&rot, &[0.0, 0.0, -1.0]);
    for j in 0..NUM_JOINTS {
        out[j] = (qpos[7 + j] - config.default_pose[j]) as f32;
        out[NUM_JOINTS + j] = dof_vel[j] as f32;
    }
    for k in 0..3 {
        out[2 * NUM_JOINTS + k] = g[k] as f32;
        out[2 * NUM_JOINTS + 3 + k] = root_ang_vel[k] as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dims_add_up() {
        assert_eq!(HISTORY_ACTOR_DIM, 372);
        assert_eq!(1 + 30 * 3 + 31 * 6 + 31 * 3 + 31 * 3, PRIVILEGED_STATE_DIM);
    }

    #[test]
    fn state_of_a_tilted_spinning_robot() {
        // Root pitched +90° about y: gravity (0,0,-1) seen in the body frame is (1,0,0)·… check.
        let root = math::quat_from_axis_angle(&[0.0, 1.0, 0.0], std::f64::consts::FRAC_PI_2);
        let defaults = RobotConfig::default().default_pose;
        let mut dof = defaults;
        dof[3] += 0.5;
        let vel = [0.1; NUM_JOINTS];
        let f = ProprioFrame::from_robot(
            &dof,
            &vel,
            &root,
            &[0.0, 0.0, 2.0],
            &defaults,
            &mut |_| 0.0,
            &TRAINING_NOISE,
        );
        let mut out = [0.0f32; STATE_DIM];
        f.write_state(&mut out);
        assert!((out[3] - 0.5).abs() < 1e-6 && out[0].abs() < 1e-6);
        assert!((out[29] - 0.1).abs() < 1e-6);
        // R_y(90°)ᵀ·(0,0,-1) = (1, 0, 0); R_y(90°)ᵀ·(0,0,2) = (-2, 0, 0), ×0.25 = -0.5.
        assert!(
            (out[58] - 1.0).abs() < 1e-6 && out[60].abs() < 1e-6,
            "{:?}",
            &out[58..61]
        );
        assert!((out[61] + 0.5).abs() < 1e-6, "{:?}", &out[61..64]);
    }

    #[test]
    fn history_layout_is_alphabetical_newest_first() {
        let mut h = History::default();
        for step in 1..=5 {
            let mut f = ProprioFrame::ZERO;
            f.dof_pos[0] = step as f64;
            f.base_ang_vel = [step as f64; 3];
            f.projected_gravity = [-(step as f64); 3];
            h.push(&f, &[10.0 * step as f64; NUM_JOINTS]);
        }
        let mut out = [0.0f32; HISTORY_ACTOR_DIM];
        h.write(&mut out);
        assert_eq!(out[0], 50.0); // actions, newest (step 5) first
        assert_eq!(out[29], 40.0);
        assert_eq!(out[116], 5.0); // base_ang_vel at offset 116
        assert_eq!(out[119], 4.0);
        assert_eq!(out[128], 5.0); // dof_pos at offset 128
        assert_eq!(out[128 + 29], 4.0);
        assert_eq!(out[360], -5.0); // projected_gravity at offset 360
        assert_eq!(out[371], -2.0); // oldest of four kept frames is step 2
    }

    #[test]
    fn history_write_puts_every_value_of_every_group_in_order() {
        let mut h = History::default();
        let mut next = 0.0;
        let mut value = || {
            next += 1.25;
            next
        };
        // The pushes, newest first, to build the expected row from.
        let mut pushed: Vec<(ProprioFrame, [f64; NUM_JOINTS])> = Vec::new();
        for _ in 0..6 {
            let mut f = ProprioFrame::ZERO;
            f.dof_pos = std::array::from_fn(|_| value());
            f.dof_vel = std::array::from_fn(|_| value());
            f.base_ang_vel = std::array::from_fn(|_| value());
            f.projected_gravity = std::array::from_fn(|_| value());
            let a: [f64; NUM_JOINTS] = std::array::from_fn(|_| value());
            h.push(&f, &a);
            pushed.insert(0, (f, a));
        }
        let kept = &pushed[..HISTORY_FRAMES];
        let mut expected: Vec<f64> = kept.iter().flat_map(|(_, a)| a.to_vec()).collect();
        for group in [
            |f: &ProprioFrame| f.base_ang_vel.to_vec(),
            |f: &ProprioFrame| f.dof_pos.to_vec(),
            |f: &ProprioFrame| f.dof_vel.to_vec(),
            |f: &ProprioFrame| f.projected_gravity.to_vec(),
        ] {
            expected.extend(kept.iter().flat_map(|(f, _)| group(f)));
        }
        let expected: Vec<f32> = expected.into_iter().map(|v| v as f32).collect();
        let mut out = [f32::NAN; HISTORY_ACTOR_DIM];
        h.write(&mut out);
        assert_eq!(out.to_vec(), expected);
        // The same four frames pushed alone leave the ring's head elsewhere: still equal.
        let mut same = History::default();
        for (f, a) in kept.iter().rev() {
            same.push(f, a);
        }
        assert_eq!(same, h);
        same.push(&kept[0].0, &kept[0].1);
        assert_ne!(same, h);
    }

    /// Writing the older frames before the push and the newest after it gives the row that
    /// the push then a whole write gives, from every position of the ring's head.
    #[test]
    fn history_written_around_a_push_equals_a_whole_write() {
        let frame = |v: f64| {
            let mut f = ProprioFrame::ZERO;
            f.dof_pos = std::array::from_fn(|j| v + j as f64);
            f.dof_vel = std::array::from_fn(|j| -v - j as f64);
            f.base_ang_vel = [v, 2.0 * v, 3.0 * v];
            f.projected_gravity = [-v, -2.0 * v, -3.0 * v];
            f
        };
        let mut h = History::default();
        for step in 1..=2 * HISTORY_FRAMES {
            let (f, a) = (frame(step as f64), [0.5 * step as f64; NUM_JOINTS]);
            let mut around = [f32::NAN; HISTORY_ACTOR_DIM];
            h.write_older_after_push(&mut around);
            let mut whole = h.clone();
            whole.push(&f, &a);
            h.push(&f, &a);
            h.write_newest(&mut around);
            let mut want = [0.0f32; HISTORY_ACTOR_DIM];
            whole.write(&mut want);
            assert_eq!(around.map(f32::to_bits), want.map(f32::to_bits), "after push {step}");
        }
    }

    /// The yaw-rotation form equals the definition: every vector rotated by the quaternion of
    /// minus the root's heading, and tan_norm of that quaternion times each body's.
    #[test]
    fn privileged_state_equals_its_quaternion_definition() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let mut unit = || {
            let q: Quat = std::array::from_fn(|_| rng.random_range(-1.0..1.0));
            math::quat_normalize(&q)
        };
        let rot: [Quat; NUM_BODIES_EXT] = std::array::from_fn(|_| unit());
        let vecs = |k: f64| -> [[f64; 3]; NUM_BODIES_EXT] {
            std::array::from_fn(|b| [k * b as f64 - 0.3, 0.7 - k * b as f64, 0.9 + 0.01 * b as f64])
        };
        let (pos, vel, ang) = (vecs(0.05), vecs(-0.4), vecs(1.3));
        let mut fast = [0.0f32; PRIVILEGED_STATE_DIM];
        privileged_state(&pos, &rot, &vel, &ang, &mut fast);
        let h = math::quat_from_yaw(-math::heading(&rot[0]));
        let mut want = vec![pos[0][2]];
        for p in &pos[1..] {
            want.extend(math::rotate(&h, &math::sub(p, &pos[0])));
        }
        for q in &rot {
            want.extend(math::tan_norm(&math::quat_mul(&h, q)));
        }
        for v in vel.iter().chain(&ang) {
            want.extend(math::rotate(&h, v));
        }
        assert_eq!(want.len(), PRIVILEGED_STATE_DIM);
        for (i, (a, b)) in fast.iter().zip(&want).enumerate() {
            assert!(
                (*a as f64 - b).abs() <= 1e-6 * b.abs().max(1.0),
                "index {i}: {a} vs {b}"
            );
        }
        // An upright x axis has no heading: the frame is the world's, as atan2(0, 0) = 0 gives.
        let pitched = [0.5, 0.5, -0.5, 0.5];
        assert_eq!(math::heading(&pitched), 0.0);
        assert_eq!(math::heading_cos_sin(&pitched), (1.0, 0.0));
    }

    #[test]
    fn privileged_state_is_heading_invariant() {
        let mut pos = [[0.0; 3]; NUM_BODIES_EXT];
        let mut rot = [math::IDENTITY; NUM_BODIES_EXT];
        let mut vel = [[0.0; 3]; NUM_BODIES_EXT];
        let ang = [[0.0, 0.0, 1.0]; NUM_BODIES_EXT];
        for b in 0..NUM_BODIES_EXT {
            pos[b] = [0.1 * b as f64, 0.05, 0.8 - 0.01 * b as f64];
            vel[b] = [1.0, 0.0, 0.0];
        }
        let mut a = [0.0f32; PRIVILEGED_STATE_DIM];
        privileged_state(&pos, &rot, &vel, &ang, &mut a);
        assert_eq!(a[0], 0.8);
        assert!((a[1] - 0.1).abs() < 1e-6); // body 1 relative x
        // Rotate the whole scene by 1 rad of yaw about the root: the vector must not change.
        let q = math::quat_from_yaw(1.0);
        for b in 0..NUM_BODIES_EXT {
            pos[b] = math::rotate(&q, &pos[b]);
            rot[b] = math::quat_mul(&q, &rot[b]);
            vel[b] = math::rotate(&q, &vel[b]);
        }
        let mut b = [0.0f32; PRIVILEGED_STATE_DIM];
        privileged_state(&pos, &rot, &vel, &ang, &mut b);
        for i in 0..PRIVILEGED_STATE_DIM {
            assert!((a[i] - b[i]).abs() < 1e-5, "index {i}: {} vs {}", a[i], b[i]);
        }
    }
}
