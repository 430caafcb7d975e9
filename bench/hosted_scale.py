#!/usr/bin/env python3
"""Issue 40 §4, at scale: --episodes concurrent hosted episodes (an uploaded ONNX policy the
server runs itself, one lane of --episodes envs) against the in-process `arena eval --onnx` of the
same file, benchmark and batch, on the same cores; interleaved, best of --repeats each. Prints
each run's wall time and control steps per second, and the ratio hosted / in-process (goal >= 0.8).

The benchmark is that of bench/gpu_eval_scale.py through the G1's own interface (the groups and
joint-position actions of g1-smoke-robot, so the committed tracker runs it): k of the six
built-in motions, k the largest that divides --episodes, each repeated --episodes/k times, the
first --window-s seconds of each clip, DR level 3. Both walls include start-up: the server's
start, the upload and its checks, the run, to the submission's final status; `arena eval`'s whole
process.

  python bench/hosted_scale.py --arena target/release/arena --episodes 1024 --window-s 2
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

from arena_rest import request, start_server

REPO = Path(__file__).resolve().parents[1]
ADMIN = "scale-admin"
BENCHMARK = """name = "g1-scale-robot"
version = 1
description = "Scale test through the G1's own interface: built-in motions repeated, DR level 3."
task = "tracking"
[motions]
builtin = {motions}
[episodes]
window = {{ length_s = {window_s}, stride_s = 100.0 }}
repeats = {repeats}
dr_level = 3
seed = 0
[limits]
control_hz = 50
max_episode_s = 0.0
step_timeout_ms = 60000
[fall]
rule = "none"
[observations]
groups = ["imu", "imu_torso", "motors", "base_lin_vel", "motion_command", "motion_anchor_pos_b",
          "motion_anchor_ori_b", "motion_anchor_pose_w"]
reference_horizon = 0
anchor_body = "torso_link"
[action]
mode = "joint_position"
gains = "armature"
presets = ["armature", "arena"]
kp_max = 500.0
kd_max = 50.0
[metrics]
list = ["emd", "mpjpe_g", "mjlab_success"]
state_slice = [0, 23]
success_threshold_m = 0.5
ndtw_window_s = 1.0
[ranking]
success = "mjlab_success"
primary = "emd"
"""


def scores(aggregated, episodes):
    """The mean scores and what they are over (the scored episodes of all)."""
    means = {k: round(aggregated[k]["mean"], 4) for k in ("mpjpe_g", "mjlab_success") if k in aggregated}
    scored = aggregated["mpjpe_g"]["count"] if "mpjpe_g" in aggregated else 0
    means["scored"] = f"{scored} of {episodes}"
    return means


def hosted(a, bench_dir, policy):
    """One hosted evaluation on a fresh server: (wall seconds, control steps, mean scores)."""
    data = tempfile.mkdtemp(prefix="hosted-scale-")
    started = time.perf_counter()
    server, base = start_server(
        [a.arena, "serve", "--data-dir", data, "--bind", "127.0.0.1:0", "--admin-token", ADMIN,
         "--benchmarks-dir", bench_dir, "--max-batch", str(a.episodes), "--lanes", "1", "--hosted-runs", "1"],
        os.path.join(data, "server.log"),
    )
    try:
        _, team = request(base, "POST", "/api/v1/teams", ADMIN, json.dumps({"name": "scale"}).encode())
        token = team["token"]
        query = urllib.parse.urlencode({"benchmark": "g1-scale-robot", "file_name": Path(a.policy).name})
        status, s = request(base, "POST", f"/api/v1/submissions/hosted?{query}", token, policy,
                            "application/octet-stream")
        if status != 201:
            sys.exit(f"upload refused: {s}")
        sid = s["id"]
        while s["status"] not in ("COMPLETED", "FAILED"):
            time.sleep(0.05)
            _, s = request(base, "GET", f"/api/v1/submissions/{sid}", token)
        wall = time.perf_counter() - started
        if s["status"] != "COMPLETED":
            sys.exit(f"the hosted run ended {s['status']}: {s.get('error')}")
        _, r = request(base, "GET", f"/api/v1/submissions/{sid}/results", token)
        steps = sum(e["steps"] for e in r["episodes"])
        agg = r["aggregated"]
        return wall, steps, scores(agg, len(r["episodes"]))
    finally:
        server.terminate()
        server.wait()


def in_process(a, bench_dir):
    """One `arena eval --onnx` of the same file, benchmark and batch: (wall, steps, mean scores)."""
    cmd = [a.arena, "eval", "--benchmark", "g1-scale-robot", "--benchmarks-dir", bench_dir, "--onnx", a.policy,
           "--batch", str(a.episodes), "--json"]
    started = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if out.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr[-3000:]}")
    report = json.loads(out.stdout)
    steps = sum(e["num_steps"] for e in report["episodes"])
    agg = report["aggregated"]
    return wall, steps, scores(agg, len(report["episodes"]))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arena", default=str(REPO / "target/release/arena"))
    p.add_argument("--policy", default=str(REPO / "ppo/checkpoints/g1-smoke/policy.onnx"))
    p.add_argument("--episodes", type=int, default=1024)
    p.add_argument("--window-s", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=3)
    a = p.parse_args()
    if not 1 <= a.episodes <= 4096 or a.repeats < 1 or a.window_s <= 0:
        p.error("--episodes 1-4096, --repeats >= 1, --window-s > 0")
    k = max(k for k in range(1, 7) if a.episodes % k == 0)
    motions = ["stand", "squat", "arm_wave", "torso_twist", "weight_shift", "step_in_place"][:k]
    bench_dir = tempfile.mkdtemp(prefix="hosted-scale-benchmarks-")
    Path(bench_dir, "g1-scale-robot.toml").write_text(
        BENCHMARK.format(motions=json.dumps(motions), window_s=a.window_s, repeats=a.episodes // k))
    policy = Path(a.policy).read_bytes()
    best = {}
    for r in range(a.repeats):
        for route in ("hosted", "in-process"):
            wall, steps, means = hosted(a, bench_dir, policy) if route == "hosted" else in_process(a, bench_dir)
            print(f"  {route:10} run {r + 1}: {wall:7.2f} s, {steps} control steps, {steps / wall:8.0f} steps/s, {means}",
                  flush=True)
            if route not in best or wall < best[route][0]:
                best[route] = (wall, steps)
    (hw, hs), (lw, ls) = best["hosted"], best["in-process"]
    print(f"{a.episodes} concurrent episodes, best of {a.repeats}: hosted {hw:.2f} s ({hs / hw:.0f} steps/s), "
          f"in-process arena eval {lw:.2f} s ({ls / lw:.0f} steps/s)")
    print(f"hosted/in-process control steps per second: {(hs / hw) / (ls / lw):.2f} (goal >= 0.8)")


if __name__ == "__main__":
    main()
