#!/usr/bin/env python3
"""GPU worker (MJX or MuJoCo Warp) vs MuJoCo C: divergence of the same PD rollout.

Spawns gpu_worker.py exactly as the Rust supervisor does (shared-memory file, one JSON init
line, then `sync` / `step` commands on stdin) and replays the same control loop with the
`mujoco` Python bindings (C library, float64) as the reference: tau = clip(kp (target - q) -
kd qdot, -effort, effort) before each of 4 mj_step substeps, then mj_kinematics, mj_comPos,
mj_comVel, as MimicArena's CPU backend does.

Every env starts standing (root at 0.8 m, joints at the default pose, at rest) and tracks the
default pose plus a small per-joint sinusoid. Odd envs run with domain-randomised parameters
(masses, torso CoM, friction, gains); env 2 (mod 4) is pushed at control step 5. The table
gives, per control step, the largest absolute difference over all envs and elements.

Usage: divergence.py [--impl jax|warp] [--x64] [--steps 250] [--envs 4] [--bench STEPS]
                     [--python PYTHON]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time

import mujoco
import numpy as np

import gpu_worker

HERE = os.path.dirname(os.path.abspath(__file__))
MJCF = os.path.join(HERE, "..", "assets", "g1", "g1_29dof.xml")
NQ, NV, NJ, NB = 36, 35, 29, 30
TORSO_BODY = 16
DECIMATION = 4
PUSH_STEP = 5

# MimicArena's base gain set and default pose (simulator/src/robot.rs), G1 joint order.
_HIP, _YAW, _ANK, _ARM, _WR = (99.09843, 6.3088), (40.17924, 2.55789), (28.50125, 1.81445), \
    (14.25062, 0.90722), (16.77833, 1.06814)
_GAINS = [_HIP, _HIP, _YAW, _HIP, _ANK, _ANK] * 2 + [_YAW, _ANK, _ANK] + ([_ARM] * 5 + [_WR] * 2) * 2
KP = np.array([g[0] for g in _GAINS])
KD = np.array([g[1] for g in _GAINS])
EFFORT = np.array([88, 88, 88, 139, 50, 50] * 2 + [88, 50, 50] + ([25] * 5 + [5, 5]) * 2, float)
Q0 = np.array([-0.1, 0, 0, 0.3, -0.2, 0] * 2 + [0] * 17, float)


def map_shm(path, n, x64):
    """Creates the shared-memory file and maps it with the worker's own layout."""
    with open(path, "wb") as f:
        f.truncate(gpu_worker.shm_size(n, x64))
    return gpu_worker.map_shm(path, n, x64)[1]


class Worker:
    """The worker process, driven through the protocol."""

    def __init__(self, python, shm, init):
        worker = os.path.join(HERE, "gpu_worker.py")
        self.proc = subprocess.Popen([python, worker], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.proc.stdin.write(json.dumps({**init, "shm": shm}) + "\n")
        self.proc.stdin.flush()
        self.ready = json.loads(self.proc.stdout.readline())
        if "error" in self.ready:
            sys.exit(f"worker init failed: {self.ready['error']}")

    def send(self, cmd):
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline().strip()
        if reply != "ok":
            sys.exit(f"worker replied {reply!r} to {cmd}")

    def close(self):
        self.send("close")
        self.proc.wait(timeout=30)


def scenario(n, steps, seed=0):
    """Per-env initial state, DR params (NaN friction = model's), targets [steps, N, 29],
    pushes {env: (dv, dw)}."""
    rng = np.random.default_rng(seed)
    qpos = np.zeros((n, NQ))
    qpos[:, 2], qpos[:, 3], qpos[:, 7:] = 0.8, 1.0, Q0
    qvel = np.zeros((n, NV))
    params = np.zeros((n, NB + 6))
    params[:, :NB], params[:, NB + 3], params[:, NB + 4:] = 1.0, np.nan, 1.0
    for e in range(1, n, 2):
        params[e, :NB] = rng.uniform(0.95, 1.05, NB)
        params[e, NB:NB + 3] = rng.uniform(-0.02, 0.02, 3)
        params[e, NB + 3] = rng.uniform(0.5, 1.25)
        params[e, NB + 4:] = rng.uniform(0.75, 1.25, 2)
    t = np.arange(1, steps + 1)[:, None, None] * DECIMATION * 0.005
    phase = rng.uniform(0, 2 * np.pi, (1, n, NJ))
    targets = Q0 + 0.1 * np.sin(2 * np.pi * 1.5 * t + phase)
    pushes = {e: (np.array([0.3, -0.2, 0.0]), np.array([0.2, -0.3, 0.4])) for e in range(2, n, 4)}
    return qpos, qvel, params, targets, pushes


class Reference:
    """One MuJoCo C model + data per env, stepped like MimicArena's CPU backend."""

    def __init__(self, qpos, qvel, params):
        self.envs = []
        for e in range(qpos.shape[0]):
            m = mujoco.MjModel.from_xml_path(MJCF)
            p = params[e]
            m.body_mass[1:] *= p[:NB]
            m.body_ipos[TORSO_BODY] += p[NB:NB + 3]
            if not math.isnan(p[NB + 3]):
                m.geom_friction[:, 0] = p[NB + 3]
            d = mujoco.MjData(m)
            mujoco.mj_setConst(m, d)
            mujoco.mj_resetData(m, d)
            d.qpos[:], d.qvel[:] = qpos[e], qvel[e]
            mujoco.mj_forward(m, d)
            self.envs.append((m, d, KP * p[NB + 4], KD * p[NB + 5]))

    def push(self, e, dv, dw):
        m, d, _, _ = self.envs[e]
        dw_local = np.zeros(3)
        mujoco.mju_rotVecQuat(dw_local, dw, d.qpos[3:7] * [1, -1, -1, -1])
        d.qvel[0:3] += dv
        d.qvel[3:6] += dw_local

    def step(self, targets):
        for e, (m, d, kp, kd) in enumerate(self.envs):
            for _ in range(DECIMATION):
                d.ctrl[:] = np.clip(kp * (targets[e] - d.qpos[7:]) - kd * d.qvel[6:], -EFFORT, EFFORT)
                mujoco.mj_step(m, d)
            mujoco.mj_kinematics(m, d)
            mujoco.mj_comPos(m, d)
            mujoco.mj_comVel(m, d)

    def read(self):
        out = {k: [] for k in ("qpos", "qvel", "torque", "body_pos", "body_quat", "body_lin_vel",
                               "body_ang_vel", "contact_force")}
        for m, d, _, _ in self.envs:
            out["qpos"].append(d.qpos.copy())
            out["qvel"].append(d.qvel.copy())
            out["torque"].append(d.ctrl.copy())
            out["body_pos"].append(d.xpos[1:].copy())
            out["body_quat"].append(d.xquat[1:].copy())
            vel = np.zeros((NB, 6))
            for b in range(NB):
                mujoco.mj_objectVelocity(m, d, mujoco.mjtObj.mjOBJ_BODY, b + 1, vel[b], 0)
            out["body_lin_vel"].append(vel[:, 3:])
            out["body_ang_vel"].append(vel[:, :3])
            cf = np.zeros((NB + 1, 3))
            f6 = np.zeros(6)
            for i in range(d.ncon):
                c = d.contact[i]
                mujoco.mj_contactForce(m, d, i, f6)
                world = c.frame.reshape(3, 3).T @ f6[:3]
                cf[m.geom_bodyid[c.geom[1]]] += world
                cf[m.geom_bodyid[c.geom[0]]] -= world
            out["contact_force"].append(cf[1:])
        return {k: np.array(v) for k, v in out.items()}


def main():
    ap = argparse.ArgumentParser(description="GPU worker vs MuJoCo C divergence")
    ap.add_argument("--impl", default="jax", choices=["jax", "warp"],
                    help="MJX's JAX implementation or MuJoCo Warp (float32 only)")
    ap.add_argument("--x64", action="store_true", help="float64 in JAX")
    ap.add_argument("--steps", type=int, default=250, help="control steps (default 250)")
    ap.add_argument("--envs", type=int, default=4, help="environments (default 4)")
    ap.add_argument("--bench", type=int, default=0, metavar="STEPS",
                    help="afterwards, time STEPS more control steps of all envs")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the worker")
    ap.add_argument("--no-contact-forces", action="store_true")
    args = ap.parse_args()
    n = args.envs

    qpos, qvel, params, targets, pushes = scenario(n, args.steps)
    tmp = tempfile.mkdtemp(prefix="mjx-div-")
    shm = os.path.join(tmp, "shm.bin")
    v = map_shm(shm, n, args.x64)
    init = {"mjcf": os.path.abspath(MJCF), "num_envs": n, "kp": KP.tolist(), "kd": KD.tolist(),
            "effort": EFFORT.tolist(), "decimation": DECIMATION, "torso_body": TORSO_BODY,
            "device": "cpu", "impl": args.impl, "x64": args.x64,
            "contact_forces": not args.no_contact_forces}
    t0 = time.perf_counter()
    worker = Worker(args.python, shm, init)
    print(f"worker: {json.dumps(worker.ready)} (start to ready {time.perf_counter() - t0:.1f} s)")

    v["params"][:] = params
    v["params_flag"][:] = 1
    v["reset_qpos"][:], v["reset_qvel"][:] = qpos, qvel
    v["reset_flag"][:] = 1
    worker.send("sync")
    assert not v["params_flag"].any() and not v["reset_flag"].any(), "flags not cleared"
    ref = Reference(qpos, qvel, params)

    fields = ("qpos", "qvel", "body_pos", "body_quat", "body_lin_vel", "body_ang_vel",
              "contact_force", "torque")
    checkpoints = sorted({0, *(k for k in (1, 10, 50, 250) if k <= args.steps), args.steps})
    rows = []

    def compare(k):
        r = ref.read()
        diffs = [float(np.max(np.abs(v[f] - r[f]))) for f in fields]
        height = f"{r['qpos'][:, 2].min():.3f}"
        rows.append((k, *diffs, height, int(v["failed"].max())))

    compare(0)
    inputs = v["inputs"]
    inputs[:, NJ + 6] = 1  # every env goes
    for k in range(args.steps):
        if k == PUSH_STEP:
            for e, (dv, dw) in pushes.items():
                inputs[e, NJ:NJ + 6] = np.concatenate([dv, dw])
                ref.push(e, dv, dw)
        inputs[:, :NJ] = targets[k]
        worker.send("step")
        inputs[:, NJ:NJ + 6] = 0  # a push goes with one command
        ref.step(targets[k])
        if k + 1 in checkpoints:
            compare(k + 1)
    assert np.allclose(v["time"], args.steps * DECIMATION * 0.005), v["time"]

    prec = "float64" if args.x64 else "float32"
    name = "MJX" if args.impl == "jax" else "MuJoCo Warp"
    print(f"\nmax |{name} ({prec}) - MuJoCo C (float64)| over {n} envs\n")
    print("| step | qpos | qvel | body_pos (m) | body_quat | body_lin_vel (m/s) | body_ang_vel (rad/s) "
          "| contact_force (N) | torque (N m) | min root z (C) | failed |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for k, *d, h, f in rows:
        print(f"| {k} | " + " | ".join(f"{x:.2e}" for x in d) + f" | {h} | {f} |")

    if args.bench:
        inputs[:, :NJ] = Q0
        worker.send("step")
        t0 = time.perf_counter()
        for _ in range(args.bench):
            worker.send("step")
        dt = time.perf_counter() - t0
        print(f"\nbench: {args.bench} control steps of {n} envs in {dt:.2f} s: "
              f"{args.bench / dt:.1f} steps/s, {n * args.bench / dt:.0f} env-steps/s")
    worker.close()


if __name__ == "__main__":
    main()
