//! The motion library (BFM_ZERO_FACTS §3): reference clips resampled to the control rate,
//! with forward kinematics of the 30 bodies + virtual head and the reference velocities.
//!
//! Every quantity of a motion is one contiguous array (frame-major), so looking up many envs'
//! reference states per step touches little memory. [`Motion::state_at`] samples any time.

use crate::SimError;
use crate::handler::{CONTROL_DT, NQ, NV};
use crate::kinematics::Kinematics;
use crate::math::{self, Quat, Vec3};
use crate::robot::{BODY_NAMES, NUM_BODIES, NUM_BODIES_EXT, RobotConfig};
use arena_data::{MotionClip, NUM_COLUMNS, NUM_JOINTS};

/// Standard deviation (frames) of the Gaussian smoothing of body velocities (§3.2).
const VELOCITY_SMOOTHING_SIGMA: f64 = 2.0;

/// The longest motion: two hours at 50 Hz is about 1.3 GB of resampled rows, and a longer
/// clip is almost surely a wrong `fps` (a tiny one stretches a few frames into years).
pub const MAX_MOTION_S: f64 = 7200.0;

/// A reference motion at the control rate (50 Hz).
#[derive(Debug, Clone)]
pub struct Motion {
    pub name: String,
    pub category: String,
    pub source_fps: f64,
    pub fps: f64,
    pub num_frames: usize,
    /// Seconds from the first to the last frame: (num_frames − 1) / fps.
    pub length_s: f64,
    /// Frame-major arrays: qpos (T×36, quaternion wxyz), dof_vel (T×29), bodies (T×31×{3,4}).
    pub qpos: Vec<f64>,
    pub dof_vel: Vec<f64>,
    /// Joint velocities as mjlab's and BeyondMimic's motion files hold them (`csv_to_npz.py`:
    /// `torch.gradient` of the 50 Hz joint positions, central inside the clip, one-sided at its
    /// ends), for the tracking command (`motion_command`) and the NPZ export. `dof_vel` keeps
    /// BFM-Zero's forward difference (the reference `state`, the reset's velocities).
    pub joint_vel_central: Vec<f64>,
    pub body_pos: Vec<f64>,
    pub body_rot: Vec<f64>,
    pub body_vel: Vec<f64>,
    pub body_ang_vel: Vec<f64>,
}

/// The reference state at one time: everything needed to reset the simulator to it and to
/// build reference observations. Body velocities are world frame.
#[derive(Debug, Clone, PartialEq)]
pub struct MotionState {
    pub qpos: [f64; NQ],
    pub dof_vel: [f64; NUM_JOINTS],
    /// [`Motion::joint_vel_central`] at this time: the velocities of the tracking command.
    pub command_joint_vel: [f64; NUM_JOINTS],
    pub body_pos: [[f64; 3]; NUM_BODIES_EXT],
    pub body_rot: [Quat; NUM_BODIES_EXT],
    pub body_vel: [[f64; 3]; NUM_BODIES_EXT],
    pub body_ang_vel: [[f64; 3]; NUM_BODIES_EXT],
}

impl Default for MotionState {
    fn default() -> Self {
        Self {
            qpos: [0.0; NQ],
            dof_vel: [0.0; NUM_JOINTS],
            command_joint_vel: [0.0; NUM_JOINTS],
            body_pos: [[0.0; 3]; NUM_BODIES_EXT],
            body_rot: [[1.0, 0.0, 0.0, 0.0]; NUM_BODIES_EXT],
            body_vel: [[0.0; 3]; NUM_BODIES_EXT],
            body_ang_vel: [[0.0; 3]; NUM_BODIES_EXT],
        }
    }
}

impl MotionState {
    /// MuJoCo qvel of this state: root linear velocity (world), root angular velocity in the
    /// root frame (MuJoCo's free-joint convention), joint velocities.
    pub fn qvel(&self) -> [f64; NV] {
        let mut qvel = [0.0; NV];
        qvel[..3].copy_from_slice(&self.body_vel[0]);
        let rot: Quat = self.qpos[3..7].try_into().expect("4");
        qvel[3..6].copy_from_slice(&math::rotate_inv(&rot, &self.body_ang_vel[0]));
        qvel[6..].copy_from_slice(&self.dof_vel);
        qvel
    }
}

/// Frame indices and blend weight for time `t` (§3.3): f0, f1 = f0 + 1 (clamped) and β ∈ [0,1].
fn frame_blend(t: f64, num_frames: usize, fps: f64) -> (usize, usize, f64) {
    let length = (num_frames - 1) as f64 / fps;
    let phase = if length > 0.0 {
        (t / length).clamp(0.0, 1.0)
    } else {
        0.0
    };
    let f0 = ((phase * (num_frames - 1) as f64).floor() as usize).min(num_frames - 1);
    let f1 = (f0 + 1).min(num_frames - 1);
    let beta = ((t - f0 as f64 / fps) * fps).clamp(0.0, 1.0);
    (f0, f1, beta)
}

fn lerp_into(out: &mut [f64], a: &[f64], b: &[f64], beta: f64) {
    for ((o, x), y) in out.iter_mut().zip(a).zip(b) {
        *o = (1.0 - beta) * x + beta * y;
    }
}

/// Samples a source clip's qpos at time `t` (lerp, slerp for the root rotation).
fn sample_clip(clip: &MotionClip, t: f64, out: &mut [f64; NQ]) {
    let (f0, f1, beta) = frame_blend(t, clip.num_frames(), clip.fps);
    let (a, b) = (clip.frame(f0), clip.frame(f1));
    lerp_into(out, a, b, beta);
    let qa: Quat = a[3..7].try_into().expect("4");
    let qb: Quat = b[3..7].try_into().expect("4");
    out[3..7].copy_from_slice(&math::slerp(&qa, &qb, beta));
}

/// Gaussian filter along time (frame-major rows of `width`), edge mode "nearest", truncated at
/// 4σ (scipy's `gaussian_filter1d` defaults).
fn gaussian_smooth(values: &mut [f64], width: usize, sigma: f64) {
    let frames = values.len() / width;
    let radius = (4.0 * sigma + 0.5) as isize;
    let mut kernel: Vec<f64> = (-radius..=radius)
        .map(|x| (-0.5 * (x as f64 / sigma).powi(2)).exp())
        .collect();
    let sum: f64 = kernel.iter().sum();
    kernel.iter_mut().for_each(|k| *k /= sum);
    let src = values.to_vec();
    for t in 0..frames {
        let row = &mut values[t * width..(t + 1) * width];
        row.fill(0.0);
        for (k, w) in kernel.iter().enumerate() {
            let s = (t as isize + k as isize - radius).clamp(0, frames as isize - 1) as usize;
            for (o, v) in row.iter_mut().zip(&src[s * width..(s + 1) * width]) {
                *o += w * v;
            }
        }
    }
}

impl Motion {
    /// Resamples `clip` to the control rate, runs forward kinematics and computes the reference
    /// velocities (§3.2) at that rate.
    pub fn from_clip(clip: &MotionClip, kin: &mut Kinematics) -> Result<Self, SimError> {
        let err = |message: String| SimError::Motion {
            motion: clip.name.clone(),
            message,
        };
        if clip.num_frames() < 2 || clip.qpos.len() != clip.num_frames() * NUM_COLUMNS {
            return Err(err(format!("needs at least 2 frames of {NUM_COLUMNS} values")));
        }
        let duration_s = clip.duration_s();
        if !(..=MAX_MOTION_S).contains(&duration_s) {
            return Err(err(format!(
                "{} frames at {:?} fps last {duration_s:?} s; a motion may last at most {MAX_MOTION_S} s (is fps right?)",
                clip.num_frames(),
                clip.fps
            )));
        }
        if let Some(witness) = &clip.witness {
            check_witness(clip, witness, kin).map_err(err)?;
        }
        let fps = 1.0 / CONTROL_DT;
        // Rows at k·dt that lie within the clip (with a tolerance for rounding).
        let n = (clip.duration_s() * fps + 1e-9).floor() as usize + 1;
        if n < 2 {
            return Err(err(format!(
                "too short: {:.3} s is less than one control step ({CONTROL_DT} s)",
                clip.duration_s()
            )));
        }
        let mut qpos = vec![0.0; n * NQ];
        let mut body_pos = vec![0.0; n * NUM_BODIES_EXT * 3];
        let mut body_rot = vec![0.0; n * NUM_BODIES_EXT * 4];
        let mut row = [0.0; NQ];
        for k in 0..n {
            sample_clip(clip, k as f64 * CONTROL_DT, &mut row);
            qpos[k * NQ..(k + 1) * NQ].copy_from_slice(&row);
            let poses = kin.body_poses(&row);
            for b in 0..NUM_BODIES_EXT {
                let i = k * NUM_BODIES_EXT + b;
                body_pos[3 * i..3 * i + 3].copy_from_slice(&poses.pos[b]);
                body_rot[4 * i..4 * i + 4].copy_from_slice(&poses.rot[b]);
            }
        }
        // dof_vel: forward difference, the last row repeats the previous difference.
        let mut dof_vel = vec![0.0; n * NUM_JOINTS];
        for k in 0..n {
            let (a, b) = if k + 1 < n { (k, k + 1) } else { (k - 1, k) };
            for j in 0..NUM_JOINTS {
                dof_vel[k * NUM_JOINTS + j] = (qpos[b * NQ + 7 + j] - qpos[a * NQ + 7 + j]) * fps;
            }
        }
        let joint_vel_central = central_from_forward(&dof_vel, NUM_JOINTS);
        // Body linear velocity: central differences inside, one-sided at the ends, smoothed.
        let w = NUM_BODIES_EXT * 3;
        let mut body_vel = vec![0.0; n * w];
        for k in 0..n {
            let (a, b, span) = if k == 0 {
                (0, 1, 1.0)
            } else if k == n - 1 {
                (n - 2, n - 1, 1.0)
            } else {
                (k - 1, k + 1, 2.0)
            };
            for i in 0..w {
                body_vel[k * w + i] = (body_pos[b * w + i] - body_pos[a * w + i]) * fps / span;
            }
        }
        gaussian_smooth(&mut body_vel, w, VELOCITY_SMOOTHING_SIGMA);
        // Body angular velocity (world): rotation vector of q[k+1]·q[k]⁻¹ per frame time; last 0.
        let mut body_ang_vel = vec![0.0; n * w];
        for k in 0..n - 1 {
            for b in 0..NUM_BODIES_EXT {
                let q0: Quat = body_rot[4 * (k * NUM_BODIES_EXT + b)..][..4].try_into().expect("4");
                let q1: Quat = body_rot[4 * ((k + 1) * NUM_BODIES_EXT + b)..][..4]
                    .try_into()
                    .expect("4");
                let rv = math::quat_to_rotvec(&math::quat_mul(&q1, &math::quat_conj(&q0)));
                for c in 0..3 {
                    body_ang_vel[k * w + 3 * b + c] = rv[c] * fps;
                }
            }
        }
        gaussian_smooth(&mut body_ang_vel, w, VELOCITY_SMOOTHING_SIGMA);
        Ok(Self {
            name: clip.name.clone(),
            category: clip.category.clone(),
            source_fps: clip.fps,
            fps,
            num_frames: n,
            length_s: (n - 1) as f64 / fps,
            qpos,
            dof_vel,
            joint_vel_central,
            body_pos,
            body_rot,
            body_vel,
            body_ang_vel,
        })
    }

    /// qpos of frame `k` (36 values).
    pub fn frame_qpos(&self, k: usize) -> &[f64] {
        &self.qpos[k * NQ..(k + 1) * NQ]
    }

    /// Body positions of frame `k` (31×3).
    pub fn frame_body_pos(&self, k: usize) -> &[f64] {
        let w = NUM_BODIES_EXT * 3;
        &self.body_pos[k * w..(k + 1) * w]
    }

    /// Reference qpos (36) and body positions (31×3) at time `t`: the part of [`Self::state_at`]
    /// that recording and the replay policy need, without the per-body slerps.
    pub fn pose_at(&self, t: f64, qpos: &mut [f64; NQ], body_pos: &mut [f64]) {
        let (f0, f1, beta) = frame_blend(t, self.num_frames, self.fps);
        self.sample_qpos(f0, f1, beta, qpos);
        sample_rows(&self.body_pos, NUM_BODIES_EXT * 3, f0, f1, beta, body_pos);
    }

    /// qpos between frames `f0` and `f1`: a blend, the root's rotation a slerp.
    fn sample_qpos(&self, f0: usize, f1: usize, beta: f64, qpos: &mut [f64; NQ]) {
        sample_rows(&self.qpos, NQ, f0, f1, beta, qpos);
        let (qa, qb) = (&self.qpos[f0 * NQ + 3..][..4], &self.qpos[f1 * NQ + 3..][..4]);
        qpos[3..7].copy_from_slice(&math::slerp(
            &qa.try_into().expect("4"),
            &qb.try_into().expect("4"),
            beta,
        ));
    }

    /// Body `b`'s position and rotation between frames `f0` and `f1` (blend, slerp).
    fn sample_body_pose(&self, b: usize, f0: usize, f1: usize, beta: f64) -> ([f64; 3], Quat) {
        let (w3, w4) = (NUM_BODIES_EXT * 3, NUM_BODIES_EXT * 4);
        let pos = std::array::from_fn(|c| {
            (1.0 - beta) * self.body_pos[f0 * w3 + 3 * b + c] + beta * self.body_pos[f1 * w3 + 3 * b + c]
        });
        let qa: Quat = self.body_rot[f0 * w4 + 4 * b..][..4].try_into().expect("4");
        let qb: Quat = self.body_rot[f1 * w4 + 4 * b..][..4].try_into().expect("4");
        (pos, math::slerp(&qa, &qb, beta))
    }

    /// The reference joint positions (29) at time `t`: `pose_at`'s `qpos[7..]`, the same
    /// numbers, without the root's slerp and the bodies (the replay policy's whole need).
    pub fn joint_pos_at(&self, t: f64, out: &mut [f64; NUM_JOINTS]) {
        let (f0, f1, beta) = frame_blend(t, self.num_frames, self.fps);
        lerp_into(
            out,
            &self.qpos[f0 * NQ + 7..(f0 + 1) * NQ],
            &self.qpos[f1 * NQ + 7..(f1 + 1) * NQ],
            beta,
        );
    }

    /// Joint velocities and root (pelvis) angular velocity at time `t`: with [`Self::pose_at`],
    /// what a reference `state` row needs, without the per-body slerps of [`Self::state_at`].
    pub fn velocities_at(&self, t: f64, dof_vel: &mut [f64; NUM_JOINTS], root_ang_vel: &mut [f64; 3]) {
        let (f0, f1, beta) = frame_blend(t, self.num_frames, self.fps);
        sample_rows(&self.dof_vel, NUM_JOINTS, f0, f1, beta, dof_vel);
        let w3 = NUM_BODIES_EXT * 3;
        let (a, b) = (&self.body_ang_vel[f0 * w3..][..3], &self.body_ang_vel[f1 * w3..][..3]);
        lerp_into(root_ang_vel, a, b, beta);
    }

    /// The part of [`Self::state_at`] that the tracking command's groups read (mjlab's
    /// `motion_command` and `motion_anchor_*`): `qpos`, `command_joint_vel` and body `anchor`'s
    /// position and rotation, the same numbers; `dof_vel` and every other body of `out` are left
    /// as they were. The other 30 bodies' slerps were most of a served lane's row filling at 4096
    /// envs.
    pub fn command_at(&self, t: f64, anchor: usize, out: &mut MotionState) {
        let (f0, f1, beta) = frame_blend(t, self.num_frames, self.fps);
        self.sample_qpos(f0, f1, beta, &mut out.qpos);
        self.sample_command_joint_vel(f0, f1, beta, &mut out.command_joint_vel);
        (out.body_pos[anchor], out.body_rot[anchor]) = self.sample_body_pose(anchor, f0, f1, beta);
    }

    /// [`Self::joint_vel_central`] between frames `f0` and `f1`.
    fn sample_command_joint_vel(&self, f0: usize, f1: usize, beta: f64, out: &mut [f64; NUM_JOINTS]) {
        sample_rows(&self.joint_vel_central, NUM_JOINTS, f0, f1, beta, out);
    }

    /// Reference state at time `t` seconds (§3.3): linear blend of the two neighbouring frames,
    /// slerp for rotations; times outside [0, length] clamp to the ends.
    pub fn state_at(&self, t: f64, out: &mut MotionState) {
        let (f0, f1, beta) = frame_blend(t, self.num_frames, self.fps);
        let w3 = NUM_BODIES_EXT * 3;
        self.sample_qpos(f0, f1, beta, &mut out.qpos);
        sample_rows(&self.dof_vel, NUM_JOINTS, f0, f1, beta, &mut out.dof_vel);
        self.sample_command_joint_vel(f0, f1, beta, &mut out.command_joint_vel);
        for b in 0..NUM_BODIES_EXT {
            for c in 0..3 {
                let lerp = |v: &[f64]| (1.0 - beta) * v[f0 * w3 + 3 * b + c] + beta * v[f1 * w3 + 3 * b + c];
                out.body_vel[b][c] = lerp(&self.body_vel);
                out.body_ang_vel[b][c] = lerp(&self.body_ang_vel);
            }
            (out.body_pos[b], out.body_rot[b]) = self.sample_body_pose(b, f0, f1, beta);
        }
    }
}

/// Central differences from forward ones, frame by frame: with f_k = (q_{k+1} − q_k)/Δt (the last
/// frame repeating the one before), (f_k + f_{k−1})/2 = (q_{k+1} − q_{k−1})/(2Δt) inside the clip,
/// f_0 at its first frame and the backward difference at its last: `torch.gradient`'s
/// (`numpy.gradient`'s) first-order edges.
fn central_from_forward(forward: &[f64], width: usize) -> Vec<f64> {
    let mut out = forward.to_vec();
    for k in 1..forward.len() / width {
        for j in 0..width {
            out[k * width + j] = 0.5 * (forward[k * width + j] + forward[(k - 1) * width + j]);
        }
    }
    out
}

fn sample_rows(values: &[f64], width: usize, f0: usize, f1: usize, beta: f64, out: &mut [f64]) {
    lerp_into(
        out,
        &values[f0 * width..(f0 + 1) * width],
        &values[f1 * width..(f1 + 1) * width],
        beta,
    );
}

/// A set of motions sharing one kinematics model.
#[derive(Debug, Clone, Default)]
pub struct MotionLibrary {
    pub motions: Vec<Motion>,
}

impl MotionLibrary {
    pub fn from_clips(clips: &[MotionClip], config: &RobotConfig) -> Result<Self, SimError> {
        let mut kin = Kinematics::new(config)?;
        let motions = clips
            .iter()
            .map(|c| Motion::from_clip(c, &mut kin))
            .collect::<Result<_, _>>()?;
        Ok(Self { motions })
    }

    /// The project's generated motions (standing, squat, arm waves, ...), at 50 Hz.
    pub fn builtin_clips(config: &RobotConfig) -> Result<Vec<MotionClip>, SimError> {
        let mut kin = Kinematics::new(config)?;
        Ok(arena_data::generate_builtin_motions(&config.default_pose, &mut kin))
    }

    pub fn len(&self) -> usize {
        self.motions.len()
    }

    pub fn is_empty(&self) -> bool {
        self.motions.is_empty()
    }
}

impl Motion {
    /// The motion as mjlab-layout NPZ content at the control rate (50 fps), its velocities as
    /// mjlab's `csv_to_npz.py` makes them: joint velocities and the root's linear velocity by
    /// `torch.gradient` (central inside, one-sided at the ends), the root's angular velocity
    /// from the rotation between the frames before and after (its first and last repeated), and
    /// the 30 real bodies' world poses and link velocities from forward kinematics of that state
    /// (`kin`: MuJoCo body order, pelvis first).
    pub fn to_npz(&self, kin: &mut Kinematics) -> arena_data::NpzMotionOut {
        let frames = (self.length_s / CONTROL_DT + 1e-9).floor() as usize + 1;
        let mut out = arena_data::NpzMotionOut {
            fps: 1.0 / CONTROL_DT,
            frames,
            joint_pos: Vec::with_capacity(frames * NUM_JOINTS),
            joint_vel: Vec::with_capacity(frames * NUM_JOINTS),
            body_names: BODY_NAMES.iter().map(|b| b.to_string()).collect(),
            body_pos_w: Vec::with_capacity(frames * NUM_BODIES * 3),
            body_quat_w: Vec::with_capacity(frames * NUM_BODIES * 4),
            body_lin_vel_w: Vec::with_capacity(frames * NUM_BODIES * 3),
            body_ang_vel_w: Vec::with_capacity(frames * NUM_BODIES * 3),
        };
        // The root's poses of every frame (the differences read the frames around each); the
        // rest of each frame's state one at a time.
        let mut state = MotionState::default();
        let roots: Vec<[f64; 7]> = (0..frames)
            .map(|k| {
                self.state_at(k as f64 * CONTROL_DT, &mut state);
                state.qpos[..7].try_into().expect("7")
            })
            .collect();
        let root_pos = |k: usize| -> Vec3 { roots[k][..3].try_into().expect("3") };
        let root_rot = |k: usize| -> Quat { roots[k][3..].try_into().expect("4") };
        let last = frames - 1;
        for k in 0..frames {
            self.state_at(k as f64 * CONTROL_DT, &mut state);
            // The frames a central difference spans (one-sided at the ends; none for one frame).
            let (a, b) = (k.saturating_sub(1), (k + 1).min(last));
            let span = (b - a).max(1) as f64 * CONTROL_DT;
            let root_lin: Vec3 = std::array::from_fn(|c| (root_pos(b)[c] - root_pos(a)[c]) / span);
            // The rotation from the frame before to the one after, over two frame times; at the
            // ends the value of the next frame in.
            let (p, n) = match frames {
                0..=2 => (0, last),
                _ => (k.clamp(1, last - 1) - 1, k.clamp(1, last - 1) + 1),
            };
            let turn = math::quat_to_rotvec(&math::quat_mul(&root_rot(n), &math::quat_conj(&root_rot(p))));
            let root_ang: Vec3 = turn.map(|v| v / ((n - p).max(1) as f64 * CONTROL_DT));
            let mut qvel = [0.0; NV];
            qvel[..3].copy_from_slice(&root_lin);
            qvel[3..6].copy_from_slice(&math::rotate_inv(&root_rot(k), &root_ang));
            qvel[6..].copy_from_slice(&state.command_joint_vel);
            let (linear, angular) = kin.body_link_velocities(&state.qpos, &qvel);
            out.joint_pos.extend_from_slice(&state.qpos[7..]);
            out.joint_vel.extend_from_slice(&state.command_joint_vel);
            for body in 0..NUM_BODIES {
                out.body_pos_w.extend_from_slice(&state.body_pos[body]);
                out.body_quat_w.extend_from_slice(&state.body_rot[body]);
                out.body_lin_vel_w.extend_from_slice(&linear[body]);
                out.body_ang_vel_w.extend_from_slice(&angular[body]);
            }
        }
        out
    }
}

/// Largest distance (m) between a file's body positions and forward kinematics of its joints
/// for the file to count as this robot in this joint order: float32 storage and small model
/// differences stay far below it, a permuted joint order of a moving clip does not.
pub const WITNESS_TOLERANCE_M: f64 = 5e-3;

/// Checks that forward kinematics of a clip's frames reproduces the body positions its file
/// stored (matched by name, or in the G1's MuJoCo body order when the file names none).
fn check_witness(clip: &MotionClip, w: &arena_data::BodyWitness, kin: &mut Kinematics) -> Result<(), String> {
    let pairs: Vec<(usize, usize)> = match &w.body_names {
        Some(names) => names
            .iter()
            .enumerate()
            .filter_map(|(i, n)| BODY_NAMES.iter().position(|b| b == n).map(|b| (i, b)))
            .collect(),
        None if w.num_bodies == NUM_BODIES => (0..NUM_BODIES).map(|b| (b, b)).collect(),
        None => {
            return Err(format!(
                "the file has {} bodies and no body_names; the G1 in MuJoCo's body order has {NUM_BODIES}, so its bodies cannot be matched",
                w.num_bodies
            ));
        }
    };
    if pairs.len() < 2 {
        return Err("body_names matches fewer than 2 bodies of the G1".into());
    }
    // The largest distance (m, frame, body) between the stored bodies and forward kinematics of
    // each frame, its root quaternion first put through `root`.
    let mut farthest = |root: fn([f64; 4]) -> [f64; 4]| {
        let mut worst = (0.0f64, 0usize, 0usize);
        let mut frame = [0.0; NUM_COLUMNS];
        for k in 0..clip.num_frames() {
            frame.copy_from_slice(clip.frame(k));
            let q = root(frame[3..7].try_into().expect("4"));
            frame[3..7].copy_from_slice(&q);
            let poses = kin.body_poses(&frame);
            for &(i, b) in &pairs {
                let stored = &w.positions[(k * w.num_bodies + i) * 3..(k * w.num_bodies + i) * 3 + 3];
                let d = (0..3)
                    .map(|c| (stored[c] - poses.pos[b][c]).powi(2))
                    .sum::<f64>()
                    .sqrt();
                if d > worst.0 {
                    worst = (d, k, b);
                }
            }
        }
        worst
    };
    let worst = farthest(|q| q);
    if worst.0 > WITNESS_TOLERANCE_M {
        // Read as (w, x, y, z), a quaternion stored (x, y, z, w) (SciPy's and Isaac Sim's
        // order) has its w last: taken in that order, do the bodies follow?
        if farthest(|q| [q[3], q[0], q[1], q[2]]).0 <= WITNESS_TOLERANCE_M {
            return Err(
                "body_quat_w holds quaternions in (x, y, z, w) order: forward kinematics reproduces body_pos_w \
                 only with the last component taken as w; mjlab's layout stores (w, x, y, z)"
                    .into(),
            );
        }
        let why = if w.joint_names_given {
            "the file was made for another robot model"
        } else {
            "its joints are in another order than the G1's (e.g. Isaac Lab's: add joint_names) or it was made for another model"
        };
        return Err(format!(
            "forward kinematics of joint_pos does not reproduce body_pos_w: {} is {:.4} m off at frame {} (tolerance {WITNESS_TOLERANCE_M} m), so {why}",
            BODY_NAMES[worst.2], worst.0, worst.1
        ));
    }
    Ok(())
}

/// A clip none of whose bodies comes within this height (m, body origins) of the floor in any
/// frame floats: it cannot be tracked by a robot standing on the floor, and a root quaternion
/// read in the wrong component order makes one (the robot on its side or head, off the floor).
pub const FLOATING_CLIP_M: f64 = 0.3;

/// Refuses a clip with a joint farther than the simulator's target margin (π) outside its range
/// in some frame: no joint-position target could follow it (angles in degrees, or a CSV's
/// joints in another order, give such clips).
fn check_joint_ranges(qpos: &[f64], limits: &[[f64; 2]; NUM_JOINTS]) -> Result<(), String> {
    let margin = crate::env::TARGET_RANGE_MARGIN;
    let mut worst: Option<(f64, usize, usize, f64)> = None;
    let mut joints = [false; NUM_JOINTS];
    for (k, frame) in qpos.chunks_exact(NQ).enumerate() {
        for (j, [lo, hi]) in limits.iter().enumerate() {
            let q = frame[7 + j];
            let excess = (lo - q).max(q - hi);
            if excess > margin {
                joints[j] = true;
                if worst.is_none_or(|w| excess > w.0) {
                    worst = Some((excess, j, k, q));
                }
            }
        }
    }
    match worst {
        None => Ok(()),
        Some((_, j, k, q)) => {
            let [lo, hi] = limits[j];
            Err(format!(
                "{} of its joints leave their ranges by more than π (worst: {} is {q:.3} rad at {:.2} s, range \
                 [{lo:.3}, {hi:.3}]): angles in degrees, or joints in another order than the G1's?",
                joints.iter().filter(|b| **b).count(),
                crate::robot::JOINT_NAMES[j],
                k as f64 * CONTROL_DT
            ))
        }
    }
}

/// Refuses a clip that floats (see [`FLOATING_CLIP_M`]) or stands on its head (the head below
/// both feet in most frames: a root quaternion read in the wrong order turns a standing robot
/// over; no G1 clip is mostly a handstand); `body_pos` holds the world positions of every
/// extended body of every resampled row.
fn check_touches_the_floor(body_pos: &[f64]) -> Result<(), String> {
    let rows = body_pos.len() / (3 * NUM_BODIES_EXT);
    let height = |row: usize, body: usize| body_pos[3 * (row * NUM_BODIES_EXT + body) + 2];
    let foot = |name: &str| BODY_NAMES.iter().position(|b| *b == name).expect("a G1 body");
    let (left, right, head) = (foot("left_ankle_roll_link"), foot("right_ankle_roll_link"), NUM_BODIES);
    let inverted = (0..rows)
        .filter(|&r| height(r, head) < height(r, left).min(height(r, right)))
        .count();
    if rows > 0 && 2 * inverted > rows {
        return Err(format!(
            "it stands on its head: the head is below both feet in {inverted} of its {rows} frames at the control \
             rate: is the root quaternion in another component order (a G1 CSV holds x, y, z, w)?"
        ));
    }
    let lowest = body_pos
        .chunks_exact(3)
        .enumerate()
        .map(|(i, p)| (p[2], i))
        .min_by(|a, b| a.0.total_cmp(&b.0));
    match lowest {
        Some((z, i)) if z > FLOATING_CLIP_M => {
            let (row, body) = (i / NUM_BODIES_EXT, i % NUM_BODIES_EXT);
            let name = BODY_NAMES.get(body).copied().unwrap_or(crate::robot::HEAD_NAME);
            Err(format!(
                "it floats: no body comes within {FLOATING_CLIP_M} m of the floor in any frame (the lowest, {name}, \
                 is {z:.3} m up at {:.2} s): is the root quaternion in another component order (a G1 CSV holds \
                 x, y, z, w), or the root height offset?",
                row as f64 * CONTROL_DT
            ))
        }
        _ => Ok(()),
    }
}

impl Motion {
    /// Why no robot could track this motion as a benchmark's reference, if so: a joint farther
    /// than the simulator's target margin outside its range, a clip that floats or stands on its
    /// head (see [`FLOATING_CLIP_M`]). A benchmark's loading refuses such a reference
    /// (`arena_runner::episode::load_benchmark`) and `arena motion inspect` reports it; other
    /// motions (a rollout scored by `arena metrics track`, a fallen robot; training clips) are
    /// not held to it.
    pub fn reference_problem(&self, limits: &[[f64; 2]; NUM_JOINTS]) -> Option<String> {
        check_joint_ranges(&self.qpos, limits)
            .and_then(|()| check_touches_the_floor(&self.body_pos))
            .err()
    }
}

/// What `arena motion inspect` reports about a clip.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MotionReport {
    pub name: String,
    pub category: String,
    pub frames: usize,
    pub fps: f64,
    pub duration_s: f64,
    pub root_height_min: f64,
    pub root_height_max: f64,
    pub joints: Vec<JointRange>,
    pub limit_violations: Vec<LimitViolation>,
    pub problems: Vec<String>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct JointRange {
    pub joint: String,
    pub min: f64,
    pub max: f64,
    pub lower_limit: f64,
    pub upper_limit: f64,
}

/// A joint that leaves its range in some frames (a warning: clips are still usable).
#[derive(Debug, Clone, serde::Serialize)]
pub struct LimitViolation {
    pub joint: String,
    pub frames: usize,
    pub first_frame: usize,
    pub worst_excess_rad: f64,
}

/// Inspects a clip: ranges, limit violations (warnings) and problems (root below the floor,
/// implausible jumps between frames).
pub fn inspect(clip: &MotionClip, kin: &Kinematics) -> MotionReport {
    let n = clip.num_frames();
    let limits = kin.joint_limits();
    let (mut hmin, mut hmax) = (f64::INFINITY, f64::NEG_INFINITY);
    let mut ranges = [[f64::INFINITY, f64::NEG_INFINITY]; NUM_JOINTS];
    let mut viol: Vec<Option<LimitViolation>> = vec![None; NUM_JOINTS];
    let mut problems = Vec::new();
    let mut max_root_jump = 0.0f64;
    for i in 0..n {
        let f = clip.frame(i);
        hmin = hmin.min(f[2]);
        hmax = hmax.max(f[2]);
        if i > 0 {
            let p = clip.frame(i - 1);
            let d = ((f[0] - p[0]).powi(2) + (f[1] - p[1]).powi(2) + (f[2] - p[2]).powi(2)).sqrt();
            max_root_jump = max_root_jump.max(d * clip.fps);
        }
        for j in 0..NUM_JOINTS {
            let q = f[7 + j];
            ranges[j][0] = ranges[j][0].min(q);
            ranges[j][1] = ranges[j][1].max(q);
            let excess = (limits[j][0] - q).max(q - limits[j][1]);
            if excess > 0.0 {
                let v = viol[j].get_or_insert(LimitViolation {
                    joint: crate::robot::JOINT_NAMES[j].to_string(),
                    frames: 0,
                    first_frame: i,
                    worst_excess_rad: 0.0,
                });
                v.frames += 1;
                v.worst_excess_rad = v.worst_excess_rad.max(excess);
            }
        }
    }
    if hmin < 0.0 {
        problems.push(format!("root goes below the floor (min height {hmin:.3} m)"));
    }
    if max_root_jump > 10.0 {
        problems.push(format!(
            "root moves at up to {max_root_jump:.1} m/s between frames (a jump?)"
        ));
    }
    MotionReport {
        name: clip.name.clone(),
        category: clip.category.clone(),
        frames: n,
        fps: clip.fps,
        duration_s: clip.duration_s(),
        root_height_min: hmin,
        root_height_max: hmax,
        joints: (0..NUM_JOINTS)
            .map(|j| JointRange {
                joint: crate::robot::JOINT_NAMES[j].to_string(),
                min: ranges[j][0],
                max: ranges[j][1],
                lower_limit: limits[j][0],
                upper_limit: limits[j][1],
            })
            .collect(),
        limit_violations: viol.into_iter().flatten().collect(),
        problems,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn analytic_clip(fps: f64, seconds: f64) -> MotionClip {
        let n = (seconds * fps) as usize + 1;
        let mut qpos = Vec::new();
        for i in 0..n {
            let t = i as f64 / fps;
            let mut f = [0.0; NUM_COLUMNS];
            f[0] = 0.3 * t; // constant forward velocity
            f[2] = 0.8;
            let yaw = 0.5 * t; // constant yaw rate
            f[3..7].copy_from_slice(&math::quat_from_yaw(yaw));
            f[7 + 18] = (2.0 * t).sin(); // left elbow
            qpos.extend_from_slice(&f);
        }
        MotionClip {
            name: "analytic".into(),
            category: "test".into(),
            fps,
            qpos,
            witness: None,
        }
    }

    #[test]
    fn resampling_interpolation_and_velocities() {
        let clip = analytic_clip(60.0, 3.0);
        let mut kin = Kinematics::new(&RobotConfig::default()).unwrap();
        let m = Motion::from_clip(&clip, &mut kin).unwrap();
        assert_eq!(m.num_frames, 151);
        assert!((m.length_s - 3.0).abs() < 1e-12);
        // Frame k is the source sampled at k/50 s: lerp of the two neighbouring 60 fps frames.
        let k = 7; // 0.14 s = source frame 8.4
        let (a, b) = (clip.frame(8)[7 + 18], clip.frame(9)[7 + 18]);
        assert!((m.frame_qpos(k)[7 + 18] - (0.6 * a + 0.4 * b)).abs() < 1e-12);
        let mut s = MotionState::default();
        m.state_at(1.0, &mut s);
        assert!((s.qpos[0] - 0.3).abs() < 1e-12);
        // Forward difference over one control step: the derivative at the step's midpoint.
        let expect = 2.0 * (2.0 * (1.0 + 0.5 * CONTROL_DT)).cos();
        assert!(
            (s.dof_vel[18] - expect).abs() < 0.01,
            "dof_vel {} vs {expect}",
            s.dof_vel[18]
        );
        // Constant root velocity and yaw rate survive differencing and smoothing exactly.
        assert!((s.body_vel[0][0] - 0.3).abs() < 1e-9 && s.body_vel[0][1].abs() < 1e-9);
        assert!((s.body_ang_vel[0][2] - 0.5).abs() < 1e-9, "{:?}", s.body_ang_vel[0]);
        // Root rotation between frames is the slerp of the neighbours: yaw 0.5·t.
        m.state_at(1.011, &mut s);
        let yaw = math::heading(&s.qpos[3..7].try_into().unwrap());
        assert!((yaw - 0.5 * 1.011).abs() < 1e-9);
        // The head is 0.35 m above the torso frame.
        let torso = s.body_pos[crate::robot::TORSO_INDEX];
        let head = s.body_pos[NUM_BODIES_EXT - 1];
        assert!((head[2] - torso[2] - 0.35).abs() < 1e-9);
        // qvel: root angular velocity in the root frame (yaw only: unchanged), world linear.
        let qv = s.qvel();
        assert!((qv[5] - 0.5).abs() < 1e-9 && (qv[0] - 0.3).abs() < 1e-9);
        // Past the end, state freezes at the last frame.
        m.state_at(99.0, &mut s);
        assert_eq!(&s.qpos[..], m.frame_qpos(m.num_frames - 1));
    }

    #[test]
    fn a_tiny_fps_is_refused_before_resampling() {
        let mut kin = Kinematics::new(&RobotConfig::default()).unwrap();
        // 7 frames over 6e300 s: the frame count overflowed (and a slightly larger fps asked
        // for terabytes).
        let mut clip = analytic_clip(60.0, 0.1);
        clip.fps = 1e-300;
        let e = Motion::from_clip(&clip, &mut kin).unwrap_err().to_string();
        assert!(
            e.contains("analytic") && e.contains("1e-300 fps") && e.contains("at most 7200 s"),
            "{e}"
        );
    }

    #[test]
    fn gaussian_smoothing_preserves_constants_and_mass() {
        let mut v = vec![2.0; 30];
        gaussian_smooth(&mut v, 1, 2.0);
        assert!(v.iter().all(|x| (x - 2.0).abs() < 1e-12));
        let mut impulse = vec![0.0; 41];
        impulse[20] = 1.0;
        gaussian_smooth(&mut impulse, 1, 2.0);
        assert!((impulse.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((impulse[20] - 0.19947).abs() < 1e-4, "peak of a σ=2 Gaussian");
    }

    /// A root quaternion written w, x, y, z where a G1 CSV holds x, y, z, w, and angles in
    /// degrees, are refused at load, each with its likely cause.
    #[test]
    fn clips_read_in_the_wrong_convention_are_refused() {
        let cfg = RobotConfig::default();
        let mut kin = Kinematics::new(&cfg).unwrap();
        for clip in MotionLibrary::builtin_clips(&cfg).unwrap() {
            let mut misread = clip.clone();
            for k in 0..misread.num_frames() {
                let f = &mut misread.qpos[k * NUM_COLUMNS..(k + 1) * NUM_COLUMNS];
                let [w, x, y, z] = [f[3], f[4], f[5], f[6]];
                f[3..7].copy_from_slice(&[z, w, x, y]);
            }
            let limits = *kin.joint_limits();
            let e = Motion::from_clip(&misread, &mut kin)
                .unwrap()
                .reference_problem(&limits)
                .unwrap();
            assert!(
                (e.contains("it floats") || e.contains("stands on its head")) && e.contains("component order"),
                "{}: {e}",
                clip.name
            );
            let mut degrees = clip.clone();
            for k in 0..degrees.num_frames() {
                for q in &mut degrees.qpos[k * NUM_COLUMNS + 7..(k + 1) * NUM_COLUMNS] {
                    *q = q.to_degrees();
                }
            }
            let e = Motion::from_clip(&degrees, &mut kin)
                .unwrap()
                .reference_problem(&limits)
                .unwrap();
            assert!(
                e.contains("leave their ranges by more than π") && e.contains("degrees"),
                "{}: {e}",
                clip.name
            );
        }
    }

    #[test]
    fn builtin_motions_keep_feet_on_the_floor() {
        let cfg = RobotConfig::default();
        let clips = MotionLibrary::builtin_clips(&cfg).unwrap();
        let mut kin = Kinematics::new(&cfg).unwrap();
        use arena_data::FootKinematics;
        for c in &clips {
            for i in 0..c.num_frames() {
                let feet = kin.feet(c.frame(i));
                assert!(feet.lowest_contact_z.abs() < 1e-9, "{} frame {i}", c.name);
            }
            let report = inspect(c, &kin);
            assert!(
                report.limit_violations.is_empty(),
                "{}: {:?}",
                c.name,
                report.limit_violations
            );
            assert!(report.problems.is_empty(), "{}: {:?}", c.name, report.problems);
            let limits = *kin.joint_limits();
            let motion = Motion::from_clip(c, &mut kin).unwrap();
            assert_eq!(motion.reference_problem(&limits), None, "{}", c.name);
        }
    }
}
