"""`arena-agent submissions`: a team's own submissions with their results and the quota it has
left in each phase (GET /api/v1/submissions with the team token; docs/server.md)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any, TextIO, cast
from urllib.parse import urlsplit

from .transports import AGENT_PATH

DEFAULT_SERVER = "http://127.0.0.1:8080"


def default_server() -> str:
    """The server address when --server is not given: $ARENA_SERVER, as `arena-agent` takes it."""
    return os.environ.get("ARENA_SERVER", DEFAULT_SERVER)


def _base_url(server: str) -> str:
    """The REST base of a server address, in any form `arena-agent` takes it: HOST:PORT,
    http(s)://HOST:PORT[/PREFIX], ws(s)://HOST:PORT[/PREFIX]/api/v1/agent or grpc(s)://HOST:PORT.
    TLS stays TLS (https, wss and grpcs give https) so that the team token never crosses in
    clear text where the user asked for TLS, and a path prefix (a server behind a proxy) is kept.
    ValueError for an address that is none of these."""
    url = server if "://" in server else "http://" + server
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in ("http", "https", "ws", "wss", "grpc", "grpcs"):
        raise ValueError(f"unsupported URL scheme {scheme!r} in {server!r} (use http://, https://, ws:// or grpc://)")
    if not parts.netloc:
        raise ValueError(f"no host in server URL {server!r}")
    path = parts.path.rstrip("/")
    if scheme in ("ws", "wss") and path.endswith(AGENT_PATH):
        path = path[: -len(AGENT_PATH)]
    if scheme in ("grpc", "grpcs"):
        path = ""
    tls = scheme in ("https", "wss", "grpcs")
    return f"{'https' if tls else 'http'}://{parts.netloc}{path}"


def fetch(server: str, token: str, timeout_s: float = 30.0) -> dict[str, Any]:
    """The JSON of GET /api/v1/submissions; raises RuntimeError with the server's message."""
    request = urllib.request.Request(
        f"{_base_url(server)}/api/v1/submissions", headers={"Authorization": f"Bearer {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            # The server's JSON object, as it sent it (its fields are read where they are used).
            return cast("dict[str, Any]", json.loads(response.read()))
    except urllib.error.HTTPError as e:
        try:
            message = json.loads(e.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = e.reason
        raise RuntimeError(f"the server answered {e.code}: {message}") from None
    except (urllib.error.URLError, OSError) as e:
        raise RuntimeError(f"cannot reach the server at {_base_url(server)}: {e}") from None


def _result(s: dict[str, Any]) -> str:
    scores = s.get("scores")
    if not scores:
        if s.get("status") == "FAILED" and s.get("error"):
            # Why it failed (a hosted policy that cannot run, an organiser's cancel).
            return str(s["error"])
        return "hidden until the phase ends" if s.get("results_hidden") else "-"
    parts = [f"{scores['scored']}/{scores['episodes']} scored"]
    if scores.get("failed"):
        parts.append(f"{scores['failed']} failed")
    if scores.get("success_rate") is not None:
        parts.append(f"{scores['success_metric']} {100 * scores['success_rate']:.0f}%")
    if scores.get("score") is not None:
        unit = f" {scores['primary_units']}" if scores.get("primary_units") else ""
        parts.append(f"{scores['primary']} {scores['score']:.4f}{unit}")
    return ", ".join(parts)


def _attempts(s: dict[str, Any]) -> str:
    a = s.get("attempts") or {}
    if not a.get("episodes_rerun"):
        return "-"
    return f"{a['episodes_rerun']} episode(s) re-run, {a['reruns']} extra run(s); at most {a['max_per_episode']} per episode"


def print_listing(listing: dict[str, Any], out: TextIO) -> None:
    rows = [["submission", "benchmark", "phase", "agent", "status", "result", "re-runs"]]
    for s in listing.get("submissions", []):
        rows.append(
            [
                s["id"],
                s["benchmark"],
                s.get("phase") or "-",
                s.get("agent_name") or "-",
                s["status"],
                _result(s),
                _attempts(s),
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip(), file=out)
    for q in listing.get("quotas", []):
        today = "no daily limit" if q.get("left_today") is None else f"{q['left_today']} left today"
        total = "" if q.get("max_total") is None else f", {q['left_total']} of {q['max_total']} left in the phase"
        print(
            f"phase {q['phase']}: {q['used_total']} used; {today}{total} (the day resets at {q['day_resets_at']})",
            file=out,
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="arena-agent submissions",
        description="List your team's submissions with their results (scored and failed episodes, "
        "success rate, score) and the quota left in each phase.",
    )
    parser.add_argument(
        "--server", default=default_server(), help=f"the server (default: $ARENA_SERVER or {DEFAULT_SERVER})"
    )
    parser.add_argument("--token", default=None, help="team token (or ARENA_TOKEN)")
    parser.add_argument("--json", action="store_true", help="print the server's JSON")
    args = parser.parse_args(argv)
    token = args.token or os.environ.get("ARENA_TOKEN")
    if not token:
        parser.error("give the team token with --token or ARENA_TOKEN")
    try:
        _base_url(args.server)
    except ValueError as e:
        parser.error(f"--server: {e}")
    try:
        listing = fetch(args.server, token)
    except RuntimeError as e:
        print(f"arena-agent submissions: {e}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(listing, indent=1))
    else:
        print_listing(listing, sys.stdout)
    return 0
