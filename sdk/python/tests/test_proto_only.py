"""A client generated with grpcio-tools from sdk/proto/arena.proto alone (no arena_sdk) completes
a g1-smoke submission over gRPC."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO, Server

HERE = Path(__file__).resolve().parent


def test_proto_only_grpc_client_completes_g1_smoke(server: Server, team_token: str, tmp_path: Path) -> None:
    protoc = pytest.importorskip("grpc_tools.protoc", reason="grpcio-tools is not installed")
    generated = tmp_path / "gen"
    generated.mkdir()
    proto_dir = REPO / "sdk" / "proto"
    args = ["protoc", f"-I{proto_dir}", f"--python_out={generated}", f"--grpc_python_out={generated}", "arena.proto"]
    assert protoc.main(args) == 0
    # A separate process: nothing of arena_sdk is importable there (and the generated schema
    # does not meet arena_sdk's copy in one descriptor pool).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(HERE / "proto_only_client.py"), str(generated), server.addr, team_token, "g1-smoke"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, f"{result.stdout}\n{result.stderr}"
    submission_id = re.search(r"^submission (sub-\S+):", result.stdout, re.MULTILINE).group(1)
    assert result.stdout.count(": completed,") == 6
    status, body = server.request("GET", f"/api/v1/submissions/{submission_id}", team_token)
    assert status == 200 and body["status"] == "COMPLETED" and body["agent_name"] == "proto-only", body
