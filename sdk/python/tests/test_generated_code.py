"""The committed protobuf/gRPC code (src/arena_sdk/_proto) is what scripts/generate_proto.py
makes of sdk/proto/arena.proto today."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SDK_DIR

GENERATED = ("arena_pb2.py", "arena_pb2.pyi", "arena_pb2_grpc.py")


def test_committed_generated_code_is_fresh(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools is not installed (python/requirements-dev.txt)")
    script = SDK_DIR / "scripts" / "generate_proto.py"
    subprocess.run([sys.executable, str(script), "--out", str(tmp_path)], check=True, capture_output=True)
    committed = SDK_DIR / "src" / "arena_sdk" / "_proto"
    stale = [name for name in GENERATED if (tmp_path / name).read_bytes() != (committed / name).read_bytes()]
    assert not stale, (
        f"{', '.join(stale)} in {committed} differ from what sdk/proto/arena.proto generates: run "
        f"`python sdk/python/scripts/generate_proto.py` (with the grpcio-tools of python/requirements-dev.txt)"
    )
