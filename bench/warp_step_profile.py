#!/usr/bin/env python3
"""Where the GPU worker's MuJoCo Warp step spends the device's time, against raw MuJoCo Warp on
the same states (issue 41 §2: gpu/raw >= 0.8).

`bench/gpu_throughput.py` compares the arena's `sim bench` (robots tracking the built-in
motions, the arena's gains, domain randomisation's per-world model fields) with raw MuJoCo Warp
(robots standing at rest): different physics. Here both sides step the same thing: N worlds of
the arena's G1 from one standing state, PD gains 100 / 2 towards qpos0, four substeps per
control step; raw is `mujoco_warp.step` and the PD kernel, captured as one CUDA graph; the
worker's side is its own `WarpPhysics` (simulator/python/warp_physics.py: per-world model
fields, the PD, save, check and restore kernels of every substep, then the observation's
kinematics, contact forces and packing), driven as the worker drives it (`advance`: inputs
in, the step graph, outputs out). Printed:

- control steps/s of both, end to end, and the worker's own split (device time of the copy
  in, the launched work and the copy out);
- on a CUDA device, each kernel's device time per control step (Warp's activity timing, the
  graphs left out so every launch is seen): raw's step, the worker's control step and its
  observation, with the kernels whose time differs most between raw and the worker's step.

  python bench/warp_step_profile.py --arena target/release/arena --envs 4096

Needs mujoco==3.17.0, mujoco-warp==3.17.0 and warp-lang==1.18.0 (python/requirements-gpu.txt).
On a machine without CUDA it runs on Warp's CPU device (`--device cpu`, small --envs), where
only the end-to-end rates are measured: a check of the script, not a measurement.
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "simulator", "python"))

KP, KD, DECIMATION = 100.0, 2.0, 4


def standing(mujoco, model):
    data = mujoco.MjData(model)
    data.qpos[2] = 0.8
    mujoco.mj_forward(model, data)
    return data


def base_name(name):
    """A kernel's name without Warp's module hash (`_pd_kernel_3f2a9c1e` -> `_pd_kernel`)."""
    return re.sub(r"_[0-9a-f]{6,}$", "", name)


def per_step(results, steps):
    """Device milliseconds per control step by kernel (or copy) name."""
    out = collections.Counter()
    for r in results:
        out[base_name(r.name)] += r.elapsed / steps
    return out


def timed(wp, device, fn, steps):
    """Wall seconds of `steps` calls of fn (synchronised), and on CUDA each activity's time."""
    cuda = device.is_cuda
    if cuda:
        wp.timing_begin(cuda_filter=wp.TIMING_ALL)
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    wp.synchronize_device(device)
    wall = time.perf_counter() - start
    results = wp.timing_end() if cuda else []
    return wall, per_step(results, steps)


def timed_kernels(wp, device, fn, steps):
    """Each kernel's device time per call of fn; empty (with the reason printed) where Warp's
    activity timing is not to be had, so the rates above still stand."""
    try:
        return timed(wp, device, fn, steps)[1]
    except Exception as e:  # a driver without activity timing, an older Warp
        print(f"kernel timing unavailable: {type(e).__name__}: {e}", file=sys.stderr)
        return collections.Counter()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arena", required=True, help="the arena binary (exports the model)")
    p.add_argument("--envs", type=int, default=4096)
    p.add_argument("--steps", type=int, default=100, help="control steps per measurement")
    p.add_argument("--profile-steps", type=int, default=10, help="control steps under kernel timing")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--top", type=int, default=12, help="kernels listed per side")
    a = p.parse_args()
    if a.envs < 1 or a.steps < 1 or a.profile_steps < 1:
        p.error("--envs, --steps and --profile-steps must be at least 1")

    import mujoco
    import numpy as np
    import warp as wp
    wp.config.quiet = True
    import mujoco_warp as mjw
    from warp_physics import WarpPhysics
    from worker_common import DR_FIELDS, FF0, INP_WIDTH, NJ, NV, OUTPUTS_PER_ENV

    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "g1.xml")
        subprocess.run([a.arena, "sim", "export-model", "--robot", "g1", "--out", xml], check=True,
                       capture_output=True)
        model = mujoco.MjModel.from_xml_path(xml)
    n = a.envs
    cuda = wp.get_cuda_device_count() > 0 and a.device != "cpu"
    if a.device == "gpu" and not cuda:
        sys.exit("no CUDA device for Warp (--device gpu)")
    device = wp.get_device("cuda:0" if cuda else "cpu")
    data = standing(mujoco, model)
    effort = np.asarray(model.jnt_actfrcrange[1:, 1], np.float32)
    report = {"envs": n, "device": str(device), "steps": a.steps}

    # Raw: the PD kernel and mujoco_warp.step, four times, as bench/gpu_throughput.py runs it.
    from raw_physics import raw_pd_kernel
    pd = raw_pd_kernel(wp)
    with wp.ScopedDevice(device):
        m = mjw.put_model(model)
        d = mjw.put_data(model, data, nworld=n, nconmax=64, njmax=4 * 64 + 2 * NJ)
        target = wp.array(np.asarray(model.qpos0[7:], np.float32), dtype=float)
        effort_wp = wp.array(effort, dtype=float)

        def raw_step():
            for _ in range(DECIMATION):
                wp.launch(pd, dim=(n, NJ), inputs=[d.qpos, d.qvel, target, effort_wp, d.ctrl])
                mjw.step(m, d)

        raw_step()
        graph = None
        if cuda:
            with wp.ScopedCapture() as capture:
                raw_step()
            graph = capture.graph
        raw_launch = (lambda: wp.capture_launch(graph)) if graph else raw_step
        raw_launch()
        wall, _ = timed(wp, device, raw_launch, a.steps)
        report["raw_control_steps_per_s"] = n * a.steps / wall
        raw_kernels = timed_kernels(wp, device, raw_step, a.profile_steps) if cuda else None

    # The worker's physics on the same states and gains (no domain randomisation drawn: every
    # world has the nominal fields, still as per-world arrays, as in the arena).
    cfg = {"num_envs": n, "device": "gpu" if cuda else "cpu", "x64": False,
           "decimation": DECIMATION, "effort": effort.astype(np.float64), "contact_forces": True}
    dr_host = {k: np.repeat(getattr(model, k)[None], n, axis=0) for k in DR_FIELDS}
    gains = np.full((n, NJ), KP), np.full((n, NJ), KD)
    physics = WarpPhysics(cfg, model, dr_host, *gains)
    physics.reset(np.ones(n, bool), np.repeat(data.qpos[None], n, axis=0), np.zeros((n, NV)))
    inp = np.zeros((n, INP_WIDTH), np.float32)
    inp[:, :NJ] = model.qpos0[7:]
    inp[:, NJ + 6] = 1.0  # go
    inp[:, FF0:FF0 + NJ] = 0.0
    dest = np.zeros(n * OUTPUTS_PER_ENV, np.float32)
    physics.advance(inp, True, dest)
    before = dict(physics.timings)
    wall, _ = timed(wp, device, lambda: physics.advance(inp, True, dest), a.steps)
    report["worker_control_steps_per_s"] = n * a.steps / wall
    report["worker_ms_per_step"] = {k: 1000 * (v - before.get(k, 0.0)) / a.steps
                                    for k, v in physics.timings.items()}
    # The same launches one by one (no graph), split into the control step and the observation.
    with wp.ScopedDevice(device):
        if cuda:
            ours_step = timed_kernels(wp, device, physics._control_step, a.profile_steps)
            ours_observe = timed_kernels(wp, device, physics._observe, a.profile_steps)

    report["gpu_over_raw"] = report["worker_control_steps_per_s"] / report["raw_control_steps_per_s"]
    print(f"{n} worlds on {device}, the same standing start and gains on both sides:")
    print(f"  raw MuJoCo Warp      {report['raw_control_steps_per_s']:12.0f} control steps/s")
    print(f"  the worker's physics {report['worker_control_steps_per_s']:12.0f} control steps/s "
          f"({report['gpu_over_raw']:.2f} of raw)")
    split = ", ".join(f"{k[:-2]} {v:.3f}" for k, v in report["worker_ms_per_step"].items())
    print(f"  the worker's advance, ms per control step: {split}")
    if cuda:
        sides = {"raw step": raw_kernels, "worker step": ours_step, "worker observation": ours_observe}
        report["device_ms_per_step"] = {side: dict(k) for side, k in sides.items()}
        for side, kernels in sides.items():
            total = sum(kernels.values())
            print(f"\n{side}: {total:.3f} ms of device time per control step, by kernel")
            for name, ms in kernels.most_common(a.top):
                print(f"  {ms:8.3f}  {name}")
        diff = collections.Counter(ours_step)
        diff.subtract(raw_kernels)
        print("\nworker step minus raw step, by kernel (ms per control step; most different first)")
        for name, ms in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:a.top]:
            print(f"  {ms:+8.3f}  {name}")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
