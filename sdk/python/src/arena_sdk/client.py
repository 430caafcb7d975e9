"""The session logic, the same on every transport: `run` connects, runs a submission or a practice
session with an `Agent`, answers heartbeats, and reconnects with exponential backoff after a lost
connection (a submission resumes where it stopped: the server re-runs only unfinished episodes).
Mirrors the Rust SDK's client (sdk/src/client.rs)."""

from __future__ import annotations

import collections
import contextlib
import enum
import logging
import math
import time
import uuid
from datetime import datetime
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import numpy as np

from ._proto import arena_pb2 as pb
from .agent import (
    REFERENCE_FRAME_SIZE,
    Batch,
    EpisodeEnd,
    EpisodeInfo,
    EpisodeSpec,
    ObservationGroup,
    ObservationLayout,
    SupportsAct,
    check_actions,
)
from .agent import agent_name as _agent_name
from .errors import FATAL_CODES, AgentError, ProtocolError, RefusedError, UnreachableError
from .g1 import ANCHOR_BODY, NUM_JOINTS
from .goal_rows import GoalRowsOnce
from .policy_config import UnsupportedPolicyError
from .transports import (
    AtCapacity,
    ConnectionLost,
    CutBeforeAnswer,
    Endpoint,
    ServerAnswered,
    Transport,
    open_transport,
    resolve_endpoint,
)

log = logging.getLogger("arena_sdk")

PROTOCOL_VERSION = 1

#: Practice episodes a session may have asked for that have not started yet (docs/protocol.md
#: §10): the server refuses a reset_episode beyond it, so more are asked for as episodes start.
PRACTICE_WAITING = 1024
#: The start of a `disconnect` reason saying the agent cannot serve the session's spec: the
#: server ends a submission that has finished no episode as FAILED with it (protocol.md §3).
AGENT_CANNOT_SERVE = "agent_cannot_serve"


@dataclass(frozen=True)
class PracticeEpisode:
    """An episode to request in practice mode (`ResetEpisode`)."""

    motion: str
    #: Start time within the motion, seconds.
    start_s: float = 0.0
    #: Episode length, seconds (0 = to the end of the motion).
    duration_s: float = 0.0
    #: Seed of domain randomisation and observation noise.
    seed: int = 0


# Events passed to `run(on_event=...)`, for progress displays and logs.


@dataclass(frozen=True)
class Connected:
    """A session started (again, after a reconnect)."""

    session_id: str
    #: Empty in practice mode.
    submission_id: str
    benchmark: str
    episodes_total: int
    episodes_remaining: int
    spec: EpisodeSpec


@dataclass(frozen=True)
class EpisodesStarted:
    episodes: list[EpisodeInfo]


@dataclass(frozen=True)
class ServerError:
    """An Error the server sent; the session goes on (or is retried, before Connected)."""

    code: str
    message: str
    step: int = 0


@dataclass(frozen=True)
class Reconnecting:
    """The connection was lost and the run connects again after `delay_s`. `attempt`: the
    reconnections tried since the last finished episode (those while a stopping server is waited
    for included)."""

    attempt: int
    delay_s: float
    error: str
    #: The server said it was stopping: these tries wait for it to come back (up to
    #: `restart_wait_s`) and do not count against `max_reconnects`.
    waiting_for_restart: bool = False


Event = Connected | EpisodesStarted | EpisodeEnd | ServerError | Reconnecting


@dataclass
class RunSummary:
    """The outcome of `run`."""

    #: Empty in practice mode.
    submission_id: str = ""
    #: The submission's status when the last session ended (e.g. "COMPLETED"); "" in practice.
    submission_status: str = ""
    benchmark: str = ""
    #: Every EpisodeEnd received, in arrival order, from every connection.
    episodes: list[EpisodeEnd] = field(default_factory=list)
    reconnects: int = 0
    #: The submission's episodes, as the last session's Connected said (0 in practice): more
    #: than `episodes` when an earlier run ran some, or when ends were lost with a connection.
    episodes_total: int = 0
    #: Once the submission completed, what became of all its episodes as the server counted them
    #: (those this run did not see end too): scored (completed or fell), and failed or timed out.
    #: None until then, and from servers that do not say.
    episodes_scored: int | None = None
    episodes_failed: int | None = None


PracticeSpec = PracticeEpisode | str | Mapping[str, object]


@dataclass(frozen=True)
class _Gains:
    """What Connect says about PD gains (joint-position benchmarks; ignored in the normalized mode)."""

    stiffness: tuple[float, ...] = ()
    damping: tuple[float, ...] = ()
    preset: str = ""


def check_gains(
    joint_stiffness: Sequence[float] | None, joint_damping: Sequence[float] | None, gain_preset: str | None
) -> _Gains:
    """ValueError for gains the server would refuse for their shape alone (it checks the values)."""
    # `is None`, not truthiness: numpy arrays (EpisodeSpec's gains, a policy's config) have none.
    stiffness = () if joint_stiffness is None else tuple(float(v) for v in joint_stiffness)
    damping = () if joint_damping is None else tuple(float(v) for v in joint_damping)
    if gain_preset and (stiffness or damping):
        raise ValueError("gain_preset excludes joint_stiffness / joint_damping (the preset names both)")
    if bool(stiffness) != bool(damping):
        raise ValueError("give joint_stiffness and joint_damping together (or neither: the benchmark's defaults)")
    for name, values in (("joint_stiffness", stiffness), ("joint_damping", damping)):
        if values and len(values) != NUM_JOINTS:
            raise ValueError(f"{name} needs {NUM_JOINTS} values (G1 joint order), got {len(values)}")
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise ValueError(f"{name} must be finite and >= 0")
    return _Gains(stiffness, damping, gain_preset or "")


def run(
    agent: SupportsAct,
    url: str,
    token: str,
    *,
    benchmark: str = "",
    transport: str | None = None,
    phase: str | None = None,
    practice: Iterable[PracticeSpec] | None = None,
    submission_id: str | None = None,
    agent_name: str | None = None,
    max_batch: int = 0,
    encoding: str = "binary",
    max_reconnects: int = 10,
    restart_wait_s: float = 300.0,
    on_event: Callable[[Event], None] | None = None,
    initial_backoff_s: float = 0.2,
    max_backoff_s: float = 5.0,
    connect_timeout_s: float = 10.0,
    joint_stiffness: Sequence[float] | None = None,
    joint_damping: Sequence[float] | None = None,
    gain_preset: str | None = None,
    reference_goal_once: bool = True,
) -> RunSummary:
    """Runs a submission (or, with `practice`, a practice session) with `agent` until it is over.

    url: the server's base URL `http://host:port` (either transport), or an explicit
        `ws://host:port/api/v1/agent` / `grpc://host:port`.
    transport: "ws" or "grpc"; None = the URL's scheme, else "ws".
    benchmark / phase: what to run (a phase implies its benchmark). submission_id: attach to an
        existing submission (created over REST, or left unfinished) instead of starting one.
    practice: episodes to request instead of submitting: `PracticeEpisode`s, motion names, or
        mappings with the same keys. Nothing is stored or ranked.
    encoding: WebSocket frames, "binary" (protobuf) or "json"; gRPC is always protobuf.
    max_reconnects: consecutive failed connections before UnreachableError (a resume refused as
        submission_busy is not one: it is tried again for up to BUSY_WAIT_S).
    restart_wait_s: after the server said it is stopping (`disconnect` "shutdown": a deploy, a
        restart), for how long reconnection attempts do not count against max_reconnects, until
        a session is accepted again; 0 counts them at once. As the Rust SDK's `restart_wait`.
    joint_stiffness / joint_damping: the PD gains the agent was trained with (29 values each, G1
        joint order), for benchmarks in the joint-position action mode; None = the benchmark's
        defaults. gain_preset: one of the benchmark's named presets instead. Gains the benchmark
        does not allow raise RefusedError("invalid_gains").
    reference_goal_once: ask for each `reference_goal` row once (docs/protocol.md §5): the server
        sends an episode's first rows with its start and one row per request instead of H, and
        the client rebuilds the group, so the agent sees the same values with about a fifth of
        BFM-Zero's rows on the wire. False asks for whole rows.

    Returns when the submission is complete or every practice episode has ended. Raises
    RefusedError (bad token, unknown benchmark, quota, ...), UnreachableError, ProtocolError, or
    AgentError when the agent returns invalid actions; exceptions of the agent propagate.
    """
    endpoint = resolve_endpoint(url, transport)
    if encoding not in ("binary", "json"):
        raise ValueError(f"encoding must be 'binary' or 'json', got {encoding!r}")
    if encoding == "json" and endpoint.transport == "grpc":
        raise ValueError("encoding='json' is for WebSocket only; gRPC always carries protobuf")
    episodes = None if practice is None else [_practice_episode(i, p) for i, p in enumerate(practice)]
    if episodes is not None and not episodes:
        raise ValueError("practice: give at least one episode")
    if episodes is not None and submission_id:
        raise ValueError("practice and submission_id exclude each other")
    if not (benchmark or phase or submission_id):
        raise ValueError("give a benchmark, a phase or a submission_id")
    gains = check_gains(joint_stiffness, joint_damping, gain_preset)
    if not (isinstance(restart_wait_s, (int, float)) and math.isfinite(restart_wait_s) and restart_wait_s >= 0):
        raise ValueError(f"restart_wait_s must be a finite number of seconds >= 0, got {restart_wait_s!r}")
    runner = _Runner(
        agent=agent,
        endpoint=endpoint,
        token=token,
        benchmark=benchmark,
        phase=phase or "",
        practice=episodes,
        submission_id=submission_id or "",
        agent_name=agent_name or _agent_name(agent),
        max_batch=max_batch,
        encoding=encoding,
        on_event=on_event,
        connect_timeout_s=connect_timeout_s,
        gains=gains,
        reference_goal_once=reference_goal_once,
    )
    try:
        return _reconnecting(runner, max_reconnects, initial_backoff_s, max_backoff_s, restart_wait_s)
    except BaseException as e:
        _note_submission(e, runner.summary.submission_id)
        raise


def _note_submission(e: BaseException, submission_id: str) -> None:
    """Names the run's submission on an exception leaving `run` (an agent's own error, an
    interrupt in a notebook), which may leave it RUNNING: a caller without an `on_event` handler
    never saw its id. As an attribute, `arena_submission_id`, and a note in the traceback
    (Python 3.11+)."""
    if not submission_id or isinstance(e, (GeneratorExit, SystemExit)):
        return
    with contextlib.suppress(AttributeError, TypeError):
        e.arena_submission_id = submission_id  # type: ignore[attr-defined]
    if hasattr(e, "add_note"):
        e.add_note(f"arena: the run's submission is {submission_id} (while RUNNING, resume it with submission_id=)")


def _reconnecting(
    runner: _Runner, max_reconnects: int, initial_backoff_s: float, max_backoff_s: float, restart_wait_s: float
) -> RunSummary:
    """The sessions of one run, reconnecting after lost ones, until it ends."""
    failures = 0  # counted against max_reconnects
    tries = 0  # since the last finished episode
    backoff = initial_backoff_s
    busy_since: float | None = None  # since when every try was refused as busy
    stopping_since: float | None = None  # since the server said it is stopping, until a session
    while True:
        seen = len(runner.summary.episodes)
        sessions = runner.sessions
        runner.throttled_until = None
        runner.busy = False
        runner.server_stopping = False
        lost = runner.session()
        if lost is None:
            return runner.summary
        if runner.sessions > sessions:
            stopping_since = None
        if runner.server_stopping and stopping_since is None:
            stopping_since = time.monotonic()
        if not runner.busy:
            busy_since = None
        else:
            # The server still holds the earlier session: not a failure, for up to BUSY_WAIT_S.
            now = time.monotonic()
            if busy_since is None:
                busy_since = now
            if now - busy_since > BUSY_WAIT_S:
                raise UnreachableError(tries + 1, f"{lost} (still busy after {BUSY_WAIT_S:g} s)")
            log.info("%s; retrying in %.1f s", lost, backoff)
            time.sleep(backoff)
            backoff = min(backoff * 2, max_backoff_s)
            continue
        if runner.throttled_until is not None:
            # Refused for the team's request rate: wait for the next window; not a failure.
            delay = throttle_delay(runner.throttled_until, time.time())
            log.warning("%s; retrying in %.1f s", lost, delay)
            time.sleep(delay)
            continue
        # Progress since the last failure resets the backoff.
        if len(runner.summary.episodes) > seen:
            failures = 0
            tries = 0
            backoff = initial_backoff_s
        tries += 1
        # A server that said it is stopping is waited for without counting.
        waiting = stopping_since is not None and time.monotonic() - stopping_since < restart_wait_s
        if not waiting:
            failures += 1
        if failures > max_reconnects:
            if stopping_since is not None:
                lost = f"{lost} (the server said it was stopping and did not take a session within {restart_wait_s:g} s)"
            raise UnreachableError(tries, lost)
        runner.on_event(Reconnecting(tries, backoff, lost, waiting))
        log.log(runner.tell_level, "connection lost (%s); reconnecting in %.1f s (attempt %d)", lost, backoff, tries)
        time.sleep(backoff)
        backoff = min(backoff * 2, max_backoff_s)
        runner.summary.reconnects += 1


FIRST_CONNECTION_CUTS = 3
"""How many times a run's first connection is tried when each try is accepted and then cut
before any answer: enough for a flaky first packet or a proxy whose backend restarts, few
enough that a ws:// URL at a TLS port stops in seconds. As the Rust SDK's
`client::FIRST_CONNECTION_CUTS`."""

BUSY_WAIT_S = 180.0
"""How long a resume refused as `submission_busy` is tried again before the run gives up: past
the server's default heartbeat timeout (60 s), after which it drops a session it no longer hears
from, with room for a server configured longer. As the Rust SDK's `client::BUSY_WAIT`."""


def throttle_delay(resets_at: float, now: float) -> float:
    """Seconds to wait after a rate-limit refusal, as the Rust SDK waits: until the server's
    window resets (at most 60 s) and a quarter second more; 5 s when that time is already past
    on this machine's clock (the clocks disagree), so that a client ahead of the server does not
    ask again four times a second."""
    remaining = resets_at - now
    if remaining < 0:
        return 5.0
    return min(remaining, 60.0) + 0.25


def _unix_time(rfc3339: str) -> float:
    """An RFC 3339 time as seconds since the epoch; a few seconds from now if unreadable."""
    try:
        return datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return time.time() + 5.0


def _practice_episode(index: int, p: PracticeSpec) -> PracticeEpisode:
    """Item `index` of `practice` as a PracticeEpisode; ValueError (before any connection) for
    what no server could take: a motion that is not a name, times that are not finite numbers, a
    seed outside uint64. Ranges that depend on the motion (start_s within the clip) are the
    server's to check (RefusedError)."""
    where = f"practice[{index}]"
    if isinstance(p, PracticeEpisode):
        e = p
    elif isinstance(p, str):
        e = PracticeEpisode(p)
    elif isinstance(p, Mapping):
        try:
            e = PracticeEpisode(**p)  # type: ignore[arg-type]
        except TypeError as err:
            raise ValueError(f"{where}: {err} (keys: motion, start_s, duration_s, seed)") from None
    else:
        raise ValueError(f"{where}: a motion name, a PracticeEpisode or a mapping, got {type(p).__name__}")
    if not isinstance(e.motion, str) or not e.motion:
        raise ValueError(f"{where}: motion must be a non-empty name, got {e.motion!r}")
    for name in ("start_s", "duration_s"):
        value = getattr(e, name)
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ValueError(f"{where}: {name} must be a number, got {value!r}")
        if not math.isfinite(value):
            raise ValueError(f"{where}: {name} must be finite, got {value!r}")
    if isinstance(e.seed, bool) or not isinstance(e.seed, (int, np.integer)) or not 0 <= e.seed < 2**64:
        raise ValueError(f"{where}: seed must be an integer in [0, 2**64), got {e.seed!r}")
    return e


class _Runner:
    """State that survives reconnects, and one session per `session()` call."""

    def __init__(
        self,
        *,
        agent: SupportsAct,
        endpoint: Endpoint,
        token: str,
        benchmark: str,
        phase: str,
        practice: list[PracticeEpisode] | None,
        submission_id: str,
        agent_name: str,
        max_batch: int,
        encoding: str,
        on_event: Callable[[Event], None] | None,
        connect_timeout_s: float,
        gains: _Gains,
        reference_goal_once: bool,
    ) -> None:
        self.agent = agent
        self.endpoint = endpoint
        self.token = token
        self.benchmark = benchmark
        self.phase = phase
        self.agent_name = agent_name
        self.max_batch = max_batch
        self.encoding = encoding
        self.on_event: Callable[[Event], None] = on_event or (lambda event: None)
        # A caller's handler shows the reconnects and server errors it is given (the CLI prints
        # them), so the log says them at DEBUG then, not a second time at WARNING.
        self.tell_level = logging.DEBUG if on_event is not None else logging.WARNING
        self.connect_timeout_s = connect_timeout_s
        self.gains = gains
        self.reference_goal_once = reference_goal_once
        # Practice: the episodes asked for, and the indices of those that ended (the others
        # are requested again after a reconnect).
        self.practice = practice
        self.practice_done: set[int] = set()
        self.summary = RunSummary(submission_id=submission_id, benchmark=benchmark)
        # Motion of each episode id, to label EpisodeEnds (ids are stable within a submission).
        self.motions: dict[int, str] = {}
        # Set when the server refused the Connect as rate-limited: when to try again.
        self.throttled_until: float | None = None
        # The last Connect was refused as submission_busy.
        self.busy = False
        # Whether a connection to the server was ever made in this run.
        self.reached = False
        # First connections accepted and then cut before any answer, while `reached` is unset.
        self.first_cuts = 0
        # The caller was told the server is at its connection caps, since the last session.
        self.told_at_capacity = False
        # Sessions the server accepted (`connected`) in this run.
        self.sessions = 0
        # The last session ended with the server saying it is stopping.
        self.server_stopping = False
        # Sent with each connect until one is `connected` to a submission (Connect.connect_key):
        # a connect lost before its answer came made a submission whose id this client never
        # learnt, and the next connect attaches to it instead of making another.
        self.connect_key = uuid.uuid4().hex
        # The session the last `connected` opened (Connect.previous_session_id on the next
        # connect: a lost connection the server has not noticed gives way to the new one).
        self.last_session_id = ""

    def session(self) -> str | None:
        """One connection: None when the run is over, else why the connection was lost."""
        connect = _connect_envelope(
            agent_name=self.agent_name,
            token=self.token,
            mode="practice" if self.practice is not None else "submission",
            benchmark=self.benchmark,
            submission_id=self.summary.submission_id,
            max_batch=self.max_batch,
            phase=self.phase,
            gains=self.gains,
            reference_goal_once=self.reference_goal_once,
            connect_key=self.connect_key if self.practice is None and not self.summary.submission_id else "",
            previous_session_id=self.last_session_id if self.practice is None else "",
        )
        try:
            connection = open_transport(self.endpoint, self.encoding, self.connect_timeout_s)
        except AtCapacity as e:
            return self._at_capacity(e)
        except ConnectionLost as e:
            if not self.reached and not isinstance(e, ServerAnswered):
                # Nothing listening, or the wrong host or port: reconnecting is for connections
                # that were up, so the run stops at once.
                raise UnreachableError(1, f"cannot reach the server at {self.endpoint.address}: {e}") from e
            if not self.reached and isinstance(e, CutBeforeAnswer):
                self.first_cuts += 1
                if self.first_cuts >= FIRST_CONNECTION_CUTS:
                    raise UnreachableError(
                        self.first_cuts,
                        f"cannot reach the server at {self.endpoint.address}: {e} (each of {self.first_cuts} tries "
                        "was accepted and then closed before any answer: a ws:// URL at a TLS port, or a proxy "
                        "that does not pass WebSocket upgrades?)",
                    ) from e
                return str(e)
            self.reached = True
            return str(e)
        self.reached = True
        try:
            connection.send(connect)
            return _Session(self, connection).serve()
        except AtCapacity as e:  # gRPC's refusal comes as the stream's end
            return self._at_capacity(e)
        except ConnectionLost as e:
            return str(e)
        finally:
            connection.close()

    def _at_capacity(self, e: AtCapacity) -> str:
        """Not a failure: the server is there and full. Told once, then waited out as a busy
        submission is, up to BUSY_WAIT_S."""
        self.reached = True
        self.busy = True
        if not self.told_at_capacity:
            self.told_at_capacity = True
            self.on_event(ServerError("too_many_connections", f"{e}; waiting for a place (up to {BUSY_WAIT_S:g} s)", 0))
        return str(e)


class _Session:
    """One connection's session: dispatches the server's messages until it ends."""

    def __init__(self, runner: _Runner, connection: Transport) -> None:
        self.runner = runner
        self.connection = connection
        self.layout: ObservationLayout | None = None
        # Sessions that send each `reference_goal` row once: the rows each running episode has.
        self.goal_rows: GoalRowsOnce | None = None
        self.action_size = 0
        self.joint_position = False
        self.heartbeat_every = 30.0
        self.silence_limit = 60.0
        now = time.monotonic()
        self.last_heard = now
        self.last_sent = now
        self.send_failed: ConnectionLost | None = None
        # Practice: indices (in runner.practice) of the episodes requested on this connection,
        # in order: episode ids count the accepted requests (a refused one ends the run).
        self.requested: list[int] = []
        # Practice: the indices still to ask for, and how many episodes have started.
        self.to_request: collections.deque[int] = collections.deque()
        self.started = 0

    def request_practice(self) -> None:
        """Asks for practice episodes while fewer than PRACTICE_WAITING wait to start."""
        practice = self.runner.practice or ()
        while self.to_request and len(self.requested) - self.started < PRACTICE_WAITING:
            index = self.to_request.popleft()
            episode = practice[index]
            envelope = pb.Envelope()
            r = envelope.reset_episode
            r.motion, r.start_s, r.duration_s, r.seed = (
                episode.motion,
                float(episode.start_s),
                float(episode.duration_s),
                int(episode.seed),
            )
            self.send(envelope)
            self.requested.append(index)

    def send(self, envelope: pb.Envelope) -> None:
        if self.send_failed is not None:
            return
        try:
            self.connection.send(envelope)
        except ConnectionLost as e:
            # The server may have closed the session while the agent was acting: what it sent
            # before closing (episode ends, disconnect) is still to be read, so keep reading.
            self.send_failed = e
            return
        self.last_sent = time.monotonic()

    def serve(self) -> str | None:
        while True:
            now = time.monotonic()
            if now - self.last_sent >= self.heartbeat_every:
                self.send(_heartbeat())
            deadline = min(self.last_sent + self.heartbeat_every, self.last_heard + self.silence_limit)
            try:
                envelope = self.connection.recv(max(0.01, deadline - now))
            except ConnectionLost as lost:
                if self.send_failed is not None:
                    raise self.send_failed from lost
                raise
            if envelope is None:
                # Silence counts only when nothing is waiting: a slow `act` is not the server's.
                if time.monotonic() - self.last_heard > self.silence_limit:
                    return f"server silent for {self.silence_limit:g} s"
                continue
            self.last_heard = time.monotonic()
            kind = envelope.WhichOneof("msg")
            handler: Callable[[Any], _Outcome] | None = getattr(self, f"on_{kind}", None) if kind else None
            if handler is None:
                if kind in ("connect", "reset_episode", "action"):
                    raise ProtocolError(f"the server sent a client message ({kind})")
                log.warning("ignoring a message this SDK does not know (%s)", kind or "empty Envelope")
                continue
            outcome = handler(getattr(envelope, kind))
            if outcome is not _CONTINUE:
                return outcome

    def on_connected(self, c: pb.Connected) -> _Outcome:
        spec = _spec(c.spec)
        self.layout = spec.layout
        self.goal_rows = GoalRowsOnce(spec.layout) if c.spec.reference_goal_once else None
        self.action_size = spec.action_size
        self.joint_position = spec.action_mode == "joint_position"
        # Bounded as the Rust SDK does: a day is more than any server asks, and inf would
        # overflow the waits.
        if math.isfinite(c.heartbeat_interval_s) and c.heartbeat_interval_s > 0:
            self.heartbeat_every = min(c.heartbeat_interval_s, 86_400.0)
        if math.isfinite(c.heartbeat_timeout_s) and c.heartbeat_timeout_s > 0:
            self.silence_limit = min(c.heartbeat_timeout_s, 86_400.0)
        log.info(
            "session %s: %s, %d of %d episodes to run",
            c.session_id,
            f"submission {c.submission_id}" if c.submission_id else "practice",
            c.episodes_remaining,
            c.episodes_total,
        )
        self.runner.sessions += 1
        self.runner.told_at_capacity = False
        summary = self.runner.summary
        summary.submission_id = c.submission_id
        self.runner.last_session_id = c.session_id
        summary.benchmark = c.benchmark
        summary.episodes_total = c.episodes_total
        # Told first: an agent whose `configure` refuses the spec leaves a submission RUNNING,
        # and the user needs its id to resume or cancel it.
        self.runner.on_event(
            Connected(c.session_id, c.submission_id, c.benchmark, c.episodes_total, c.episodes_remaining, spec)
        )
        configure = getattr(self.runner.agent, "configure", None)
        if configure is not None:
            try:
                configure(spec)
            except UnsupportedPolicyError as e:
                # Said to the server, so that a submission this agent can never run does not
                # wait a day as RUNNING (it ends FAILED if no episode has finished).
                bye = pb.Envelope()
                bye.disconnect.reason = f"{AGENT_CANNOT_SERVE}: {'; '.join(e.problems) or e}"
                self.send(bye)
                raise
        practice = self.runner.practice or ()
        self.to_request.extend(i for i in range(len(practice)) if i not in self.runner.practice_done)
        self.request_practice()
        return _CONTINUE

    def on_episode_start(self, s: pb.EpisodeStart) -> _Outcome:
        infos = [_episode_info(e) for e in s.episodes]
        if self.goal_rows is not None:
            for e in s.episodes:
                self.goal_rows.start(e.episode_id, e.reference_goal)
        for info in infos:
            self.runner.motions[info.episode_id] = info.motion
        reset = getattr(self.runner.agent, "reset", None)
        if reset is not None:
            reset(infos)
        self.runner.on_event(EpisodesStarted(infos))
        self.started += len(infos)
        self.request_practice()
        return _CONTINUE

    def on_get_action(self, request: pb.GetAction) -> _Outcome:
        if self.layout is None:
            raise ProtocolError("GetAction before Connected")
        observations = request.observations
        goal = self.goal_rows
        n, d = len(observations), self.layout.size
        # The row as sent: the layout's, less the goal rows sent before.
        sent = d if goal is None else goal.sent_row_size
        ids = np.empty(n, np.uint32)
        steps = np.empty(n, np.uint32)
        values = np.empty((n, d), np.float32)
        for i, o in enumerate(observations):
            if len(o.values) != sent:
                raise ProtocolError(
                    f"GetAction {request.step}: episode {o.episode_id} has {len(o.values)} observation values, "
                    f"the spec says {sent}"
                )
            ids[i] = o.episode_id
            steps[i] = o.episode_step
            if goal is None:
                values[i] = o.values
            else:
                try:
                    goal.expand(o.episode_id, o.episode_step, np.asarray(o.values, np.float32), values[i])
                except ProtocolError as e:
                    raise ProtocolError(f"GetAction {request.step}: {e}") from None
        envelope = pb.Envelope()
        answer = envelope.action
        answer.step = request.step
        if n:
            batch = Batch(request.step, ids, steps, values, self.layout)
            # JSON writes NaN as null and the server refuses the whole frame; protobuf carries it,
            # and the server fails that episode only.
            protobuf = self.runner.endpoint.transport == "grpc" or self.runner.encoding == "binary"
            try:
                actions = check_actions(
                    self.runner.agent,
                    self.runner.agent.act(batch),
                    batch,
                    self.action_size,
                    send_non_finite=protobuf,
                    joint_position=self.joint_position,
                )
            except AgentError as e:
                # The server learns why the session ends (its episodes go back to the queue).
                bye = pb.Envelope()
                bye.disconnect.reason = f"agent failed: {e}"[:1000]
                self.send(bye)
                raise
            for episode_id, row in zip(ids.tolist(), actions.tolist()):
                answer.actions.add(episode_id=episode_id, values=row)
        self.send(envelope)
        return _CONTINUE

    def on_episode_end(self, e: pb.EpisodeEnd) -> _Outcome:
        if self.goal_rows is not None:
            self.goal_rows.end(e.episode_id)
        runner = self.runner
        end = EpisodeEnd(
            episode_id=e.episode_id,
            status=e.status,
            reason=e.reason,
            steps=e.steps,
            metrics=dict(e.metrics),
            motion=runner.motions.get(e.episode_id, ""),
        )
        hook = getattr(runner.agent, "end", None)
        if hook is not None:
            hook(end)
        runner.on_event(end)
        runner.summary.episodes.append(end)
        if runner.practice is None:
            return _CONTINUE
        if e.episode_id < len(self.requested):
            runner.practice_done.add(self.requested[e.episode_id])
        if len(runner.practice_done) < len(runner.practice):
            return _CONTINUE
        bye = pb.Envelope()
        bye.disconnect.reason = "client_done"
        self.send(bye)
        return None

    def on_heartbeat(self, _: pb.Heartbeat) -> _Outcome:
        self.send(_heartbeat())
        return _CONTINUE

    def on_error(self, e: pb.Error) -> _Outcome:
        if self.layout is None:  # a refused Connect: the server closes the connection
            if e.code in FATAL_CODES:
                raise RefusedError(e.code, e.message, e.limit, e.resets_at)
            if e.code == "rate_limited":
                self.runner.on_event(ServerError(e.code, e.message, e.step))
                self.runner.throttled_until = _unix_time(e.resets_at)
                return f"{e.code}: {e.message}"
            if e.code == "submission_finished":
                # COMPLETED, or FAILED (cancelled by the organiser).
                if e.submission_status:
                    self.runner.summary.submission_status = e.submission_status
                # What became of all its episodes: this run may have lost their ends with a
                # connection (older servers send no counts).
                if e.episodes_scored + e.episodes_failed > 0:
                    self.runner.summary.episodes_scored = e.episodes_scored
                    self.runner.summary.episodes_failed = e.episodes_failed
                return None
            # The old session is still being torn down (submission_busy), or another
            # non-fatal refusal.
            self.runner.busy = e.code == "submission_busy"
            self.runner.on_event(ServerError(e.code, e.message, e.step))
            return f"{e.code}: {e.message}"
        # A refused practice request would never produce its EpisodeEnd.
        if self.runner.practice is not None and e.code in ("unknown_motion", "invalid_message"):
            raise RefusedError(e.code, e.message, e.limit, e.resets_at)
        log.log(self.runner.tell_level, "server error: %s: %s", e.code, e.message)
        self.runner.on_event(ServerError(e.code, e.message, e.step))
        return _CONTINUE

    def on_disconnect(self, d: pb.Disconnect) -> _Outcome:
        self.runner.summary.submission_status = d.submission_status
        if d.reason in ("submission_complete", "submission_cancelled") and d.episodes_scored + d.episodes_failed > 0:
            self.runner.summary.episodes_scored = d.episodes_scored
            self.runner.summary.episodes_failed = d.episodes_failed
        if d.reason in ("submission_complete", "submission_cancelled", "client_done"):
            return None
        self.runner.server_stopping = d.reason == "shutdown"
        return f"server ended the session: {d.reason}"


class _Continue(enum.Enum):
    CONTINUE = enum.auto()


# Returned by handlers to keep the session going (None ends it, a string is a lost connection);
# a one-member enum rather than object() so that `outcome is not _CONTINUE` narrows the type.
_CONTINUE = _Continue.CONTINUE
#: What a `_Session.on_*` handler returns.
_Outcome: TypeAlias = Literal[_Continue.CONTINUE] | str | None


def _connect_envelope(
    *,
    agent_name: str,
    token: str,
    mode: str,
    benchmark: str,
    submission_id: str,
    max_batch: int,
    phase: str,
    gains: _Gains,
    reference_goal_once: bool,
    connect_key: str = "",
    previous_session_id: str = "",
) -> pb.Envelope:
    envelope = pb.Envelope()
    c = envelope.connect
    c.protocol_version = PROTOCOL_VERSION
    c.agent_name = agent_name
    c.token = token
    c.mode = mode
    c.benchmark = benchmark
    c.submission_id = submission_id
    c.max_batch = max_batch
    c.phase = phase
    c.joint_stiffness.extend(gains.stiffness)
    c.joint_damping.extend(gains.damping)
    c.gain_preset = gains.preset
    c.reference_goal_once = reference_goal_once
    c.connect_key = connect_key
    c.previous_session_id = previous_session_id
    return envelope


def fetch_spec(
    url: str,
    token: str,
    *,
    benchmark: str = "",
    phase: str | None = None,
    transport: str | None = None,
    joint_stiffness: Sequence[float] | None = None,
    joint_damping: Sequence[float] | None = None,
    gain_preset: str | None = None,
    agent_name: str = "spec-check",
    timeout_s: float = 30.0,
) -> EpisodeSpec | None:
    """The EpisodeSpec a session of `benchmark` (or `phase`) gets with these gains, read from a
    practice connection that runs no episode and stores nothing; for checking an agent against a
    benchmark before a submission exists.

    Raises RefusedError where the submission would be refused too (bad token, unknown benchmark,
    invalid_gains, phase closed, ...). Returns None when the server allows no practice there
    (`forbidden`: a private phase) or the check could not be made (unreachable, rate-limited):
    the caller then learns the spec from `run`'s Connected, as usual. Raises ProtocolError for an
    answer outside the protocol (not an arena at that URL, or a server of another protocol
    version): a caller that went on would create a submission its session then cannot run.
    """
    if not (benchmark or phase):
        raise ValueError("give a benchmark or a phase")
    endpoint = resolve_endpoint(url, transport)
    connect = _connect_envelope(
        agent_name=agent_name,
        token=token,
        mode="practice",
        benchmark=benchmark,
        submission_id="",
        max_batch=0,
        phase=phase or "",
        gains=check_gains(joint_stiffness, joint_damping, gain_preset),
        # No episode runs: the announced layout is the same either way.
        reference_goal_once=False,
    )
    try:
        connection = open_transport(endpoint, "binary", timeout_s)
    except ConnectionLost as e:
        log.warning("could not check the benchmark's spec: %s", e)
        return None
    try:
        connection.send(connect)
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            envelope = connection.recv(left)
            if envelope is None:
                continue
            kind = envelope.WhichOneof("msg")
            if kind == "connected":
                bye = pb.Envelope()
                bye.disconnect.reason = "client_done"
                connection.send(bye)
                return _spec(envelope.connected.spec)
            if kind == "error":
                refusal = envelope.error
                if refusal.code in FATAL_CODES and refusal.code != "forbidden":
                    raise RefusedError(refusal.code, refusal.message, refusal.limit, refusal.resets_at)
                log.warning("could not check the benchmark's spec: %s: %s", refusal.code, refusal.message)
                return None
            if kind == "heartbeat":
                connection.send(_heartbeat())
        log.warning("could not check the benchmark's spec: no answer within %g s", timeout_s)
        return None
    except ConnectionLost as e:
        log.warning("could not check the benchmark's spec: %s", e)
        return None
    finally:
        connection.close()


def _heartbeat() -> pb.Envelope:
    envelope = pb.Envelope()
    envelope.heartbeat.time = time.time()
    return envelope


def _spec(s: pb.EpisodeSpec) -> EpisodeSpec:
    return EpisodeSpec(
        observations=tuple(ObservationGroup(g.name, g.size) for g in s.observations),
        action_size=s.action_size,
        control_hz=s.control_hz,
        max_batch=s.max_batch,
        max_in_flight=s.max_in_flight,
        step_timeout_s=s.step_timeout_s,
        default_joint_pos=np.array(s.default_joint_pos, dtype=np.float64),
        action_scale=np.array(s.action_scale, dtype=np.float64),
        action_mode=s.action_mode,
        joint_stiffness=np.array(s.joint_stiffness, dtype=np.float64),
        joint_damping=np.array(s.joint_damping, dtype=np.float64),
        effort_limit=np.array(s.effort_limit, dtype=np.float64),
        anchor_body=s.anchor_body or ANCHOR_BODY,
    )


def _episode_info(e: pb.EpisodeInfo) -> EpisodeInfo:
    reference = None
    if e.HasField("reference"):
        qpos = np.array(e.reference.qpos, dtype=np.float64)
        frames = e.reference.frames
        if qpos.size != frames * REFERENCE_FRAME_SIZE:
            raise ProtocolError(
                f"episode {e.episode_id}: reference of {frames} frames has {qpos.size} values, "
                f"expected {frames * REFERENCE_FRAME_SIZE}"
            )
        reference = qpos.reshape(frames, REFERENCE_FRAME_SIZE)
    return EpisodeInfo(
        episode_id=e.episode_id,
        motion=e.motion,
        start_s=e.start_s,
        duration_s=e.duration_s,
        steps=e.steps,
        seed=e.seed,
        dr_level=e.dr_level,
        attempt=e.attempt,
        reference=reference,
        reference_fps=e.reference.fps if reference is not None else 0.0,
    )


__all__ = [
    "Connected",
    "EpisodesStarted",
    "Event",
    "PracticeEpisode",
    "Reconnecting",
    "RunSummary",
    "ServerError",
    "fetch_spec",
    "run",
]
