#!/usr/bin/env python3
"""Independent check of the robot-interface observation groups and the joint-position torque law.

Reads an episode recorded by `runner/tests/robot_interface.rs` (JSON: the model, the session's
gains, the first state, each control step's command of 29 targets + 29 feed-forward torques,
the observation rows the arena sent, the reference at each step) and recomputes everything with
PyPI mujoco from the definitions in docs/protocol.md §5:

    every 0.005 s substep (4 per control step):
        tau = clip(kp (q* - q) - kd qdot + tau_ff, -effort, effort)
    imu        = pelvis xquat, pelvis angular velocity (local), the accelerometer sensor at
                 imu_in_pelvis as the last substep's mj_step computed it
    imu_torso  = the same for torso_link and imu_in_torso
    motors     = q, qdot, the last substep's tau
    base_lin_vel = pelvis linear velocity in the pelvis frame (mj_objectVelocity, local)
    motion_command = reference joint positions and velocities (the velocities central differences, as mjlab's motion files hold them)
    motion_anchor_* = the reference anchor from FK of the reference qpos, relative to the robot's

Observations travel as 32-bit floats: values are compared with a tolerance of 1e-6 relative to
max(1, |value|). Exits non-zero on the first mismatch, naming group, step and index.

Usage: check_robot_interface.py EPISODE.json
"""
import json
import sys

import mujoco
import numpy as np

DECIMATION = 4
TOL = 1e-6


def body_velocity_local(m, d, body):
    """(angular, linear) velocity of a body's frame origin in its own frame (mjOBJ_XBODY: the
    body frame; mjOBJ_BODY would be its inertial frame)."""
    res = np.zeros(6)
    mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_XBODY, body, res, 1)
    return res[:3], res[3:]


def expected_groups(m, d, ref_d, ep, step, tau):
    pelvis = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "pelvis")
    torso = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, "torso_link")
    anchor = mujoco.mj_name2id(m, mujoco.mjtObj.mjOBJ_BODY, ep["anchor_body"])
    acc_pelvis = d.sensor("imu_in_pelvis_accelerometer").data.copy()
    acc_torso = d.sensor("imu_in_torso_accelerometer").data.copy()
    w_p, v_p = body_velocity_local(m, d, pelvis)
    w_t, _ = body_velocity_local(m, d, torso)
    ref_qpos = np.array(ep["reference_qpos"][step])
    ref_dq = np.array(ep["reference_joint_vel"][step])
    ref_d.qpos[:] = ref_qpos
    mujoco.mj_kinematics(m, ref_d)
    r_robot = d.xmat[anchor].reshape(3, 3)
    r_ref = ref_d.xmat[anchor].reshape(3, 3)
    rel = r_robot.T @ r_ref
    return {
        "imu": np.concatenate([d.xquat[pelvis], w_p, acc_pelvis]),
        "imu_torso": np.concatenate([d.xquat[torso], w_t, acc_torso]),
        "motors": np.concatenate([d.qpos[7:], d.qvel[6:], tau]),
        "base_lin_vel": v_p,
        "motion_command": np.concatenate([ref_qpos[7:], ref_dq]),
        "motion_anchor_pos_b": r_robot.T @ (ref_d.xpos[anchor] - d.xpos[anchor]),
        "motion_anchor_ori_b": rel[:, :2].reshape(-1),
        "motion_anchor_pose_w": np.concatenate([ref_d.xpos[anchor], ref_d.xquat[anchor]]),
    }


def compare(step, sent_row, groups, expected):
    worst = 0.0
    for name, start, end in groups:
        sent = np.array(sent_row[start:end], dtype=np.float64)
        want = expected[name]
        err = np.abs(sent - want) / np.maximum(1.0, np.abs(want))
        worst = max(worst, float(err.max()))
        if err.max() > TOL:
            i = int(err.argmax())
            print(f"MISMATCH step {step} group {name}[{i}]: sent {sent[i]!r}, expected {want[i]!r}")
            sys.exit(1)
    return worst


def main(path):
    ep = json.load(open(path))
    m = mujoco.MjModel.from_xml_string(ep["model_xml"])
    d = mujoco.MjData(m)
    ref_d = mujoco.MjData(m)
    kp, kd, effort = (np.array(ep[k]) for k in ("kp", "kd", "effort"))
    d.qpos[:] = ep["qpos0"]
    d.qvel[:] = ep["qvel0"]
    d.ctrl[:] = 0.0
    mujoco.mj_forward(m, d)
    groups = ep["groups"]
    rows = ep["rows"]
    logged = np.array(ep["torque_log"]).reshape(-1, 29)
    tau = np.zeros(29)
    worst = compare(0, rows[0], groups, expected_groups(m, d, ref_d, ep, 0, tau))
    worst_tau = 0.0
    for k, command in enumerate(ep["commands"]):
        command = np.array(command, dtype=np.float32).astype(np.float64)
        target, feedforward = command[:29], command[29:]
        for s in range(DECIMATION):
            q, qd = d.qpos[7:], d.qvel[6:]
            tau = np.clip(kp * (target - q) - kd * qd + feedforward, -effort, effort)
            diff = np.abs(tau - logged[k * DECIMATION + s]).max()
            worst_tau = max(worst_tau, float(diff))
            if diff > 1e-9:
                print(f"MISMATCH torque at step {k} substep {s}: {diff:.3e} N·m")
                sys.exit(1)
            d.ctrl[:] = tau
            mujoco.mj_step(m, d)
        # mj_step leaves the kinematics of the state before its integration: bring positions
        # and velocities up to the new state (the accelerometers keep the last substep's values).
        mujoco.mj_step1(m, d)
        worst = max(worst, compare(k + 1, rows[k + 1], groups, expected_groups(m, d, ref_d, ep, k + 1, tau)))
    print(
        f"all groups match over {len(rows)} observations (largest relative difference {worst:.2e}); "
        f"torque law matches over {len(logged)} substeps (largest difference {worst_tau:.2e} N·m)"
    )


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
