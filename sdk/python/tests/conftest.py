"""Fixtures: a real `arena serve` process (binary from $ARENA_BIN, default
<repo>/target/release/arena; the tests that need it are skipped when it is missing), a team
token, a small REST client, and a fresh virtual environment with the SDK installed from source."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import secrets
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

SDK_DIR = Path(__file__).resolve().parents[1]
REPO = SDK_DIR.parents[1]
EXAMPLES = SDK_DIR / "examples"
LISTENING = "arena serve: listening on http://"


@dataclass
class Server:
    addr: str  # host:port
    admin_token: str
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"http://{self.addr}"

    @property
    def ws_url(self) -> str:
        return f"ws://{self.addr}/api/v1/agent"

    @property
    def grpc_url(self) -> str:
        return f"grpc://{self.addr}"

    def request(self, method: str, path: str, token: str | None = None, body: Any = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.http_url + path, data=data, method=method)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=30) as r:
                return r.status, json.loads(r.read() or b"null")
        except urllib.error.HTTPError as e:
            return e.code, json.loads(e.read() or b"null")

    def create_team(self, name: str) -> str:
        status, body = self.request("POST", "/api/v1/teams", self.admin_token, {"name": name})
        assert status == 201, body
        return body["token"]

    def log_tail(self, lines: int = 40) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])


def arena_bin() -> Path:
    return Path(os.environ.get("ARENA_BIN") or REPO / "target" / "release" / "arena")


@contextlib.contextmanager
def start_server(data_dir: Path, *extra: str) -> Iterator[Server]:
    """Runs `arena serve` on a free loopback port until the block ends."""
    binary = arena_bin()
    if not binary.is_file():
        reason = f"arena binary not found at {binary} (build it with `cargo build --release`, or set ARENA_BIN)"
        if os.environ.get("ARENA_BIN"):
            # `make test` names the binary it just built: missing is an error, not a skip.
            pytest.fail(reason)
        print(f"\nSKIP: {reason}", file=sys.stderr)
        pytest.skip(reason)
    admin = secrets.token_hex(16)
    log_path = data_dir / "server.log"
    args = [str(binary), "serve", "--data-dir", str(data_dir), "--admin-token", admin]
    if "--bind" not in extra:
        args += ["--bind", "127.0.0.1:0"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [*args, *extra],
            stdout=subprocess.PIPE,
            stderr=log,
            cwd=data_dir,
            env={**os.environ, "ARENA_LOG": "info"},
            text=True,
        )
    try:
        yield Server(_bound_address(proc, log_path), admin, log_path)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _bound_address(proc: subprocess.Popen, log_path: Path) -> str:
    """Port 0: the server prints the address it bound on stdout. Keeps draining stdout
    afterwards so the server never blocks on a full pipe."""
    lines: queue.Queue[str | None] = queue.Queue()

    def drain() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=drain, daemon=True).start()
    deadline = time.monotonic() + 60
    while True:
        try:
            line = lines.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            line = None
        if line is None:
            proc.kill()
            pytest.fail(f"arena serve did not start; log:\n{log_path.read_text(errors='replace')}")
        if line.startswith(LISTENING):
            return line[len(LISTENING) :].split()[0]


@pytest.fixture(scope="session")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One server for the session, with default settings."""
    with start_server(tmp_path_factory.mktemp("arena-data")) as s:
        yield s


@pytest.fixture(scope="session")
def team_token(server: Server) -> str:
    return server.create_team(f"py-sdk-{secrets.token_hex(4)}")


@pytest.fixture(scope="session")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A new virtual environment with `pip install <repo>/sdk/python` (from PyPI: numpy,
    websockets, grpcio, protobuf), shared by the tests of one session. Returns its bin folder."""
    venv = tmp_path_factory.mktemp("fresh") / "v"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    result = subprocess.run(
        [str(bin_dir / "pip"), "install", "--disable-pip-version-check", "--quiet", str(SDK_DIR)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, f"pip install failed:\n{result.stdout}\n{result.stderr}"
    return bin_dir
