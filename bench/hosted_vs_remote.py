#!/usr/bin/env python3
"""Issue 40 §4: a policy evaluated by the server itself (hosted: the ONNX file uploaded,
`POST /api/v1/submissions/hosted`, tract in the server's process) against the same file run by
a participant's process over a loopback WebSocket (`arena-agent onnx`, onnxruntime), on the
same server, interleaved, best of --repeats each. Prints wall time, control steps per second,
the ratio hosted / remote (goal >= 1.2), and each route's mean scores (the engines differ by
float round-off, so closed-loop rollouts differ slightly).

  python bench/hosted_vs_remote.py --arena target/release/arena \
      --motions-root ../shared/motions/g1-moves --repeats 3
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
ADMIN = "bench-admin"


def wait(base, token, sid):
    while True:
        _, s = request(base, "GET", f"/api/v1/submissions/{sid}", token)
        if s["status"] in ("COMPLETED", "FAILED"):
            return s
        time.sleep(0.05)


def summary(base, token, sid):
    _, r = request(base, "GET", f"/api/v1/submissions/{sid}/results", token)
    steps = sum(e["steps"] for e in r["episodes"])
    agg = r["aggregated"]
    means = {k: round(agg[k]["mean"], 4) for k in ("mpjpe_g", "mjlab_success") if k in agg}
    means["scored"] = f"{agg['mpjpe_g']['count']} of {len(r['episodes'])}" if "mpjpe_g" in agg else "0"
    return steps, means


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arena", default=str(REPO / "target/release/arena"))
    p.add_argument("--motions-root", default=str(REPO.parent / "shared/motions/g1-moves"))
    p.add_argument("--benchmark", default="g1-moves-dance-robot")
    p.add_argument("--policy", default=str(REPO / "ppo/checkpoints/g1-moves-dance/policy.onnx"))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--python", default=sys.executable, help="the Python with the SDK's onnx extra")
    a = p.parse_args()
    data = tempfile.mkdtemp(prefix="hosted-bench-")
    server, base = start_server(
        [a.arena, "serve", "--data-dir", data, "--bind", "127.0.0.1:0", "--admin-token", ADMIN,
         "--motions-root", a.motions_root],
        os.path.join(data, "server.log"),
    )
    try:
        _, team = request(base, "POST", "/api/v1/teams", ADMIN, json.dumps({"name": "bench"}).encode())
        token = team["token"]
        policy = Path(a.policy).read_bytes()
        best = {"hosted": None, "remote": None}
        scores = {}
        for r in range(a.repeats):
            for route in ("hosted", "remote"):
                t0 = time.perf_counter()
                if route == "hosted":
                    query = urllib.parse.urlencode({"benchmark": a.benchmark, "file_name": "policy.onnx",
                                                    "agent_name": f"hosted-{r}"})
                    status, s = request(base, "POST", f"/api/v1/submissions/hosted?{query}", token, policy,
                                        "application/octet-stream")
                    assert status == 201, s
                    sid = s["id"]
                    s = wait(base, token, sid)
                else:
                    out = subprocess.run(
                        [a.python, "-m", "arena_sdk.cli", "onnx", a.policy, "--server", base, "--token", token,
                         "--benchmark", a.benchmark, "--agent-name", f"remote-{r}"],
                        capture_output=True, text=True,
                        env={**os.environ, "PYTHONPATH": str(REPO / "sdk/python/src")},
                    )
                    line = next((l for l in out.stdout.splitlines() if l.startswith("connected: submission ")), None)
                    assert line, out.stdout + out.stderr
                    sid = line.split()[2]
                    s = wait(base, token, sid)
                wall = time.perf_counter() - t0
                assert s["status"] == "COMPLETED", s
                steps, means = summary(base, token, sid)
                print(f"  {route:6} run {r + 1}: {wall:7.2f} s, {steps} control steps, {steps / wall:8.0f} steps/s, {means}")
                if best[route] is None or wall < best[route][0]:
                    best[route] = (wall, steps)
                scores[route] = means
        (hw, hs), (rw, rs) = best["hosted"], best["remote"]
        print(f"best of {a.repeats}: hosted {hw:.2f} s ({hs / hw:.0f} steps/s), remote {rw:.2f} s ({rs / rw:.0f} steps/s)")
        print(f"hosted/remote control steps per second: {(hs / hw) / (rs / rw):.2f} (goal >= 1.2)")
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
