"""Exceptions raised by `arena_sdk.run`; all derive from `ArenaError`."""

from __future__ import annotations

# Codes refusing a Connect after which reconnecting cannot help (docs/protocol.md §8; invalid_gains:
# gains or a gain preset the benchmark does not allow), plus the access codes of challenge phases.
# Any other refusal (e.g. submission_busy) is retried.
FATAL_CODES = frozenset(
    {
        "unauthorized",
        "unsupported_version",
        "unknown_benchmark",
        "benchmark_unavailable",
        "benchmark_changed",
        "invalid_gains",
        "unknown_submission",
        "invalid_message",
        "unknown_phase",
        "phase_closed",
        "forbidden",
        "quota_exceeded",
    }
)


class ArenaError(Exception):
    """Base class of every error of the SDK."""


class RefusedError(ArenaError):
    """The server refused the session, or a practice request, with an Error: not retried.

    `code` is the stable error code (e.g. "unauthorized", "quota_exceeded"); `limit` and
    `resets_at` (RFC 3339, "" when it never resets) are set for quota_exceeded.
    """

    def __init__(self, code: str, message: str, limit: int = 0, resets_at: str = "") -> None:
        self.code = code
        self.message = message
        self.limit = limit
        self.resets_at = resets_at
        text = f"server refused the session: {code}: {message}"
        if limit:
            text += f" (limit {limit}" + (f", resets at {resets_at})" if resets_at else ")")
        super().__init__(text)


class UnreachableError(ArenaError):
    """No session could be (re)established within `max_reconnects` attempts."""

    def __init__(self, attempts: int, last_error: str) -> None:
        self.attempts = attempts
        self.last_error = last_error
        tries = "1 connection attempt" if attempts == 1 else f"{attempts} connection attempts"
        super().__init__(f"gave up after {tries}: {last_error}")


class ProtocolError(ArenaError):
    """The server sent something undecodable or out of place (a server bug)."""


class AgentError(ArenaError):
    """The agent returned something that is not a valid batch of actions."""

    def __init__(self, agent: str, message: str) -> None:
        self.agent = agent
        super().__init__(f"agent {agent}: {message}")
