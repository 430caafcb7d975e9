"""`arena-agent submit POLICY.onnx`: hand an exported policy to the server, which evaluates it
itself (a hosted submission, POST /api/v1/submissions/hosted; docs/bring-your-policy.md). No
process of yours stays connected; `--wait` follows the evaluation to its end."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from .submissions_cli import DEFAULT_SERVER, _base_url, _result, default_server

#: Seconds between two looks at a submission with --wait.
POLL_S = 2.0


class SubmitError(RuntimeError):
    """The server refused or could not be reached; `problems` lists a refused file's problems."""

    def __init__(self, message: str, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems = list(problems)


def _request(request: urllib.request.Request, server: str, timeout_s: float) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            # The server's JSON object, as it sent it (its fields are read where they are used).
            return cast("dict[str, Any]", json.loads(response.read()))
    except urllib.error.HTTPError as e:
        try:
            error = json.loads(e.read())["error"]
        except (ValueError, KeyError, TypeError):
            error = {"message": e.reason}
        problems = error.get("problems") or []
        # The message joins the problems; they are listed one per line below it instead.
        message = "the policy cannot run here" if problems else error.get("message")
        raise SubmitError(f"the server answered {e.code}: {message}", problems) from None
    except (urllib.error.URLError, OSError) as e:
        raise SubmitError(f"cannot reach the server at {_base_url(server)}: {e}") from None


def submit(
    server: str,
    token: str,
    policy: Path,
    *,
    benchmark: str = "",
    phase: str = "",
    agent_name: str = "",
    overrides: dict[str, Any] | None = None,
    timeout_s: float = 300.0,
) -> dict[str, Any]:
    """Uploads `policy`; returns the created submission (with `hosted`)."""
    # The folder names the run where the file's metadata does not (the server's last choice
    # of a default agent name; mjlab exports are all policy.onnx).
    query = {"file_name": policy.name, "folder": policy.resolve().parent.name}
    for key, value in (("benchmark", benchmark), ("phase", phase), ("agent_name", agent_name)):
        if value:
            query[key] = value
    if overrides:
        query["overrides"] = json.dumps(overrides)
    request = urllib.request.Request(
        f"{_base_url(server)}/api/v1/submissions/hosted?{urllib.parse.urlencode(query)}",
        data=policy.read_bytes(),
        method="POST",
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/octet-stream"},
    )
    return _request(request, server, timeout_s)


def wait(server: str, token: str, submission_id: str, timeout_s: float) -> dict[str, Any]:
    """The submission once it is COMPLETED or FAILED (or as it is when `timeout_s` runs out)."""
    deadline = time.monotonic() + timeout_s
    url = f"{_base_url(server)}/api/v1/submissions/{submission_id}"
    while True:
        s = _request(urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"}), server, 30.0)
        if s["status"] in ("COMPLETED", "FAILED") or time.monotonic() > deadline:
            return s
        time.sleep(POLL_S)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="arena-agent submit",
        description="Hand an exported policy (ONNX, mjlab / BeyondMimic or holosoma metadata) to the server, "
        "which checks it against the benchmark and evaluates it itself: nothing of yours stays connected. "
        "A refused file lists every problem and uses no quota.",
        epilog="exit status: 0 submitted (with --wait: it COMPLETED); 1 refused, an error, or (with --wait) it "
        "ended FAILED; 2 bad arguments; 3 (--wait) still running when --timeout ran out (the server goes on "
        "evaluating it: follow it with `arena-agent submissions` or its page)",
    )
    parser.add_argument("policy", type=Path, help="the .onnx file")
    parser.add_argument(
        "--server", default=default_server(), help=f"the server (default: $ARENA_SERVER or {DEFAULT_SERVER})"
    )
    parser.add_argument("--token", default=None, help="team token (or ARENA_TOKEN)")
    parser.add_argument("--benchmark", default="", help="the benchmark (or give --phase)")
    parser.add_argument("--phase", default="", help="the challenge phase (its benchmark applies)")
    parser.add_argument(
        "--agent-name",
        default="",
        help="the name on the leaderboard [default: the run (mjlab's run_path) or the motion (holosoma's"
        " motion_file) its metadata names, else the file's name unless it is policy.onnx, else its folder's]",
    )
    parser.add_argument(
        "--overrides",
        default="",
        metavar="JSON",
        help='what the file\'s metadata lacks, as a JSON object of arena-agent onnx\'s options: '
        '{"action_scale": [0.5], "anchor_body": "torso_link", "joint_stiffness": [...], ...}',
    )
    parser.add_argument("--wait", action="store_true", help="follow the evaluation to its end and print the result")
    parser.add_argument(
        "--timeout", type=float, default=3600.0, help="seconds --wait waits at most (> 0) [default: 3600]"
    )
    args = parser.parse_args(argv)
    if not args.timeout > 0 or args.timeout == float("inf"):
        parser.error(f"--timeout: expected seconds above 0, got {args.timeout}")
    token = args.token or os.environ.get("ARENA_TOKEN")
    if not token:
        parser.error("give the team token with --token or ARENA_TOKEN")
    try:
        _base_url(args.server)
    except ValueError as e:
        parser.error(f"--server: {e}")
    if not args.benchmark and not args.phase:
        parser.error("give --benchmark or --phase")
    if not args.policy.is_file():
        parser.error(f"no file {args.policy}")
    try:
        overrides = json.loads(args.overrides) if args.overrides else None
    except ValueError as e:
        parser.error(f"--overrides is not JSON: {e}")
    try:
        s = submit(
            args.server,
            token,
            args.policy,
            benchmark=args.benchmark,
            phase=args.phase,
            agent_name=args.agent_name,
            overrides=overrides,
        )
    except SubmitError as e:
        print(f"arena-agent submit: {e}", file=sys.stderr)
        for p in e.problems:
            print(f"  - {p}", file=sys.stderr)
        return 1
    hosted = s.get("hosted") or {}
    print(
        f"submitted: submission {s['id']} of {s['benchmark']} as {s['agent_name']} "
        f"(hosted: {hosted.get('bytes')} bytes, sha256 {str(hosted.get('sha256'))[:12]}); the server evaluates it"
    )
    if not args.wait:
        print("follow it with `arena-agent submissions` or the submission's page")
        return 0
    try:
        s = wait(args.server, token, s["id"], args.timeout)
    except SubmitError as e:
        print(f"arena-agent submit: {e}", file=sys.stderr)
        return 1
    if s["status"] not in ("COMPLETED", "FAILED"):
        print(
            f"submission {s['id']} still {s['status']} after --timeout {args.timeout:g} s: the server goes on "
            "evaluating it; follow it with `arena-agent submissions` or its page",
            file=sys.stderr,
        )
        return 3
    print(f"submission {s['id']} {s['status']}: {_result(s)}")
    return 0 if s["status"] == "COMPLETED" else 1
