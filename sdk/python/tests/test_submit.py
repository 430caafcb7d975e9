"""`arena-agent submit` (issue 40): the committed tracker's ONNX file handed to a real server,
which evaluates it itself to COMPLETED; a file that cannot run on the benchmark is refused with
every problem listed, and no submission is created."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import REPO, SDK_DIR, Server

POLICY = REPO / "ppo" / "checkpoints" / "g1-smoke" / "policy.onnx"


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "arena_sdk.cli", "submit", *args],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SDK_DIR / "src"), "PATH": "/usr/bin:/bin"},
        timeout=600,
    )


def count(server: Server, token: str) -> int:
    status, body = server.request("GET", "/api/v1/submissions", token)
    assert status == 200, body
    return len(body["submissions"])


def test_submit_a_policy_file_and_wait(server: Server, team_token: str) -> None:
    before = count(server, team_token)
    refused = run(str(POLICY), "--server", server.http_url, "--token", team_token, "--benchmark", "g1-smoke")
    assert refused.returncode == 1, refused.stdout
    assert "422" in refused.stderr and "  - the benchmark's action mode is 'normalized'" in refused.stderr, refused.stderr
    assert count(server, team_token) == before, "a refused file creates no submission"

    done = run(
        str(POLICY), "--server", server.http_url, "--token", team_token, "--benchmark", "g1-smoke-robot", "--wait"
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted: submission sub-" in done.stdout and "as arena-ppo/g1-smoke-robot" in done.stdout, done.stdout
    assert " COMPLETED: 6/6 scored" in done.stdout, done.stdout

    # A wait that runs out says so and exits 3 (the evaluation goes on), not 1 with `PENDING: -`.
    quick = run(
        str(POLICY), "--server", server.http_url, "--token", team_token, "--benchmark", "g1-smoke-robot",
        "--wait", "--timeout", "0.001",
    )
    assert quick.returncode == 3, quick.stdout + quick.stderr
    assert "still " in quick.stderr and "after --timeout 0.001 s" in quick.stderr, quick.stderr


def test_submit_usage_errors(tmp_path: Path) -> None:
    missing = run(str(tmp_path / "none.onnx"), "--token", "t", "--benchmark", "b")
    assert missing.returncode == 2 and "no file" in missing.stderr, missing.stderr
    no_target = run(str(POLICY), "--token", "t")
    assert no_target.returncode == 2 and "--benchmark or --phase" in no_target.stderr, no_target.stderr
    bad_json = run(str(POLICY), "--token", "t", "--benchmark", "b", "--overrides", "{nope")
    assert bad_json.returncode == 2 and "--overrides is not JSON" in bad_json.stderr, bad_json.stderr
    no_wait = run(str(POLICY), "--token", "t", "--benchmark", "b", "--wait", "--timeout", "0")
    assert no_wait.returncode == 2 and "--timeout: expected seconds above 0" in no_wait.stderr, no_wait.stderr
    unreachable = run(str(POLICY), "--server", "http://127.0.0.1:9", "--token", "t", "--benchmark", "b")
    assert unreachable.returncode == 1 and "cannot reach the server" in unreachable.stderr, unreachable.stderr
    bad_scheme = run(str(POLICY), "--server", "ftp://h:1", "--token", "t", "--benchmark", "b")
    assert bad_scheme.returncode == 2 and "--server: unsupported URL scheme 'ftp'" in bad_scheme.stderr, bad_scheme.stderr


def test_rest_base_keeps_tls_and_prefix() -> None:
    """The team token goes where the user pointed: TLS stays TLS, a proxy's prefix stays."""
    from arena_sdk.submissions_cli import _base_url

    assert _base_url("127.0.0.1:8080") == "http://127.0.0.1:8080"
    assert _base_url("http://h:1/") == "http://h:1"
    assert _base_url("https://arena.example.org") == "https://arena.example.org"
    assert _base_url("https://h/arena/") == "https://h/arena"
    assert _base_url("wss://h:443/arena/api/v1/agent") == "https://h:443/arena"
    assert _base_url("ws://h:1/api/v1/agent") == "http://h:1"
    assert _base_url("grpcs://h:443") == "https://h:443"
    assert _base_url("grpc://h:50051") == "http://h:50051"


def test_server_defaults_to_arena_server(tmp_path: Path) -> None:
    """$ARENA_SERVER is the default address, as for `arena-agent` itself."""
    done = subprocess.run(
        [sys.executable, "-m", "arena_sdk.cli", "submissions", "--token", "t"],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(SDK_DIR / "src"), "PATH": "/usr/bin:/bin", "ARENA_SERVER": "https://127.0.0.1:9/p"},
        timeout=60,
    )
    assert done.returncode == 1 and "cannot reach the server at https://127.0.0.1:9/p" in done.stderr, done.stderr


def test_a_failed_submission_shows_why() -> None:
    """`submit --wait` and `submissions` print a FAILED submission's error, not `-`."""
    from arena_sdk.submissions_cli import _result

    failed = {"status": "FAILED", "error": "the hosted policy failed: tract panicked", "scores": None}
    assert _result(failed) == "the hosted policy failed: tract panicked"
    assert _result({"status": "RUNNING", "scores": None}) == "-"
    assert _result({"status": "COMPLETED", "scores": None, "results_hidden": True}) == "hidden until the phase ends"
