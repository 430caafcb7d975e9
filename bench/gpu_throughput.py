#!/usr/bin/env python3
"""GPU backend throughput, side by side in one run (docs/gpu-backend.md).

For each env count it measures, interleaved and repeated:
  raw    the library alone: the same G1 model (exported by `arena sim export-model`) and the same
         PD loop (4 substeps per control step) on the device, no host copies, no observations:
         what the library can do. --impl jax: MJX's jit(vmap(...)); --impl warp: MuJoCo Warp's
         world-batched step with the PD kernel, one CUDA graph per control step on a GPU;
         robots standing at rest, the libraries' own benchmark workload;
  tracking  (--tracking, warp) raw MuJoCo Warp on the arena's own workload: the same start
         states and the same PD commands as sim bench's envs tracking the built-in motions
         (`arena sim bench --dump` on the CPU backend), so gpu / tracking compares like with
         like (tracking costs the solver about twice a standing robot's iterations);
  gpu    `arena sim bench --backend gpu`: the whole TrackingEnv on the GPU backend (worker,
         shared memory, observations, episode bookkeeping, replay policy);
  inline the same with the recording appended in the refresh that reads it (`--record-inline`),
         not overlapping the worker's step: what that overlap gains (--no-inline leaves it out);
  zero   the same with all-zero actions (`--policy zero`): robots holding the default pose, the
         standing workload raw steps, so zero/raw is the arena's overhead alone and gpu/zero
         what tracking the motions costs the physics (--no-zero leaves it out);
  cpu    `arena sim bench --backend cpu` on every CPU core of the machine;
  stub   `arena sim bench --backend gpu --gpu-impl stub`: the same path with the physics stubbed
         out, i.e. what the worker's host side and the Rust side cost per control step alone;
and prints control steps/s with the ratios gpu/raw (goal >= 0.8) and gpu/cpu, then the
arena's own split of a control step (ms: the commands, the backend's step, observations, the recording
appended during the next step, resets, policy) for gpu, inline, zero and stub.

  python bench/gpu_throughput.py --arena target/release/arena --envs 1024 4096 8192
Needs jax (with CUDA on a GPU machine), mujoco==3.17.0 and mujoco-mjx==3.17.0 in this Python
(and mujoco-warp==3.17.0, warp-lang==1.18.0 for --impl warp); the arena binary runs the worker
with the same interpreter (ARENA_GPU_PYTHON).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from raw_physics import raw_mjx, raw_warp, raw_warp_tracking, tracking_dump


def workload(worker):
    """The arena worker's physics workload over a run, from its counters (worker_ms_per_step
    holds their differences): solver iterations per world and substep, their maximum over the
    worlds per substep (the batched solver runs until its slowest world is done), contacts per
    world and substep."""
    world_substeps = (worker or {}).get("world_substeps") or 0.0
    substeps = (worker or {}).get("substeps") or 0.0
    if not world_substeps or not substeps:
        return None
    return {"solver_iterations": worker["solver_iterations"] / world_substeps,
            "solver_iterations_max": worker["solver_iterations_max"] / substeps,
            "contacts": worker["contacts"] / world_substeps}


def arena_bench(arena, envs, steps, backend, extra):
    cmd = [arena, "sim", "bench", "--envs", str(envs), "--steps", str(steps), "--backend", backend,
           "--json"] + extra
    env = dict(os.environ, ARENA_GPU_PYTHON=os.environ.get("ARENA_GPU_PYTHON", sys.executable))
    out = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arena", required=True)
    p.add_argument("--envs", type=int, nargs="+", default=[1024, 4096, 8192])
    p.add_argument("--steps", type=int, default=200, help="control steps per measurement")
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--impl", default="jax", choices=["jax", "warp"],
                   help="MJX's JAX implementation or MuJoCo Warp, for raw and gpu alike")
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "gpu"])
    p.add_argument("--cpu-threads", type=int, default=0, help="CPU backend threads (0 = all cores)")
    p.add_argument("--no-cpu", action="store_true", help="leave out the CPU backend column")
    p.add_argument("--no-stub", action="store_true", help="leave out the stubbed-physics column")
    p.add_argument("--no-zero", action="store_true",
                   help="leave out the arena with all-zero actions (sim bench --policy zero: "
                        "standing robots, raw's workload)")
    p.add_argument("--tracking", action="store_true",
                   help="--impl warp: also raw MuJoCo Warp on the arena's own workload (the same "
                        "start states and PD commands as sim bench's envs tracking the built-in "
                        "motions, from `arena sim bench --dump` on the CPU backend): gpu / raw "
                        "tracking compares like with like")
    p.add_argument("--no-inline", action="store_true",
                   help="leave out the arena with its recording appended inline (sim bench "
                        "--record-inline: not overlapping the physics, as before 2026-11-27)")
    a = p.parse_args()
    if a.tracking and a.impl != "warp":
        p.error("--tracking needs --impl warp")

    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "g1.xml")
        subprocess.run([a.arena, "sim", "export-model", "--robot", "g1", "--out", xml], check=True,
                       capture_output=True)
        dump = os.path.join(tmp, "tracking")
        if a.tracking:
            # One dump for every size: env e's episode is the same whatever the env count.
            started = time.perf_counter()
            tracking_dump(a.arena, max(a.envs), a.steps, dump)
            print(f"tracking dump: {max(a.envs)} envs x {a.steps} control steps on the CPU backend in "
                  f"{time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        rows = []
        for n in a.envs:
            results = {"raw": [], "tracking": [], "gpu": [], "inline": [], "zero": [], "cpu": [], "stub": []}
            splits = {"gpu": [], "inline": [], "zero": [], "stub": []}
            workloads = {"raw": [], "tracking": [], "gpu": [], "zero": []}
            for _ in range(a.repeats):
                if a.impl == "warp":
                    rate, load = raw_warp(xml, n, a.steps, a.device)
                    results["raw"].append(rate)
                    workloads["raw"].append(load)
                    if a.tracking:
                        rate, load = raw_warp_tracking(dump, n, a.steps, a.device)
                        results["tracking"].append(rate)
                        workloads["tracking"].append(load)
                else:
                    results["raw"].append(raw_mjx(xml, n, a.steps))
                gpu = ["--gpu-device", a.device, "--gpu-impl", a.impl]
                for side, extra in (("gpu", gpu), ("inline", gpu + ["--record-inline"]),
                                    ("zero", gpu + ["--policy", "zero"]), ("stub", ["--gpu-impl", "stub"])):
                    if ((side == "stub" and a.no_stub) or (side == "inline" and a.no_inline)
                            or (side == "zero" and a.no_zero)):
                        continue
                    out = arena_bench(a.arena, n, a.steps, "gpu", extra)
                    results[side].append(out["control_steps_per_s"])
                    splits[side].append(dict(out.get("ms_per_step") or {},
                                             worker=out.get("worker_ms_per_step")))
                    load = workload(out.get("worker_ms_per_step")) if side in workloads else None
                    if load:
                        workloads[side].append(load)
                if not a.no_cpu:
                    results["cpu"].append(arena_bench(a.arena, n, a.steps, "cpu",
                                                      ["--threads", str(a.cpu_threads)])["control_steps_per_s"])
            med = {k: statistics.median(v) if v else float("nan") for k, v in results.items()}
            rows.append((n, med, dict(results, ms_per_step=splits, workload=workloads)))
            print(f"{n} envs: " + ", ".join(f"{k} {v:.0f}" for k, v in med.items()), file=sys.stderr, flush=True)
        raw = "raw MJX" if a.impl == "jax" else "raw MuJoCo Warp"
        print(f"| envs | {raw} | arena gpu ({a.impl}) | arena cpu ({a.cpu_threads or os.cpu_count()} threads) "
              "| gpu / raw | gpu / cpu | arena gpu, recording inline | inline / raw "
              "| arena gpu, zero actions (standing) | zero / raw |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for n, med, _ in rows:
            print(f"| {n} | {med['raw']:.0f} | {med['gpu']:.0f} | {med['cpu']:.0f} "
                  f"| {med['gpu'] / med['raw']:.2f} | {med['gpu'] / med['cpu']:.2f} "
                  f"| {med['inline']:.0f} | {med['inline'] / med['raw']:.2f} "
                  f"| {med['zero']:.0f} | {med['zero'] / med['raw']:.2f} |")
        if a.tracking:
            # Like with like: raw MuJoCo Warp stepping the arena's own episodes (no host work).
            print("\n| envs | raw MuJoCo Warp, tracking (the arena's workload) | arena gpu (warp) "
                  "| gpu / raw tracking | raw tracking / raw standing |")
            print("|---|---|---|---|---|")
            for n, med, _ in rows:
                print(f"| {n} | {med['tracking']:.0f} | {med['gpu']:.0f} | {med['gpu'] / med['tracking']:.2f} "
                      f"| {med['tracking'] / med['raw']:.2f} |")
        print("\nms per control step (median run): commands | the backend's step | observations | recording "
              "during the next step (overlapping the backend's step) | resets | policy | all | host side "
              "(all but the worker's physics call and the policy)")
        for n, _, r in rows:
            for side in ("gpu", "inline", "zero", "stub"):
                runs = [s for s in r["ms_per_step"][side] if s]
                if runs:
                    s = sorted(runs, key=lambda x: x["total"])[len(runs) // 2]
                    print(f"  {n} envs, {side}: {s.get('commands', float('nan')):.3f} | "
                          f"{s['physics']:.3f} | {s['observations']:.3f} | "
                          f"{s.get('recording_behind', 0.0):.3f} | {s['resets']:.3f} | {s['policy']:.3f} | "
                          f"{s['total']:.3f} | {s.get('host_side') or float('nan'):.3f}")
                    # The backend's step split by the worker's own timers (its `stats`).
                    worker = s.get("worker") or {}
                    phases = ", ".join(f"{k[:-3]} {v:.3f}" for k, v in worker.items() if k.endswith("_ms"))
                    if phases:
                        print(f"    in the worker: {phases}")
        loads = [(n, r["workload"]) for n, _, r in rows if r["workload"]["raw"] and r["workload"]["gpu"]]
        if loads:
            # Raw steps robots standing at rest; the arena's envs track the built-in motions
            # (sim bench's replay policy): a ratio below 1 may be harder physics, not overhead.
            # The zero-action arena stands as raw does.
            print("\nphysics workload per substep (first run): raw | raw tracking | arena gpu "
                  "| arena gpu, zero actions")
            for n, w in loads:
                raw, gpu = w["raw"][0], w["gpu"][0]
                nan = {k: float("nan") for k in gpu}
                zero = w["zero"][0] if w["zero"] else nan
                track = w["tracking"][0] if w["tracking"] else dict(nan, upright=float("nan"))

                def cols(key, sides=(raw, track, gpu, zero)):
                    return " | ".join(f"{x[key]:.2f}" for x in sides)
                print(f"  {n} envs: solver iterations per world {cols('solver_iterations')}, the slowest "
                      f"world's {cols('solver_iterations_max')}; contacts per world {cols('contacts')}; "
                      f"raw tracking's worlds upright at the end {track['upright']:.2f}")
        print(json.dumps({str(n): r for n, _, r in rows}))


if __name__ == "__main__":
    main()
