#!/usr/bin/env python3
"""Independent cross-check of MimicArena's control semantics.

Loads the MJCF written by `arena sim export-model`, takes the initial state from the first row
of an `arena sim rollout` output (qpos CSV + qvel CSV), and re-implements the PD loop from the
issue text with PyPI mujoco==3.17.0:

    a     = the action as a 32-bit float (as actions travel), widened to 64 bits
    a5    = clip(5 a, -5, 5)
    q_tgt = q0 + a5 * 0.25 * effort / kp
    every 0.005 s substep (4 per 50 Hz action): tau = clip(kp (q_tgt - q) - kd qdot, -effort, effort)

Then compares every control step's qpos with the rollout's. Exits non-zero when the largest
difference exceeds the tolerance.

Usage: crosscheck_pd.py MODEL.xml ACTIONS.csv ROLLOUT_QPOS.csv ROLLOUT_QVEL.csv [--tol 1e-9]
"""
import sys
import numpy as np
import mujoco

# BFM-Zero base gain set (g1_29dof.yaml), G1 joint order.
KP_HIP, KD_HIP = 99.09843, 6.3088
KP_YAW, KD_YAW = 40.17924, 2.55789
KP_ANK, KD_ANK = 28.50125, 1.81445
KP_ARM, KD_ARM = 14.25062, 0.90722
KP_WR, KD_WR = 16.77833, 1.06814
LEG_KP = [KP_HIP, KP_HIP, KP_YAW, KP_HIP, KP_ANK, KP_ANK]
LEG_KD = [KD_HIP, KD_HIP, KD_YAW, KD_HIP, KD_ANK, KD_ANK]
ARM_KP = [KP_ARM] * 5 + [KP_WR] * 2
ARM_KD = [KD_ARM] * 5 + [KD_WR] * 2
KP = np.array(LEG_KP * 2 + [KP_YAW, KP_ANK, KP_ANK] + ARM_KP * 2)
KD = np.array(LEG_KD * 2 + [KD_YAW, KD_ANK, KD_ANK] + ARM_KD * 2)
EFFORT = np.array([88, 88, 88, 139, 50, 50] * 2 + [88, 50, 50] + [25] * 5 + [5, 5] + [25] * 5 + [5, 5], float)
Q0 = np.array([-0.1, 0, 0, 0.3, -0.2, 0] * 2 + [0] * 17, float)


def main(argv):
    tol = 1e-9
    if "--tol" in argv:
        i = argv.index("--tol")
        tol = float(argv[i + 1])
        del argv[i:i + 2]
    model_path, actions_path, qpos_path, qvel_path = argv[1:5]
    model = mujoco.MjModel.from_xml_path(model_path)
    data = mujoco.MjData(model)
    # Actions travel as 32-bit floats (the wire format and the env's action batch are f32).
    actions = np.loadtxt(actions_path, delimiter=",", ndmin=2).astype(np.float32).astype(np.float64)
    ref_q = np.loadtxt(qpos_path, delimiter=",", ndmin=2)
    ref_v = np.loadtxt(qvel_path, delimiter=",", ndmin=2)
    assert model.opt.timestep == 0.005, model.opt.timestep
    mujoco.mj_resetData(model, data)
    data.qpos[:] = ref_q[0, 1:]
    data.qvel[:] = ref_v[0, 1:]
    worst = 0.0
    for k in range(1, ref_q.shape[0]):
        a5 = np.clip(5.0 * actions[k - 1], -5.0, 5.0)
        q_tgt = Q0 + a5 * 0.25 * EFFORT / KP
        for _ in range(4):
            tau = KP * (q_tgt - data.qpos[7:]) - KD * data.qvel[6:]
            data.ctrl[:] = np.clip(tau, -EFFORT, EFFORT)
            mujoco.mj_step(model, data)
        worst = max(worst, float(np.abs(data.qpos - ref_q[k, 1:]).max()))
        assert abs(data.time - (ref_q[k, 0] - ref_q[0, 0])) < 1e-9, (data.time, ref_q[k, 0])
    steps = ref_q.shape[0] - 1
    print(f"cross-check: {steps} control steps, max |qpos_python - qpos_arena| = {worst:.3e} (tol {tol:g})")
    return 0 if worst <= tol and steps > 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
