//! Motions as NPZ, in the layout of mjlab / BeyondMimic and holosoma's variant.
//!
//! mjlab / BeyondMimic: `fps`, `joint_pos` [T, 29], `joint_vel` [T, 29], `body_pos_w` [T, B, 3],
//! `body_quat_w` [T, B, 4] (w first), `body_lin_vel_w`, `body_ang_vel_w` [T, B, 3]; bodies in
//! MuJoCo's order, pelvis first; joints in the robot's joint order, unnamed. holosoma adds
//! `joint_names` and `body_names`, and keeps the root in `joint_pos` (7 leading columns).
//!
//! The root pose of each frame is the pelvis's `body_pos_w` / `body_quat_w`. Joints are mapped
//! by name when the file names them; otherwise the G1 joint order is assumed and the body
//! positions are kept as a [`BodyWitness`], which the simulator checks against forward
//! kinematics before the clip is used (a file in Isaac Lab's joint order fails there).

use crate::clip::{BodyWitness, MotionClip, NUM_COLUMNS, NUM_JOINTS, name_and_category};
use crate::g1_csv::QUAT_NORM_TOLERANCE;
use crate::generate::G1_JOINT_NAMES;
use crate::npz::{NpyArray, NpyData, read_npz, write_npz};
use crate::{DataError, Result};
use std::collections::BTreeMap;
use std::path::Path;

/// Columns of the root (position, quaternion) that holosoma keeps ahead of the joints.
const ROOT_COLUMNS: usize = 7;

fn invalid(path: &Path, message: impl Into<String>) -> DataError {
    DataError::Invalid {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn numbers<'a>(path: &Path, arrays: &'a BTreeMap<String, NpyArray>, key: &str) -> Result<(&'a [usize], &'a [f64])> {
    let a = arrays.get(key).ok_or_else(|| {
        invalid(
            path,
            format!(
                "no {key:?} array (an mjlab / BeyondMimic motion has fps, joint_pos, joint_vel, body_pos_w, body_quat_w, …; it holds: {})",
                arrays.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        )
    })?;
    match &a.data {
        NpyData::Numbers(v) => Ok((&a.shape, v)),
        NpyData::Strings(_) => Err(invalid(path, format!("{key}: expected numbers, found strings"))),
    }
}

fn names(path: &Path, arrays: &BTreeMap<String, NpyArray>, key: &str) -> Result<Option<Vec<String>>> {
    match arrays.get(key).map(|a| &a.data) {
        None => Ok(None),
        Some(NpyData::Strings(v)) => Ok(Some(v.clone())),
        Some(NpyData::Numbers(_)) => Err(invalid(path, format!("{key}: expected strings, found numbers"))),
    }
}

/// Reads an NPZ motion into a clip at the file's own frame rate.
pub fn read_npz_motion(path: &Path) -> Result<MotionClip> {
    let arrays = read_npz(path)?;
    let (_, fps) = numbers(path, &arrays, "fps")?;
    let fps = match fps {
        [f] if f.is_finite() && *f > 0.0 => *f,
        other => {
            return Err(invalid(
                path,
                format!("fps: expected one positive number, got {other:?}"),
            ));
        }
    };
    let (shape, joint_pos) = numbers(path, &arrays, "joint_pos")?;
    let &[frames, width] = shape else {
        return Err(invalid(
            path,
            format!("joint_pos: expected shape [T, joints], got {shape:?}"),
        ));
    };
    if frames == 0 {
        return Err(invalid(path, "joint_pos has no frames"));
    }
    let (bshape, body_pos) = numbers(path, &arrays, "body_pos_w")?;
    let (qshape, body_quat) = numbers(path, &arrays, "body_quat_w")?;
    let num_bodies = match (bshape, qshape) {
        (&[t, b, 3], &[tq, bq, 4]) if t == frames && tq == frames && b == bq && b > 0 => b,
        _ => {
            return Err(invalid(
                path,
                format!(
                    "body_pos_w {bshape:?} and body_quat_w {qshape:?} must be [T, B, 3] and [T, B, 4] with T = {frames} (joint_pos's frames)"
                ),
            ));
        }
    };
    let body_names = names(path, &arrays, "body_names")?;
    let pelvis = match &body_names {
        Some(list) => {
            if list.len() != num_bodies {
                return Err(invalid(
                    path,
                    format!("body_names lists {} bodies, body_pos_w has {num_bodies}", list.len()),
                ));
            }
            list.iter()
                .position(|n| n == "pelvis")
                .ok_or_else(|| invalid(path, "body_names has no \"pelvis\" (the root of the G1)"))?
        }
        None => 0,
    };
    let joint_names = names(path, &arrays, "joint_names")?;
    let columns = joint_columns(path, width, joint_names.as_deref())?;
    let mut qpos = Vec::with_capacity(frames * NUM_COLUMNS);
    // Every value read, not only those qpos takes: the witness compares body positions too.
    for (key, values) in [
        ("joint_pos", joint_pos),
        ("body_pos_w", body_pos),
        ("body_quat_w", body_quat),
    ] {
        if let Some(i) = values.iter().position(|v| !v.is_finite()) {
            let frame = i / (values.len() / frames);
            return Err(invalid(path, format!("{key}: frame {frame} holds a non-finite value")));
        }
    }
    for k in 0..frames {
        let b = k * num_bodies + pelvis;
        qpos.extend_from_slice(&body_pos[3 * b..3 * b + 3]);
        // As the CSV reader: a unit quaternion (within the stored precision), normalised. A
        // zero one would pass the witness (MuJoCo takes it as the identity) and then make NaN
        // of every resampled frame.
        let q = &body_quat[4 * b..4 * b + 4];
        let norm = q.iter().map(|v| v * v).sum::<f64>().sqrt();
        if (norm - 1.0).abs() > QUAT_NORM_TOLERANCE {
            return Err(invalid(
                path,
                format!(
                    "body_quat_w: the root's quaternion of frame {k} has norm {norm:.6}; expected a unit quaternion"
                ),
            ));
        }
        qpos.extend(q.iter().map(|v| v / norm));
        let row = &joint_pos[k * width..(k + 1) * width];
        qpos.extend(columns.iter().map(|&c| row[c]));
    }
    if let Some(ratio) = velocity_to_fps_ratio(&arrays, joint_pos, width, fps) {
        return Err(invalid(
            path,
            format!(
                "its joint_vel is {ratio:.2}× the rate joint_pos changes at its fps {fps}: the frames look \
                 {:.4} s apart (fps {:.1}), not 1/{fps} s; is fps right?",
                1.0 / (fps * ratio),
                fps * ratio
            ),
        ));
    }
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("motion");
    let (name, category) = name_and_category(stem);
    Ok(MotionClip {
        name,
        category,
        fps,
        qpos,
        witness: Some(Box::new(BodyWitness {
            body_names,
            num_bodies,
            positions: body_pos.to_vec(),
            joint_names_given: joint_names.is_some(),
        })),
    })
}

/// The ratio of a file's `joint_vel` to the rate its `joint_pos` changes at `fps` (central
/// differences), when the two clearly disagree: `None` when they agree within a quarter (the
/// velocity conventions of the field differ by far less: central or one-sided differences), or
/// when the file has no `joint_vel` of joint_pos's shape, or one that does not follow
/// joint_pos at any rate (zeros, noise), or the joints do not move. A file whose velocities are
/// twice the differences at its fps was sampled at twice the rate it declares.
fn velocity_to_fps_ratio(
    arrays: &BTreeMap<String, NpyArray>,
    joint_pos: &[f64],
    width: usize,
    fps: f64,
) -> Option<f64> {
    let NpyData::Numbers(vel) = &arrays.get("joint_vel")?.data else {
        return None;
    };
    if vel.len() != joint_pos.len() || width == 0 {
        return None;
    }
    let frames = joint_pos.len() / width;
    let (mut vd, mut dd, mut vv) = (0.0, 0.0, 0.0);
    for k in 1..frames.saturating_sub(1) {
        for j in 0..width {
            let d = (joint_pos[(k + 1) * width + j] - joint_pos[(k - 1) * width + j]) * fps / 2.0;
            let v = vel[k * width + j];
            if d.is_finite() && v.is_finite() {
                vd += v * d;
                dd += d * d;
                vv += v * v;
            }
        }
    }
    // Velocities that follow the differences closely (cosine ≥ 0.9) at a clearly other scale.
    if dd <= 1e-9 || vv <= 1e-9 || vd / (dd * vv).sqrt() < 0.9 {
        return None;
    }
    let ratio = vd / dd;
    (!(0.8..=1.25).contains(&ratio)).then_some(ratio)
}

/// The `joint_pos` column of each G1 joint, in G1 order.
fn joint_columns(path: &Path, width: usize, names: Option<&[String]>) -> Result<Vec<usize>> {
    match names {
        Some(names) => {
            let offset = match width.checked_sub(names.len()) {
                Some(0) => 0,
                Some(ROOT_COLUMNS) => ROOT_COLUMNS,
                _ => {
                    return Err(invalid(
                        path,
                        format!(
                            "joint_pos has {width} columns but joint_names lists {} joints (expected as many, or 7 root columns more)",
                            names.len()
                        ),
                    ));
                }
            };
            let unknown: Vec<&str> = names
                .iter()
                .filter(|n| !G1_JOINT_NAMES.contains(&n.as_str()))
                .map(String::as_str)
                .collect();
            if !unknown.is_empty() {
                return Err(invalid(
                    path,
                    format!("joint_names has joints the G1 (29 DOF) lacks: {}", unknown.join(", ")),
                ));
            }
            G1_JOINT_NAMES
                .iter()
                .map(|g| {
                    names
                        .iter()
                        .position(|n| n == g)
                        .map(|c| c + offset)
                        .ok_or_else(|| invalid(path, format!("joint_names lacks {g}")))
                })
                .collect()
        }
        None => match width {
            NUM_JOINTS => Ok((0..NUM_JOINTS).collect()),
            w if w == NUM_JOINTS + ROOT_COLUMNS => Ok((ROOT_COLUMNS..w).collect()),
            w => Err(invalid(
                path,
                format!(
                    "the joint order cannot be established: joint_pos has {w} columns and the file has no joint_names (expected 29 joints in the G1 order, or 7 root columns and 29 joints)"
                ),
            )),
        },
    }
}

/// A motion in the mjlab layout, at its own frame rate, with its bodies from forward
/// kinematics (MuJoCo body order of the G1, pelvis first). Velocities are world-frame.
#[derive(Debug, Clone, PartialEq)]
pub struct NpzMotionOut {
    pub fps: f64,
    pub frames: usize,
    /// frames × 29 (G1 order).
    pub joint_pos: Vec<f64>,
    pub joint_vel: Vec<f64>,
    pub body_names: Vec<String>,
    /// frames × bodies × 3 / × 4 (w first) / × 3 / × 3.
    pub body_pos_w: Vec<f64>,
    pub body_quat_w: Vec<f64>,
    pub body_lin_vel_w: Vec<f64>,
    pub body_ang_vel_w: Vec<f64>,
}

/// Writes a motion as mjlab-layout NPZ (float32), with `joint_names` and `body_names` added so
/// that any reader can check the order.
pub fn write_npz_motion(path: &Path, m: &NpzMotionOut) -> Result<()> {
    let (t, b) = (m.frames, m.body_names.len());
    let checks = [
        ("joint_pos", m.joint_pos.len(), t * NUM_JOINTS),
        ("joint_vel", m.joint_vel.len(), t * NUM_JOINTS),
        ("body_pos_w", m.body_pos_w.len(), t * b * 3),
        ("body_quat_w", m.body_quat_w.len(), t * b * 4),
        ("body_lin_vel_w", m.body_lin_vel_w.len(), t * b * 3),
        ("body_ang_vel_w", m.body_ang_vel_w.len(), t * b * 3),
    ];
    for (name, got, want) in checks {
        if got != want {
            return Err(invalid(path, format!("{name}: {got} values, expected {want}")));
        }
    }
    write_npz(
        path,
        &[
            // Shape (1,), as mjlab's converter writes it.
            ("fps", NpyArray::f32(vec![1], vec![m.fps])),
            ("joint_pos", NpyArray::f32(vec![t, NUM_JOINTS], m.joint_pos.clone())),
            ("joint_vel", NpyArray::f32(vec![t, NUM_JOINTS], m.joint_vel.clone())),
            ("body_pos_w", NpyArray::f32(vec![t, b, 3], m.body_pos_w.clone())),
            ("body_quat_w", NpyArray::f32(vec![t, b, 4], m.body_quat_w.clone())),
            ("body_lin_vel_w", NpyArray::f32(vec![t, b, 3], m.body_lin_vel_w.clone())),
            ("body_ang_vel_w", NpyArray::f32(vec![t, b, 3], m.body_ang_vel_w.clone())),
            (
                "joint_names",
                NpyArray::strings(G1_JOINT_NAMES.iter().map(|s| s.to_string()).collect()),
            ),
            ("body_names", NpyArray::strings(m.body_names.clone())),
        ],
    )
}
