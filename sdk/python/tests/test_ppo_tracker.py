"""The project's PPO tracker (arena-ppo) end to end against a real `arena serve`:

- a tiny training run, its ONNX export, onnxruntime's actions against the libtorch actor's
  (within 1e-5), and `arena-agent onnx` completing a scored g1-smoke-robot submission with it;
- the committed tracker (ppo/checkpoints/g1-smoke/policy.onnx) completing a scored submission,
  with its numbers printed.

Needs the arena-ppo binary ($ARENA_PPO_BIN, default target/release/arena-ppo; `make test` builds
and names it) for the first test; the second needs only the committed file.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import REPO, SDK_DIR, Server

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed (python/requirements-dev.txt)")

BENCHMARK = "g1-smoke-robot"
COMMITTED = REPO / "ppo" / "checkpoints" / "g1-smoke" / "policy.onnx"


def ppo_bin() -> Path:
    path = Path(os.environ.get("ARENA_PPO_BIN") or REPO / "target" / "release" / "arena-ppo")
    if not path.is_file():
        reason = f"arena-ppo not found at {path} (cargo build --release -p arena-ppo, or set ARENA_PPO_BIN)"
        if os.environ.get("ARENA_PPO_BIN"):
            pytest.fail(reason)
        print(f"\nSKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    return path


def submit(server: Server, token: str, model: Path, name: str, transport: str = "ws") -> dict:
    """`arena-agent onnx MODEL` on the benchmark; returns the finished submission."""
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "arena_sdk.cli",
            "onnx",
            str(model),
            "--server",
            server.http_url,
            "--token",
            token,
            "--benchmark",
            BENCHMARK,
            "--transport",
            transport,
            "--agent-name",
            name,
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(SDK_DIR / "src")},
        timeout=900,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\nserver log:\n{server.log_tail()}"
    match = re.search(rf"^connected: submission (sub-\S+) of {BENCHMARK}", result.stdout, re.MULTILINE)
    assert match, result.stdout
    status, body = server.request("GET", f"/api/v1/submissions/{match.group(1)}", token)
    assert status == 200 and body["status"] == "COMPLETED", body
    return body


def aggregated_means(server: Server, token: str, submission: dict) -> dict[str, float]:
    status, body = server.request("GET", f"/api/v1/submissions/{submission['id']}/results", token)
    assert status == 200, body
    return {k: body["aggregated"][k]["mean"] for k in ("success", "failure_time_s", "emd", "mpjpe_g")}


def test_a_tiny_run_exports_an_onnx_the_runner_serves(server: Server, team_token: str, tmp_path: Path) -> None:
    binary = ppo_bin()
    run = tmp_path / "run"
    settings = [
        "env.num_envs=8",
        "env.threads=1",
        "env.steps_per_env=8",
        "network.actor_hidden=[32, 16]",
        "network.critic_hidden=[32]",
        "run.max_iterations=2",
        "run.checkpoint_every=2",
        "run.eval_every=2",
        "run.log_every=1",
    ]
    args = [str(binary), "train", "--config", str(REPO / "ppo/configs/g1-smoke.toml"), "--out", str(run), "--quiet"]
    for s in settings:
        args += ["--set", s]
    trained = subprocess.run(args, capture_output=True, text=True, timeout=600)
    assert trained.returncode == 0, trained.stderr
    log = (run / "train_log.csv").read_text().splitlines()
    assert len(log) == 3 and log[0].startswith("timestep,"), log
    assert (run / "eval_log.csv").is_file()

    model = tmp_path / "policy.onnx"
    probe = tmp_path / "probe.json"
    exported = subprocess.run(
        [str(binary), "export", str(run / "checkpoint"), "--out", str(model), "--probe", str(probe)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert exported.returncode == 0, exported.stderr
    sample = json.loads(probe.read_text())
    obs = np.array(sample["obs"], dtype=np.float32)
    session = ort.InferenceSession(str(model))
    names = [i.name for i in session.get_inputs()]
    assert names == ["obs", "time_step"], names
    (actions,) = session.run(["actions"], {"obs": obs, "time_step": np.zeros((len(obs), 1), np.float32)})
    difference = np.abs(actions - np.array(sample["actions"])).max()
    print(f"\nonnxruntime against libtorch over {len(obs)} inputs: largest difference {difference:.2e}")
    assert difference < 1e-5
    meta = session.get_modelmeta().custom_metadata_map
    for key in ("joint_names", "joint_stiffness", "joint_damping", "default_joint_pos", "action_scale"):
        assert len(meta[key].split(",")) == 29, key
    assert meta["observation_names"].split(",")[0] == "command" and meta["anchor_body_name"] == "torso_link"

    submission = submit(server, team_token, model, "arena-ppo-tiny")
    assert submission["agent_name"] == "arena-ppo-tiny"


def test_the_committed_tracker_completes_a_scored_submission(server: Server, team_token: str) -> None:
    if not COMMITTED.is_file():
        pytest.fail(f"{COMMITTED} is missing")
    submission = submit(server, team_token, COMMITTED, "arena-ppo-g1-smoke", transport="grpc")
    means = aggregated_means(server, team_token, submission)
    print(f"\ncommitted tracker on {BENCHMARK} through the server: {means}")
    # The model card's numbers (ppo/checkpoints/g1-smoke/MODEL_CARD.md) come from this scoring;
    # the physics is deterministic, so a policy that regressed to falling would show here.
    assert means["failure_time_s"] > 3.0, means


def test_arena_ppo_agent_and_eval_on_the_committed_checkpoint(server: Server, team_token: str) -> None:
    """`arena-ppo agent` submits the committed checkpoint (the SDK's plain-Rust tracker over
    WebSocket); `arena-ppo eval` scores it in process: both give the same scores."""
    binary = ppo_bin()
    checkpoint = COMMITTED.parent
    served = subprocess.run(
        [str(binary), "agent", str(checkpoint), "--server", server.http_url, "--token", team_token, "--name", "arena-ppo-cli"],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert served.returncode == 0, f"{served.stdout}\n{served.stderr}\nserver log:\n{server.log_tail()}"
    match = re.search(r'done: submission (sub-\S+) COMPLETED, 6 episodes', served.stdout)
    assert match, served.stdout
    means = aggregated_means(server, team_token, {"id": match.group(1)})
    evaluated = subprocess.run(
        [str(binary), "eval", str(checkpoint), "--json"], capture_output=True, text=True, timeout=900
    )
    assert evaluated.returncode == 0, evaluated.stderr
    local = json.loads(evaluated.stdout)
    print(f"\narena-ppo agent through the server: {means}; arena-ppo eval: emd {local['emd']:.6f}")
    assert local["success"] == means["success"] == 1.0, (local, means)
    assert abs(local["emd"] - means["emd"]) < 1e-9, (local["emd"], means["emd"])
