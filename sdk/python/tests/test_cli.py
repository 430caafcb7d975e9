"""`arena-agent` from a fresh virtual environment (`pip install <repo>/sdk/python`) completes a
g1-smoke submission with the replay example over both transports."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from conftest import EXAMPLES, Server


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_replay_example_completes_g1_smoke(
    server: Server, team_token: str, fresh_venv: Path, tmp_path: Path, transport: str
) -> None:
    result = subprocess.run(
        [
            str(fresh_venv / "arena-agent"),
            f"{EXAMPLES / 'replay_agent.py'}:ReplayAgent",
            "--server",
            server.http_url,
            "--token",
            team_token,
            "--benchmark",
            "g1-smoke",
            "--transport",
            transport,
            "--agent-name",
            f"replay-{transport}",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,  # not the repository: the installed package must be what runs
        timeout=300,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}\nserver log:\n{server.log_tail()}"
    match = re.search(r"^connected: submission (sub-\S+) of g1-smoke", result.stdout, re.MULTILINE)
    assert match, result.stdout
    submission_id = match.group(1)
    assert f"submission {submission_id} COMPLETED: 6 episodes (6 completed)" in result.stdout
    assert len(re.findall(r"^\[\d/6\] episode \d \w+: completed", result.stdout, re.MULTILINE)) == 6

    status, body = server.request("GET", f"/api/v1/submissions/{submission_id}", team_token)
    assert status == 200, body
    assert body["status"] == "COMPLETED" and body["agent_name"] == f"replay-{transport}"
    assert body["episodes_total"] == 6 and body["progress"] == {"pending": 0, "running": 0, "finished": 6}
    status, results = server.request("GET", f"/api/v1/submissions/{submission_id}/results", team_token)
    assert status == 200, results
    assert [e["status"] for e in results["episodes"]] == ["COMPLETED"] * 6, results["episodes"]

    # The participant's own listing (issue 39): the submission with its result.
    listing = subprocess.run(
        [str(fresh_venv / "arena-agent"), "submissions", "--server", server.http_url, "--token", team_token],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert listing.returncode == 0, listing.stderr
    row = next(line for line in listing.stdout.splitlines() if submission_id in line)
    assert "COMPLETED" in row and "6/6 scored" in row and "emd " in row, listing.stdout


def test_cli_reports_errors(server: Server, fresh_venv: Path, tmp_path: Path) -> None:
    result = subprocess.run(
        [
            str(fresh_venv / "arena-agent"),
            f"{EXAMPLES / 'replay_agent.py'}:ReplayAgent",
            "--server",
            server.http_url,
            "--token",
            "at_wrong",
            "--benchmark",
            "g1-smoke",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
    )
    assert result.returncode == 1
    assert "arena-agent: error: server refused the session: unauthorized" in result.stderr
    assert "left RUNNING" not in result.stderr  # nothing was started


def test_cli_says_how_to_resume_after_a_broken_agent(
    server: Server, team_token: str, fresh_venv: Path, tmp_path: Path
) -> None:
    (tmp_path / "short.py").write_text(
        "import numpy as np\n"
        "class Short:\n"
        "    def act(self, batch):\n"
        "        return np.zeros((len(batch), 28), np.float32)\n"
    )
    result = subprocess.run(
        [
            str(fresh_venv / "arena-agent"),
            "short.py:Short",
            "--server",
            server.http_url,
            "--token",
            team_token,
            "--benchmark",
            "g1-smoke",
        ],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    match = re.search(r"^connected: submission (sub-\S+) of g1-smoke", result.stdout, re.MULTILINE)
    assert match, result.stdout
    submission_id = match.group(1)
    assert "arena-agent: error: agent " in result.stderr, result.stderr
    assert f"submission {submission_id} is left RUNNING" in result.stderr, result.stderr
    assert f"--submission-id {submission_id}" in result.stderr, result.stderr
    assert "uses one of its attempts" in result.stderr, result.stderr
    status, body = server.request("GET", f"/api/v1/submissions/{submission_id}", team_token)
    assert status == 200 and body["status"] == "RUNNING", body
    assert body["attempts"]["max_per_episode"] == 3, body
    # An exception in the agent's own code: its traceback, then the same advice.
    (tmp_path / "raises.py").write_text(
        "class Raises:\n    def act(self, batch):\n        raise ValueError('model not loaded')\n"
    )
    result = subprocess.run(
        [str(fresh_venv / "arena-agent"), "raises.py:Raises", "--server", server.http_url, "--token", team_token,
         "--benchmark", "g1-smoke"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert "ValueError: model not loaded" in result.stderr and "is left RUNNING" in result.stderr, result.stderr


def test_cli_help_and_bad_agent(fresh_venv: Path, tmp_path: Path) -> None:
    help_text = subprocess.run([str(fresh_venv / "arena-agent"), "--help"], capture_output=True, text=True).stdout
    for flag in (
        "--server",
        "--token",
        "--benchmark",
        "--transport",
        "--phase",
        "--submission-id",
        "--practice",
        "--agent-name",
        "--max-batch",
        "--encoding",
        "MODULE:CLASS",
    ):
        assert flag in help_text
    result = subprocess.run(
        [str(fresh_venv / "arena-agent"), "nowhere.py:Agent", "--token", "t", "--benchmark", "g1-smoke"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert result.returncode == 2 and "cannot load agent" in result.stderr
    for bad in (["--transport", "grpc", "--encoding", "json"], ["--server", "ftp://h"], []):
        args = [str(fresh_venv / "arena-agent"), "x.py:A", "--token", "t", *bad]
        if bad:
            args += ["--benchmark", "g1-smoke"]
        result = subprocess.run(args, capture_output=True, text=True, cwd=tmp_path)
        assert result.returncode == 2 and "arena-agent: error:" in result.stderr, (bad, result.stderr)
