#!/usr/bin/env python3
"""How the host side of the GPU backend scales with the machine's cores.

Runs `arena sim bench --backend gpu --gpu-impl stub --gpu-device cpu --no-record` (the physics
stubbed out: the worker's host side and the Rust side alone, as training runs it) at one size
for several thread counts, and beside it the CPU backend's MuJoCo stepping at the same thread
counts as the machine's own reference (physics that scales with cores by construction). The
H200 run of 2026-11-27 gave the same host cost per step on 16 cores as this project's 2-core
machine gives (observations 1.98 ms at 4096 envs against 1.9 ms): this says which part stops
scaling, and whether the machine's cores do.

Prints one line per thread count (ms per control step: the commands, the worker's step, observations, the
replay policy, in all; each with its speed-up over one thread), then a JSON object.
"""
import argparse
import json
import os
import subprocess
import sys


def sim_bench(arena, backend, envs, steps, threads, extra):
    cmd = [arena, "sim", "bench", "--envs", str(envs), "--steps", str(steps), "--backend", backend,
           "--threads", str(threads), "--json"] + extra
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def default_threads():
    """1, 2, 4, ... up to the machine's cores, the core count itself last."""
    cores = os.cpu_count() or 1
    counts, t = [], 1
    while t < cores:
        counts.append(t)
        t *= 2
    return counts + [cores]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arena", required=True, help="the arena binary")
    p.add_argument("--envs", type=int, default=4096, help="envs of the stubbed GPU backend")
    p.add_argument("--steps", type=int, default=100, help="control steps per measurement")
    p.add_argument("--threads", type=int, nargs="+", default=None,
                   help="thread counts (default: 1, 2, 4, ... and the machine's cores)")
    p.add_argument("--repeats", type=int, default=1, help="runs per thread count; the fastest is kept")
    p.add_argument("--cpu-envs", type=int, default=256,
                   help="envs of the CPU backend's reference runs (0: none)")
    p.add_argument("--cpu-steps", type=int, default=40)
    a = p.parse_args()
    if a.envs < 1 or a.steps < 1 or a.repeats < 1 or a.cpu_envs < 0:
        sys.exit("--envs, --steps and --repeats must be at least 1, --cpu-envs at least 0")
    threads = a.threads or default_threads()
    if any(t < 1 for t in threads):
        sys.exit("--threads: every count must be at least 1")
    os.environ.setdefault("ARENA_GPU_PYTHON", sys.executable)
    stub = ["--gpu-impl", "stub", "--gpu-device", "cpu", "--no-record"]
    rows = []
    for t in threads:
        runs = [sim_bench(a.arena, "gpu", a.envs, a.steps, t, stub) for _ in range(a.repeats)]
        best = min(runs, key=lambda r: r["ms_per_step"]["total"])
        row = {"threads": best["threads"], "stub_ms_per_step": best["ms_per_step"]}
        if a.cpu_envs:
            cpu = [sim_bench(a.arena, "cpu", a.cpu_envs, a.cpu_steps, t, ["--no-record"])
                   for _ in range(a.repeats)]
            row["cpu_control_steps_per_s"] = max(r["control_steps_per_s"] for r in cpu)
        rows.append(row)
        print(f"{t} thread(s): " + json.dumps(row), file=sys.stderr, flush=True)
    base = rows[0]
    keys = ("commands", "physics", "observations", "policy", "total")
    print(f"\nstub at {a.envs} envs, ms per control step (speed-up over {base['threads']} thread(s)); "
          f"CPU backend at {a.cpu_envs} envs, control steps/s")
    print("| threads | commands | worker's step | observations | policy | in all | cpu backend |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        cells = []
        for k in keys:
            v, v0 = r["stub_ms_per_step"].get(k, 0.0), base["stub_ms_per_step"].get(k, 0.0)
            cells.append(f"{v:.2f} ({v0 / v:.2f}×)" if v > 0 else f"{v:.2f}")
        cpu = r.get("cpu_control_steps_per_s")
        cpu_cell = (f"{cpu:.0f} ({cpu / base['cpu_control_steps_per_s']:.2f}×)" if cpu else "–")
        print(f"| {r['threads']} | " + " | ".join(cells) + f" | {cpu_cell} |")
    print(json.dumps({"envs": a.envs, "steps": a.steps, "cpu_envs": a.cpu_envs, "rows": rows}))


if __name__ == "__main__":
    main()
