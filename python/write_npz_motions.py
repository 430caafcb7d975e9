#!/usr/bin/env python3
"""Writes NPZ motions the way mjlab / BeyondMimic and holosoma lay them out, independently of
the arena's code: joint angles chosen here, bodies by MuJoCo's forward kinematics (PyPI
mujoco) of the model written by `arena sim export-model`. Used by runner/tests/motion_npz.rs.

    write_npz_motions.py MODEL.xml OUT_DIR

Writes OUT_DIR/{mjlab,holosoma,isaac_order}.npz and OUT_DIR/truth.json (the qpos frames in the
G1 joint order: root position, root quaternion wxyz, 29 joints).
  mjlab.npz        fps, joint_pos / joint_vel [T, 29] in the G1 (MuJoCo) order, body_* [T, 30, …]
                   in MuJoCo body order, pelvis first; no names
  holosoma.npz     the same plus joint_names / body_names, joints in a shuffled order, the root
                   kept in joint_pos (7 leading columns), bodies reversed (pelvis last)
  isaac_order.npz  like mjlab.npz but its joints in another order and unnamed: must be refused
"""
import json
import sys
from pathlib import Path

import mujoco
import numpy as np

FPS = 30.0
FRAMES = 61


def main(model_path, out_dir):
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    m = mujoco.MjModel.from_xml_path(model_path)
    d = mujoco.MjData(m)
    joint_names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, j) for j in range(1, m.njnt)]
    body_names = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_BODY, b) for b in range(1, m.nbody)]
    assert len(joint_names) == 29 and len(body_names) == 30, (len(joint_names), len(body_names))
    t = np.arange(FRAMES) / FPS
    qpos = np.zeros((FRAMES, 36))
    qpos[:, 0] = 0.1 * t
    qpos[:, 1] = 0.05 * np.sin(t)
    qpos[:, 2] = 0.78 + 0.02 * np.sin(2 * t)
    yaw = 0.4 * t
    qpos[:, 3] = np.cos(yaw / 2)
    qpos[:, 6] = np.sin(yaw / 2)
    for j in range(29):
        lo, hi = m.jnt_range[j + 1]
        mid, amp = (lo + hi) / 2, (hi - lo) / 4
        qpos[:, 7 + j] = mid + amp * np.sin(1.3 * t + 0.7 * j)
    body_pos = np.zeros((FRAMES, 30, 3))
    body_quat = np.zeros((FRAMES, 30, 4))

    def kinematics():
        for k in range(FRAMES):
            d.qpos[:] = qpos[k]
            mujoco.mj_kinematics(m, d)
            body_pos[k] = d.xpos[1:]
            body_quat[k] = d.xquat[1:]

    # Lowered until its lowest body comes within 5 cm of the floor: a clip that floats is refused.
    kinematics()
    qpos[:, 2] -= body_pos[:, :, 2].min() - 0.05
    kinematics()
    joint_pos = qpos[:, 7:]
    joint_vel = np.gradient(joint_pos, 1 / FPS, axis=0)
    lin = np.gradient(body_pos, 1 / FPS, axis=0)
    ang = np.zeros_like(lin)
    f32 = lambda a: np.asarray(a, dtype=np.float32)
    common = dict(body_lin_vel_w=f32(lin), body_ang_vel_w=f32(ang))
    np.savez(out / "mjlab.npz", fps=np.array([FPS], np.float32), joint_pos=f32(joint_pos),
             joint_vel=f32(joint_vel), body_pos_w=f32(body_pos), body_quat_w=f32(body_quat), **common)
    order = np.random.default_rng(7).permutation(29)
    rev = list(range(29, -1, -1))
    np.savez_compressed(
        out / "holosoma.npz", fps=np.float32(FPS),
        joint_pos=f32(np.concatenate([qpos[:, :7], joint_pos[:, order]], axis=1)),
        joint_vel=f32(joint_vel[:, order]), joint_names=np.array([joint_names[i] for i in order]),
        body_names=np.array([body_names[b] for b in rev]), body_pos_w=f32(body_pos[:, rev]),
        body_quat_w=f32(body_quat[:, rev]), body_lin_vel_w=f32(lin[:, rev]), body_ang_vel_w=f32(ang[:, rev]))
    np.savez(out / "isaac_order.npz", fps=np.array([FPS], np.float32), joint_pos=f32(joint_pos[:, order]),
             joint_vel=f32(joint_vel[:, order]), body_pos_w=f32(body_pos), body_quat_w=f32(body_quat), **common)
    (out / "truth.json").write_text(json.dumps({"fps": FPS, "qpos": qpos.tolist()}))
    print(f"wrote 3 motions of {FRAMES} frames to {out}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
