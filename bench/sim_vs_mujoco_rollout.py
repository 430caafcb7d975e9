#!/usr/bin/env python3
"""Simulator throughput vs the physical limit of the same physics.

Runs `arena sim bench` (MimicArena's TrackingEnv: PD loop, observations, trajectory recording,
replay policy on the built-in motions) and MuJoCo's own C++ rollout (`mujoco.rollout.rollout`,
PyPI mujoco==3.17.0) stepping the exported MJCF from the same initial states with the
per-substep torques recorded from our run, so both integrate identical physics and the rollout
has no per-step overhead. Prints both rates, their ratio per core, and the 2-thread scaling.

Usage: bench/sim_vs_mujoco_rollout.py --arena target/release/arena [--envs 16] [--steps 200]
"""
import argparse, json, os, subprocess, tempfile, time
import numpy as np
import mujoco
from mujoco import rollout


def arena_bench(arena, envs, steps, threads, dump=None):
    cmd = [arena, "sim", "bench", "--envs", str(envs), "--steps", str(steps), "--threads", str(threads), "--json"]
    if dump:
        cmd += ["--dump", dump]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--arena", default="target/release/arena")
    ap.add_argument("--envs", type=int, default=16)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=3, help="best of this many runs per measurement")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as d:
        arena_bench(args.arena, args.envs, args.steps, 1, dump=d)
        meta = json.load(open(os.path.join(d, "meta.json")))
        n, sub, nu = meta["envs"], meta["substeps"], meta["nu"]
        model = mujoco.MjModel.from_xml_path(os.path.join(d, "model.xml"))
        qpos0 = np.fromfile(os.path.join(d, "initial_qpos.f64")).reshape(n, model.nq)
        qvel0 = np.fromfile(os.path.join(d, "initial_qvel.f64")).reshape(n, model.nv)
        torques = np.fromfile(os.path.join(d, "torques.f64")).reshape(n, sub, nu)
        final_ours = np.fromfile(os.path.join(d, "final_qpos.f64")).reshape(n, model.nq)

    spec = mujoco.mjtState.mjSTATE_FULLPHYSICS
    data = mujoco.MjData(model)
    init = np.zeros((n, mujoco.mj_stateSize(model, spec)))
    for e in range(n):
        mujoco.mj_resetData(model, data)
        data.qpos[:] = qpos0[e]
        data.qvel[:] = qvel0[e]
        mujoco.mj_getState(model, data, init[e], spec)

    def run_rollout(threads):
        datas = [mujoco.MjData(model) for _ in range(threads)]
        t0 = time.perf_counter()
        state, _ = rollout.rollout(model, datas if threads > 1 else datas[0], init, torques)
        return n * sub / (time.perf_counter() - t0), state

    def run_ours(threads):
        return arena_bench(args.arena, n, args.steps, threads)["control_steps_per_s"]

    # Interleave the measurements so machine noise hits both sides alike; keep the best of each.
    ours1 = ours2 = mj1 = mj2 = 0.0
    for _ in range(args.repeats):
        ours1 = max(ours1, run_ours(1))
        r, state = run_rollout(1)
        mj1 = max(mj1, r)
        ours2 = max(ours2, run_ours(2))
        mj2 = max(mj2, run_rollout(2)[0])
    # Same physics check: the rollout's final qpos against ours (state layout: time, qpos, ...).
    diff = np.abs(state[:, -1, 1:1 + model.nq] - final_ours).max()

    print(f"{n} envs x {args.steps} control steps ({sub} physics substeps each), best of {args.repeats}")
    print(f"final qpos max |ours - rollout| = {diff:.3e}  (identical physics)")
    print(f"{'':34}{'1 thread':>14}{'2 threads':>14}{'scaling':>10}")
    print(f"{'MimicArena control steps/s':34}{ours1:>14.0f}{ours2:>14.0f}{ours2 / ours1:>10.2f}")
    print(f"{'MuJoCo rollout (substeps/4)/s':34}{mj1 / 4:>14.0f}{mj2 / 4:>14.0f}{mj2 / mj1:>10.2f}")
    print(f"{'ratio ours / rollout':34}{ours1 / (mj1 / 4):>14.3f}{ours2 / (mj2 / 4):>14.3f}")


if __name__ == "__main__":
    main()
