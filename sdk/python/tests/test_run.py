"""`arena_sdk.run` in-process against a real server: practice over both transports, JSON over
WebSocket, refusals, invalid agent output, reconnecting; plus the pieces that need no server."""

from __future__ import annotations

import logging
import sys
import math
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import numpy as np
import pytest
from conftest import EXAMPLES, Server, start_server

import arena_sdk
from arena_sdk import (
    Agent,
    AgentError,
    Batch,
    EpisodeSpec,
    PracticeEpisode,
    RefusedError,
    UnreachableError,
    run,
)
from arena_sdk._proto import arena_pb2 as pb
from arena_sdk.cli import load_agent
from arena_sdk.transports import Endpoint, envelope_from_json, envelope_to_json, resolve_endpoint


def replay_agent() -> Agent:
    return load_agent(f"{EXAMPLES / 'replay_agent.py'}:ReplayAgent")  # type: ignore[return-value]


class RecordingAgent(Agent):
    """Zero actions; records what the client gave it."""

    def __init__(self) -> None:
        self.spec: EpisodeSpec | None = None
        self.started: list[int] = []
        self.ended: list[int] = []
        self.batches = 0
        self.goal_rows = 0

    def configure(self, spec: EpisodeSpec) -> None:
        self.spec = spec

    def reset(self, episodes) -> None:
        self.started += [e.episode_id for e in episodes]

    def act(self, batch: Batch) -> np.ndarray:
        self.batches += 1
        assert batch.observations.shape == (len(batch), batch.layout.size)
        assert batch.observations.dtype == np.float32
        assert set(batch.episode_ids.tolist()) <= set(self.started)
        if arena_sdk.REFERENCE_GOAL_GROUP in batch.layout:
            rows = batch.group(arena_sdk.REFERENCE_GOAL_GROUP).reshape(len(batch), -1, arena_sdk.REFERENCE_GOAL_ROW_SIZE)
            # Each row is the reference's state (projected gravity at 58:61, a unit vector) then
            # its privileged_state (root height first): the offsets line up.
            assert np.allclose(np.linalg.norm(rows[:, :, 58:61], axis=2), 1.0, atol=1e-5)
            assert (rows[:, :, 64] > 0.3).all()
            self.goal_rows += rows.shape[0] * rows.shape[1]
        return np.zeros((len(batch), 29), np.float32)

    def end(self, result) -> None:
        self.ended.append(result.episode_id)


# --- practice sessions ------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_practice_both_transports(server: Server, team_token: str, transport: str) -> None:
    agent = replay_agent()
    events: list[object] = []
    episodes = [
        PracticeEpisode("squat", start_s=1.0, duration_s=0.1, seed=7),
        "stand",
        {"motion": "arm_wave", "duration_s": 0.5},
    ]
    summary = run(
        agent,
        server.http_url,
        team_token,
        benchmark="g1-smoke",
        transport=transport,
        practice=episodes,
        on_event=events.append,
    )
    assert summary.submission_id == ""
    by_motion = {e.motion: e for e in summary.episodes}
    assert sorted(by_motion) == ["arm_wave", "squat", "stand"]
    assert by_motion["squat"].steps == 5
    assert by_motion["arm_wave"].steps == 25
    assert by_motion["stand"].steps == 200
    assert all(e.status == "completed" and "emd" in e.metrics for e in summary.episodes)
    connected = [e for e in events if isinstance(e, arena_sdk.Connected)]
    assert len(connected) == 1 and connected[0].benchmark == "g1-smoke"
    spec = connected[0].spec
    assert [g.name for g in spec.observations] == [
        "state",
        "last_action",
        "history_actor",
        "reference",
        "reference_goal",
    ]
    assert spec.layout["reference"] == slice(465, 501)
    assert spec.layout[arena_sdk.REFERENCE_GOAL_GROUP] == slice(501, 501 + 8 * 527)
    assert spec.layout.size == 4717
    assert spec.default_joint_pos.shape == (29,) and spec.action_scale.shape == (29,)


class GoalRowsAgent(Agent):
    """Zero actions; keeps every `reference_goal` group it is given, by episode and step."""

    def __init__(self) -> None:
        self.spec: EpisodeSpec | None = None
        self.rows: dict[tuple[int, int], np.ndarray] = {}

    def configure(self, spec: EpisodeSpec) -> None:
        self.spec = spec

    def act(self, batch: Batch) -> np.ndarray:
        goal = batch.group(arena_sdk.REFERENCE_GOAL_GROUP)
        for i, (episode, step) in enumerate(zip(batch.episode_ids.tolist(), batch.episode_steps.tolist())):
            self.rows[(episode, step)] = goal[i].copy()
        return np.zeros((len(batch), 29), np.float32)


@pytest.mark.parametrize(("transport", "encoding"), [("ws", "binary"), ("ws", "json"), ("grpc", "binary")])
def test_reference_goal_rows_sent_once_are_rebuilt_whole(
    server: Server, team_token: str, transport: str, encoding: str
) -> None:
    """With each row sent once (the default) the agent gets the same groups as with whole rows."""
    episodes = [PracticeEpisode("squat", start_s=1.0, duration_s=0.3, seed=7), {"motion": "arm_wave", "duration_s": 0.4}]
    seen = {}
    for once in (True, False):
        agent = GoalRowsAgent()
        summary = run(
            agent,
            server.http_url,
            team_token,
            benchmark="g1-smoke",
            transport=transport,
            encoding=encoding,
            practice=episodes,
            reference_goal_once=once,
        )
        assert all(e.status == "completed" for e in summary.episodes), summary.episodes
        seen[once] = agent.rows
    assert len(seen[True]) == 15 + 20
    assert seen[True].keys() == seen[False].keys()
    for key, rows in seen[False].items():
        assert rows.shape == (8 * arena_sdk.REFERENCE_GOAL_ROW_SIZE,)
        np.testing.assert_array_equal(seen[True][key], rows, err_msg=str(key))


def test_goal_rows_once_refuses_what_the_protocol_rules_out() -> None:
    from arena_sdk.agent import ObservationGroup, ObservationLayout
    from arena_sdk.errors import ProtocolError
    from arena_sdk.goal_rows import GoalRowsOnce

    w = arena_sdk.REFERENCE_GOAL_ROW_SIZE
    layout = ObservationLayout([ObservationGroup("state", 2), ObservationGroup("reference_goal", 3 * w)])
    goal = GoalRowsOnce(layout)
    assert goal.sent_row_size == 2 + w
    out = np.empty(layout.size, np.float32)

    def sent(step: int) -> np.ndarray:
        return np.concatenate([[step, -1.0], np.full(w, step + 3.5)]).astype(np.float32)

    with pytest.raises(ProtocolError, match="episode_start was not received"):
        goal.expand(1, 0, sent(0), out)
    goal.start(1, np.concatenate([np.full(w, 1.5), np.full(w, 2.5)]))
    with pytest.raises(ProtocolError, match="step 1 after its start"):
        goal.expand(1, 1, sent(1), out)
    for step in range(4):
        goal.expand(1, step, sent(step), out)
        rows = out[2:].reshape(3, w)
        assert out[0] == step and (rows[:, 0] == [step + 1.5, step + 2.5, step + 3.5]).all()
    with pytest.raises(ProtocolError, match="step 5 after step 3"):
        goal.expand(1, 5, sent(5), out)
    with pytest.raises(ProtocolError, match="needs 1054"):
        goal.start(2, np.zeros(w))
    goal.start(3, [])
    with pytest.raises(ProtocolError, match="carried no reference_goal rows"):
        goal.expand(3, 0, sent(0), out)
    with pytest.raises(ProtocolError, match="no reference_goal group"):
        GoalRowsOnce(ObservationLayout([ObservationGroup("state", 64)]))


def test_practice_explicit_urls(server: Server, team_token: str) -> None:
    for url in (server.ws_url, server.grpc_url):
        summary = run(
            RecordingAgent(), url, team_token, benchmark="g1-smoke", practice=[PracticeEpisode("squat", duration_s=0.1)]
        )
        assert [e.status for e in summary.episodes] == ["completed"], url


def test_practice_longer_than_the_waiting_bound(server: Server, team_token: str) -> None:
    """More practice episodes than may wait to start at once (PRACTICE_WAITING): the client asks
    for more as episodes start (before, the server refused the 1025th and the run raised)."""
    from arena_sdk.client import PRACTICE_WAITING

    asked = PRACTICE_WAITING + 40
    summary = run(
        RecordingAgent(), server.http_url, team_token, benchmark="g1-smoke", practice=[{"motion": "stand", "duration_s": 0.04}] * asked
    )
    assert len(summary.episodes) == asked and {e.status for e in summary.episodes} == {"completed"}


@pytest.mark.parametrize(
    ("item", "says"),
    [
        ({"motion": "squat", "start_s": float("nan")}, "practice[1]: start_s must be finite"),
        ({"motion": "squat", "duration_s": float("inf")}, "practice[1]: duration_s must be finite"),
        ({"motion": "squat", "start_s": "1.0"}, "practice[1]: start_s must be a number"),
        ({"motion": "squat", "seed": -1}, "practice[1]: seed must be an integer in [0, 2**64)"),
        ({"motion": "squat", "speed": 2}, "practice[1]: "),
        (3, "practice[1]: a motion name, a PracticeEpisode or a mapping"),
        ("", "practice[1]: motion must be a non-empty name"),
    ],
)
def test_practice_items_no_server_could_take_are_refused_before_connecting(item: object, says: str) -> None:
    # Port 9 is closed: a check after connecting would raise UnreachableError instead.
    with pytest.raises(ValueError) as info:
        run(RecordingAgent(), "http://127.0.0.1:9", "t", benchmark="g1-smoke", encoding="json", practice=["squat", item])
    assert says in str(info.value), str(info.value)


def test_json_encoding_submission(server: Server, team_token: str) -> None:
    agent = RecordingAgent()
    summary = run(agent, server.http_url, team_token, benchmark="g1-smoke", encoding="json", agent_name="py-json")
    assert summary.submission_status == "COMPLETED"
    assert agent.goal_rows > 0, "g1-smoke sends reference_goal rows"
    assert sorted(e.episode_id for e in summary.episodes) == list(range(6))
    assert sorted(agent.started) == sorted(agent.ended) == list(range(6))
    status, body = server.request("GET", f"/api/v1/submissions/{summary.submission_id}", team_token)
    assert status == 200 and body["status"] == "COMPLETED" and body["agent_name"] == "py-json"


def test_replay_scores_match_over_both_encodings(server: Server, team_token: str) -> None:
    """The same deterministic agent gets the same metrics whatever the wire format."""
    emd = {}
    for encoding in ("binary", "json"):
        summary = run(
            replay_agent(), server.http_url, team_token, benchmark="g1-smoke", encoding=encoding, practice=["squat"]
        )
        emd[encoding] = summary.episodes[0].metrics["emd"]
    assert emd["binary"] == pytest.approx(emd["json"], rel=1e-9)


def test_attach_to_a_submission_created_over_rest(server: Server, team_token: str) -> None:
    status, created = server.request("POST", "/api/v1/submissions", team_token, {"benchmark": "g1-smoke"})
    assert status == 201, created
    summary = run(RecordingAgent(), server.http_url, team_token, submission_id=created["id"], transport="grpc")
    assert (summary.submission_id, summary.submission_status) == (created["id"], "COMPLETED")
    assert len(summary.episodes) == 6
    # Attaching again: nothing left to run, the run ends at once.
    again = run(RecordingAgent(), server.http_url, team_token, submission_id=created["id"])
    assert (again.submission_status, again.episodes) == ("COMPLETED", [])


def test_torch_template(server: Server, team_token: str) -> None:
    """examples/torch_policy.py imports without torch, and runs when torch is installed."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("torch_policy_example", EXAMPLES / "torch_policy.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if importlib.util.find_spec("torch") is None:
        pytest.skip("torch is not installed (optional: pip install ./sdk/python[torch])")
    summary = run(module.TorchPolicyAgent(), server.http_url, team_token, benchmark="g1-smoke", practice=["squat"])
    assert [(e.status, e.steps) for e in summary.episodes] == [("completed", 300)]


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_bad_token_is_refused(server: Server, transport: str) -> None:
    with pytest.raises(RefusedError) as info:
        run(RecordingAgent(), server.http_url, "at_not-a-token", benchmark="g1-smoke", transport=transport)
    assert info.value.code == "unauthorized"
    assert "unauthorized" in str(info.value)


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_unknown_benchmark_is_refused(server: Server, team_token: str, transport: str) -> None:
    with pytest.raises(RefusedError) as info:
        run(RecordingAgent(), server.http_url, team_token, benchmark="no-such-benchmark", transport=transport)
    assert info.value.code == "unknown_benchmark"
    assert "g1-smoke" in info.value.message  # the server lists what it has


def test_unknown_practice_motion_is_refused(server: Server, team_token: str) -> None:
    with pytest.raises(RefusedError) as info:
        run(RecordingAgent(), server.http_url, team_token, benchmark="g1-smoke", practice=["moonwalk"])
    assert info.value.code == "unknown_motion"


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_unreachable_server(transport: str) -> None:
    # Port 9 (discard) is closed here: the refusal itself must be the reason, on both transports,
    # not a connect timeout (connect_timeout_s is long so that a timeout would show as such).
    # A server never reached is not retried (issue 39): one attempt, whatever max_reconnects.
    with pytest.raises(UnreachableError) as info:
        run(
            RecordingAgent(),
            "http://127.0.0.1:9",
            "t",
            benchmark="g1-smoke",
            transport=transport,
            max_reconnects=2,
            initial_backoff_s=0.01,
            connect_timeout_s=30,
        )
    assert info.value.attempts == 1
    message = str(info.value)
    assert "refused" in message and "cannot reach the server at" in message, message
    assert "within" not in message, message


@pytest.mark.parametrize(("status", "attempts"), [("503 Service Unavailable", 3), ("404 Not Found", 1)])
def test_a_server_over_its_connection_caps_is_retried(status: str, attempts: int) -> None:
    """A 503 "retry shortly" (the server over `max_connections`) answers even a run's first
    connection: the run retries it, with backoff, instead of stopping as unreachable. A 404 (a
    wrong path, another web server) is a wrong address: not retried."""
    import socket

    answer_bytes = f"HTTP/1.1 {status}\r\nRetry-After: 5\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".encode()
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    port = listener.getsockname()[1]
    answered = []

    def answer() -> None:
        for _ in range(attempts):
            conn, _ = listener.accept()
            with conn:
                conn.recv(4096)
                conn.sendall(answer_bytes)
            answered.append(1)

    thread = threading.Thread(target=answer, daemon=True)
    thread.start()
    with pytest.raises(UnreachableError) as info:
        run(RecordingAgent(), f"http://127.0.0.1:{port}", "t", benchmark="g1-smoke", max_reconnects=2, initial_backoff_s=0.01)
    thread.join(timeout=10)
    listener.close()
    assert info.value.attempts == attempts and len(answered) == attempts, (info.value.attempts, answered)
    assert status[:3] in str(info.value), str(info.value)


@pytest.mark.parametrize("handler", [False, True])
def test_a_first_connection_reset_after_it_was_accepted_is_retried_a_few_times(
    handler: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection accepted and then reset before the upgrade (a flaky first packet, a proxy
    whose backend restarts) is a server worth trying again, unlike a refused one: the run made
    one try and stopped as "cannot reach the server". But only a few times: a ws:// URL at a TLS
    port is cut the same way each time, and was retried for max_reconnects."""
    import socket
    import struct

    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(10)
    port = listener.getsockname()[1]
    reset = []

    def cut() -> None:
        for _ in range(3):
            conn, _ = listener.accept()
            conn.recv(4096)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()  # a reset
            reset.append(1)

    thread = threading.Thread(target=cut, daemon=True)
    thread.start()
    events: list = []
    caplog.set_level(logging.WARNING, logger="arena_sdk")
    with pytest.raises(UnreachableError) as info:
        run(
            RecordingAgent(),
            f"http://127.0.0.1:{port}",
            "t",
            benchmark="g1-smoke",
            max_reconnects=10,
            initial_backoff_s=0.01,
            on_event=events.append if handler else None,
        )
    thread.join(timeout=10)
    listener.close()
    assert info.value.attempts == 3 and len(reset) == 3, (info.value.attempts, reset, str(info.value))
    assert "TLS port" in str(info.value), str(info.value)
    # The reconnects are told once: to the caller's handler (which the CLIs print), else the log.
    logged = [r for r in caplog.records if "connection lost" in r.getMessage()]
    told = [e for e in events if isinstance(e, arena_sdk.Reconnecting)]
    assert (len(logged), len(told)) == ((0, 2) if handler else (2, 0)), (logged, told)


def hold_a_place(host: str, port: int):
    """A keep-alive connection the server has admitted and answered (200)."""
    import socket

    for _ in range(50):
        conn = socket.create_connection((host, port))
        conn.sendall(b"GET /api/v1/health HTTP/1.1\r\nHost: x\r\n\r\n")
        conn.settimeout(5)
        got = b""
        try:
            while b"\r\n\r\n" not in got:
                chunk = conn.recv(4096)
                if not chunk:
                    break
                got += chunk
        except OSError:
            pass
        if got.startswith(b"HTTP/1.1 200"):
            return conn
        conn.close()
        time.sleep(0.1)
    raise AssertionError("no connection was admitted and answered")


@pytest.mark.parametrize("transport", ["grpc", "ws"])
def test_an_agent_over_the_connection_caps_waits_for_a_place(tmp_path, transport: str) -> None:
    """The real server's refusal at its connection caps (over gRPC a status, UNAVAILABLE with
    `arena-refusal`; over WebSocket the 503 `too_many_connections`) is waited out like a busy
    submission, not counted against max_reconnects: the run gets in once a place is free. The
    caller is told once, with the server's words. Before, a run gave up after max_reconnects
    refusals (about 31 s) saying only "HTTP 503"; earlier still, over gRPC the 503's HTTP/1.1
    bytes broke the HTTP/2 connection and the first attempt stopped the run."""
    import socket

    with start_server(tmp_path, "--max-connections-per-address", "1") as server:
        token = server.create_team("capped")
        host, port = server.addr.rsplit(":", 1)
        # The address's one place, held by a keep-alive connection the server has answered: a
        # bare one may itself be refused while the server still counts the team request just
        # closed, and the place is then free again for the run below.
        held = hold_a_place(host, int(port))

        def refused() -> bool:
            with socket.create_connection((host, int(port))) as probe:
                probe.settimeout(2)
                try:
                    return b"too_many_connections" in probe.recv(4096)
                except OSError:
                    return False

        assert any(refused() for _ in range(50)), "a second connection from the address was served"

        events: list = []

        def told(event: object) -> None:
            # The place is freed once the run has been told it waits (not after a fixed time,
            # which a loaded machine could outlast before the first try).
            events.append(event)
            if isinstance(event, arena_sdk.ServerError):
                held.close()

        summary = run(
            RecordingAgent(),
            server.http_url,
            token,
            benchmark="g1-smoke",
            transport=transport,
            practice=["stand"],
            max_reconnects=0,
            initial_backoff_s=0.05,
            on_event=told,
        )
    assert len(summary.episodes) == 1, summary
    told = [e for e in events if isinstance(e, arena_sdk.ServerError) and e.code == "too_many_connections"]
    assert len(told) == 1, events
    assert "too many open connections" in told[0].message and "waiting for a place" in told[0].message, told


# --- invalid agent output ---------------------------------------------------------------------


class WrongShapeAgent(Agent):
    def act(self, batch: Batch) -> np.ndarray:
        return np.zeros((len(batch), 28), np.float32)


class NanAgent(Agent):
    name = "nan-agent"

    def act(self, batch: Batch) -> np.ndarray:
        actions = np.zeros((len(batch), 29))
        actions[0, 3] = math.nan
        return actions


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_wrong_shape_actions_raise(server: Server, team_token: str, transport: str) -> None:
    with pytest.raises(
        AgentError, match=r"agent WrongShapeAgent: act\(\) returned shape \(1, 28\); expected \(1, 29\)"
    ):
        run(
            WrongShapeAgent(),
            server.http_url,
            team_token,
            benchmark="g1-smoke",
            transport=transport,
            practice=["squat"],
        )


def test_nan_actions_raise_over_json(server: Server, team_token: str) -> None:
    # JSON cannot carry NaN (the server would refuse the whole frame): the run stops, saying why.
    with pytest.raises(AgentError, match=r"agent nan-agent: act\(\) returned a non-finite action \(episode 0, value 3"):
        run(NanAgent(), server.http_url, team_token, benchmark="g1-smoke", practice=["squat"], encoding="json")


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_nan_actions_fail_their_episode_over_protobuf(
    server: Server, team_token: str, transport: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Protobuf carries NaN: the server fails that episode with the reason, as with the Rust SDK,
    # and the run goes on to its end. (The level is set here: a CLI run earlier in the same
    # process sets the SDK's logger to ERROR.)
    caplog.set_level(logging.WARNING, logger="arena_sdk")
    summary = run(
        NanAgent(), server.http_url, team_token, benchmark="g1-smoke", practice=["squat", "stand"], transport=transport
    )
    assert len(summary.episodes) == 2
    for end in summary.episodes:
        assert end.status == "failed" and "non-finite action" in end.reason, end
    assert any("sent as it is" in r.getMessage() for r in caplog.records)


def test_agent_exceptions_propagate(server: Server, team_token: str) -> None:
    class Broken(Agent):
        def act(self, batch: Batch) -> np.ndarray:
            raise KeyError("my bug")

    with pytest.raises(KeyError, match="my bug"):
        run(Broken(), server.http_url, team_token, benchmark="g1-smoke", practice=["squat"])


# --- lost connections -------------------------------------------------------------------------


class StallOnceAgent(RecordingAgent):
    """Stalls longer than the server's silence limit once, so the server drops the session."""

    def __init__(self, stall_s: float) -> None:
        super().__init__()
        self.stall_s = stall_s

    def act(self, batch: Batch) -> np.ndarray:
        if self.batches == 20:
            time.sleep(self.stall_s)
        return super().act(batch)


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_reconnect_resumes_the_submission(tmp_path, transport: str) -> None:
    # Heartbeats every 0.2 s (the client answers them); 1 s of silence ends the session; a step
    # deadline long enough that the stall is a lost connection, not a timed-out episode.
    settings = ["--heartbeat-interval-s", "0.2", "--heartbeat-timeout-s", "1", "--step-timeout-s", "30"]
    with start_server(tmp_path, *settings) as server:
        token = server.create_team("reconnect")
        agent = StallOnceAgent(stall_s=2.0)
        events: list[object] = []
        summary = run(
            agent,
            server.http_url,
            token,
            benchmark="g1-smoke",
            transport=transport,
            on_event=events.append,
            initial_backoff_s=0.05,
        )
        assert summary.reconnects >= 1
        assert any(isinstance(e, arena_sdk.Reconnecting) for e in events)
        assert summary.submission_status == "COMPLETED"
        assert sorted(e.episode_id for e in summary.episodes) == list(range(6))
        # The interrupted episodes ran again on the new connection.
        assert len(agent.started) > 6
        status, body = server.request("GET", f"/api/v1/submissions/{summary.submission_id}", token)
        assert status == 200 and body["status"] == "COMPLETED", body


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_a_busy_submission_is_waited_for_not_counted_as_a_failure(
    server: Server, team_token: str, transport: str
) -> None:
    # A second agent resuming a submission another session holds is refused as busy until that
    # session ends; with max_reconnects=0 it still waits (for up to BUSY_WAIT_S), then sees the
    # submission finished.
    status, created = server.request("POST", "/api/v1/submissions", team_token, {"benchmark": "g1-smoke"})
    assert status == 201, created
    holding = threading.Event()
    first: dict[str, object] = {}

    def hold() -> None:
        def seen(event: object) -> None:
            if isinstance(event, arena_sdk.Connected):
                holding.set()

        try:
            first["summary"] = run(
                SlowOnceAgent(delay_s=1.5, at_batch=0), server.http_url, team_token, submission_id=created["id"], on_event=seen
            )
        finally:
            holding.set()

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert holding.wait(60)
        events: list[object] = []
        second = run(
            RecordingAgent(),
            server.http_url,
            team_token,
            submission_id=created["id"],
            transport=transport,
            max_reconnects=0,
            initial_backoff_s=0.05,
            max_backoff_s=0.2,
            on_event=events.append,
        )
    finally:
        holder.join()
    busy = [e for e in events if isinstance(e, arena_sdk.ServerError) and e.code == "submission_busy"]
    assert len(busy) >= 2, events
    assert second.submission_status == "COMPLETED", second
    assert first["summary"].submission_status == "COMPLETED"
    assert len(first["summary"].episodes) + len(second.episodes) == 6


class SlowAgent(RecordingAgent):
    """Answers every request after `delay_s`."""

    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def act(self, batch: Batch) -> np.ndarray:
        time.sleep(self.delay_s)
        return super().act(batch)


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_a_stopping_server_is_waited_for_until_it_is_back(tmp_path, transport: str) -> None:
    # SIGTERM mid-submission, then the same server started again on its port: the session ends
    # with `disconnect {shutdown}`, and the run waits for the restart without counting its
    # attempts (restart_wait_s), so even max_reconnects=0 resumes and completes the submission.
    import socket

    with socket.create_server(("127.0.0.1", 0)) as probe:
        port = probe.getsockname()[1]
    settings = ("--bind", f"127.0.0.1:{port}", "--lanes", "1", "--max-batch", "1")
    first = start_server(tmp_path, *settings)
    server = first.__enter__()
    events: list[object] = []
    two_ended = threading.Event()
    outcome: dict[str, object] = {}

    def seen(event: object) -> None:
        events.append(event)
        if sum(isinstance(e, arena_sdk.EpisodeEnd) for e in events) >= 2:
            two_ended.set()

    def agent() -> None:
        try:
            outcome["summary"] = run(
                SlowAgent(delay_s=0.005),
                server.http_url,
                token,
                benchmark="g1-smoke",
                transport=transport,
                max_reconnects=0,
                initial_backoff_s=0.05,
                max_backoff_s=0.5,
                on_event=seen,
            )
        except Exception as e:  # noqa: BLE001 - handed to the test's thread
            outcome["error"] = e
        finally:
            two_ended.set()

    # Daemon: a failed assertion must not leave pytest waiting for a run that waits for a server.
    runner = threading.Thread(target=agent, daemon=True)
    try:
        token = server.create_team("restart")
        runner.start()
        assert two_ended.wait(120), events
        assert "error" not in outcome, outcome
        # Until the next episode runs, so that the stop cuts one short.
        submission = next(e.submission_id for e in events if isinstance(e, arena_sdk.Connected))
        deadline = time.monotonic() + 60
        while True:
            status, body = server.request("GET", f"/api/v1/submissions/{submission}/results", token)
            if status == 200 and any(e["status"] == "RUNNING" for e in body["episodes"]):
                break
            assert time.monotonic() < deadline, body
            time.sleep(0.01)
    finally:
        first.__exit__(None, None, None)  # SIGTERM, and waits for the exit
    with start_server(tmp_path, *settings) as again:
        runner.join(300)
        assert not runner.is_alive()
        assert "error" not in outcome, outcome
        summary = outcome["summary"]
        assert summary.submission_status == "COMPLETED", summary
        lost = [e for e in events if isinstance(e, arena_sdk.Reconnecting)]
        assert lost and lost[0].error == "server ended the session: shutdown", lost
        status, body = again.request("GET", f"/api/v1/submissions/{summary.submission_id}/results", token)
        assert status == 200, body
        assert [e["status"] for e in body["episodes"]] == ["COMPLETED"] * 6, body
        # The run the stop cut short was given back charged to nobody.
        assert sum(e["uncharged_runs"] for e in body["episodes"]) >= 1, body
        assert all(e["server_faults"] == 0 for e in body["episodes"]), body


class SlowOnceAgent(RecordingAgent):
    """Answers request number `at_batch` (from 0) after `delay_s`. By default its third: later
    than the server's step deadline (each lane's first request has a set-up grace of 30 s, so the
    third is the first that can miss). At 0, within that grace: its session holds the
    submission at least `delay_s`."""

    def __init__(self, delay_s: float, at_batch: int = 2) -> None:
        super().__init__()
        self.delay_s = delay_s
        self.at_batch = at_batch

    def act(self, batch: Batch) -> np.ndarray:
        if self.batches == self.at_batch:
            time.sleep(self.delay_s)
        return super().act(batch)


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_a_late_answer_loses_nothing_the_server_sent(tmp_path, transport: str) -> None:
    # Every episode times out while the agent sleeps, so the server ends them, completes the
    # submission and closes before the late answer goes out: sending it fails, yet the episode
    # ends and the disconnect sent before the close still reach the summary.
    # One lane, so the missed request holds every episode (with two, the other lane's could
    # finish while the agent sleeps, and the server would not close).
    with start_server(tmp_path, "--step-timeout-s", "0.3", "--lanes", "1") as server:
        token = server.create_team("late")
        summary = run(
            SlowOnceAgent(delay_s=2.0),
            server.http_url,
            token,
            benchmark="g1-smoke",
            transport=transport,
            max_batch=6,
            initial_backoff_s=0.05,
        )
        status, body = server.request("GET", f"/api/v1/submissions/{summary.submission_id}/results", token)
        assert status == 200, body
        stored = sorted((e["idx"], e["status"].lower()) for e in body["episodes"])
        assert [status for _, status in stored] == ["timeout"] * 6, stored
        assert summary.submission_status == "COMPLETED", summary
        assert sorted((e.episode_id, e.status) for e in summary.episodes) == stored, (summary, stored)
        assert summary.reconnects == 0


@pytest.mark.parametrize("stopped_in", ["act", "reset"])
def test_what_a_server_sent_before_resetting_the_connection_is_not_lost(monkeypatch, stopped_in: str) -> None:
    """A server that ends every episode while the agent is stopped (its step deadline passed),
    sends the episode ends, `disconnect` and a Close frame, then resets the connection: every
    write to it then fails (EPIPE), and all it sent is still delivered. Stopped in `act`, the
    late answer is the first write to fail (websockets would close the socket on it, dropping
    what the kernel still holds); in `reset`, the client answers nothing, and the first is
    websockets' own Close reply (which would drop the frames read with the Close). Deterministic:
    the frames come while the client's reader is paused by websockets' flow control (its queue
    past `max_queue`, filled with empty EpisodeStarts, which the client does not answer), so they
    are still in the kernel when the reset arrives, and the agent goes on only after it."""
    import socket
    import struct

    from websockets.sync import messages
    from websockets.sync.server import serve

    paused = threading.Event()  # the client's reader stopped reading (queue over its high mark)
    stopped = threading.Event()
    reset = threading.Event()
    pause = messages.Assembler.maybe_pause

    def maybe_pause(self) -> None:  # type: ignore[no-untyped-def]
        pause(self)
        if self.paused:
            paused.set()

    monkeypatch.setattr(messages.Assembler, "maybe_pause", maybe_pause)

    class StoppedAgent(RecordingAgent):
        def stop(self, where: str) -> None:
            if where == stopped_in and not stopped.is_set():
                stopped.set()
                assert reset.wait(10), "the server never reset the connection"

        def reset(self, episodes) -> None:
            self.stop("reset")
            super().reset(episodes)

        def act(self, batch: Batch) -> np.ndarray:
            self.stop("act")
            return super().act(batch)

    def send(ws, envelope: pb.Envelope) -> None:  # type: ignore[no-untyped-def]
        ws.send(envelope.SerializeToString())

    def handler(ws) -> None:  # type: ignore[no-untyped-def]
        ws.recv()  # connect
        connected = pb.Envelope()
        connected.connected.submission_id = "sub-1"
        connected.connected.episodes_total = 6
        connected.connected.episodes_remaining = 6
        connected.connected.spec.action_size = 29
        connected.connected.spec.observations.add(name="x", size=1)
        send(ws, connected)
        start, request = pb.Envelope(), pb.Envelope()
        request.get_action.step = 1
        for i in range(6):
            start.episode_start.episodes.add(episode_id=i, motion=f"m{i}", steps=10)
            request.get_action.observations.add(episode_id=i, episode_step=0, values=[0.0])
        send(ws, start)
        if stopped_in == "act":
            send(ws, request)  # in `reset`, nothing to answer
        assert stopped.wait(10)
        filler = pb.Envelope()
        filler.episode_start.SetInParent()
        while not paused.wait(0.01):  # until the client's reader pauses
            send(ws, filler)
        for i in range(6):
            end = pb.Envelope()
            end.episode_end.episode_id = i
            end.episode_end.status = "timeout"
            end.episode_end.steps = 1
            send(ws, end)
        bye = pb.Envelope()
        bye.disconnect.reason = "submission_complete"
        bye.disconnect.submission_status = "COMPLETED"
        send(ws, bye)
        ws.socket.sendall(b"\x88\x00")  # a Close frame without a code, as the arena server's
        ws.socket.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        ws.close_socket()  # an RST: the client's writes fail from now on
        reset.set()

    with serve(handler, "127.0.0.1", 0) as ws_server:
        threading.Thread(target=ws_server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{ws_server.socket.getsockname()[1]}"
        agent = StoppedAgent()
        summary = run(agent, url, "t", benchmark="b", max_reconnects=0)
        ws_server.shutdown()
    assert paused.is_set() and reset.is_set()
    assert sorted(e.episode_id for e in summary.episodes) == list(range(6)), summary
    assert sorted(agent.ended) == list(range(6))
    assert summary.submission_status == "COMPLETED" and summary.reconnects == 0, summary


def test_a_connect_lost_before_its_answer_is_retried_with_the_same_connect_key() -> None:
    """The first connection ends after its connect, before `connected` (the server made a
    submission the client never heard of): the retry carries the same connect key, so the
    server attaches it to that submission instead of making another; once connected, a
    reconnect names the submission instead."""
    from websockets.sync.server import serve

    connects: list[pb.Connect] = []

    def handler(ws) -> None:  # type: ignore[no-untyped-def]
        envelope = pb.Envelope()
        envelope.ParseFromString(ws.recv())
        connects.append(envelope.connect)
        if len(connects) == 1:
            ws.close()  # lost before the answer
            return
        connected = pb.Envelope()
        connected.connected.session_id = f"ses-{len(connects)}"
        connected.connected.submission_id = "sub-1"
        connected.connected.episodes_total = 1
        connected.connected.spec.action_size = 29
        connected.connected.spec.observations.add(name="x", size=1)
        ws.send(connected.SerializeToString())
        if len(connects) == 2:
            ws.close()  # lost after it: the next connect names the submission
            return
        bye = pb.Envelope()
        bye.disconnect.reason = "submission_complete"
        bye.disconnect.submission_status = "COMPLETED"
        ws.send(bye.SerializeToString())

    with serve(handler, "127.0.0.1", 0) as ws_server:
        threading.Thread(target=ws_server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{ws_server.socket.getsockname()[1]}"
        summary = run(RecordingAgent(), url, "t", benchmark="b", max_reconnects=3)
        ws_server.shutdown()
    assert summary.submission_status == "COMPLETED", summary
    keys = [c.connect_key for c in connects]
    assert len(keys) == 3 and len(keys[0]) == 32 and keys[1] == keys[0], keys
    assert (keys[2], connects[2].submission_id) == ("", "sub-1"), connects[2]
    # The session the lost connection had is named, so the server can hand it over.
    assert [c.previous_session_id for c in connects] == ["", "", "ses-2"], connects
    # Another run makes another key.
    with serve(handler, "127.0.0.1", 0) as ws_server:
        connects.clear()
        threading.Thread(target=ws_server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{ws_server.socket.getsockname()[1]}"
        run(RecordingAgent(), url, "t", benchmark="b", max_reconnects=3)
        ws_server.shutdown()
    assert connects[0].connect_key not in keys


class CancelOnceAgent(RecordingAgent):
    """Has the organiser cancel its own submission at its fifth request."""

    def __init__(self, server: Server) -> None:
        super().__init__()
        self.server = server
        self.submission_id = ""

    def act(self, batch: Batch) -> np.ndarray:
        if self.batches == 4:
            status, body = self.server.request(
                "POST", f"/api/v1/submissions/{self.submission_id}/cancel", self.server.admin_token
            )
            assert status == 200, body
        return super().act(batch)


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_a_cancelled_submission_ends_the_run_as_failed(tmp_path, transport: str) -> None:
    with start_server(tmp_path) as server:
        token = server.create_team("cancelled")
        agent = CancelOnceAgent(server)

        def on_event(event: object) -> None:
            if isinstance(event, arena_sdk.Connected):
                agent.submission_id = event.submission_id

        summary = run(agent, server.http_url, token, benchmark="g1-smoke", transport=transport, on_event=on_event)
        assert summary.submission_status == "FAILED" and summary.reconnects == 0, summary
        # Attaching to it later says the same, at once.
        again = run(RecordingAgent(), server.http_url, token, submission_id=summary.submission_id, transport=transport)
        assert again.submission_status == "FAILED" and not again.episodes, again


def test_phase_access_codes(tmp_path) -> None:
    """A submission through a challenge phase, then the phase's refusals: quota (with its limit
    and reset time), unknown phase, and its benchmark run without the phase."""
    with start_server(tmp_path) as server:
        status, body = server.request(
            "POST", "/api/v1/challenges", server.admin_token, {"id": "py-sdk", "title": "SDK"}
        )
        if status in (404, 405):
            pytest.skip(f"this arena binary has no challenges API (POST /api/v1/challenges: {status})")
        assert status == 201, body
        phase = {
            "id": "py-dev",
            "benchmark": "g1-smoke",
            "starts_at": 0,
            "ends_at": int(time.time() * 1000) + 3_600_000,
            "max_submissions_per_day": 1,
        }
        status, body = server.request("POST", "/api/v1/challenges/py-sdk/phases", server.admin_token, phase)
        assert status == 201, body
        token = server.create_team("phased")
        summary = run(RecordingAgent(), server.http_url, token, phase="py-dev")
        assert summary.submission_status == "COMPLETED" and summary.benchmark == "g1-smoke"
        with pytest.raises(RefusedError) as info:
            run(RecordingAgent(), server.http_url, token, phase="py-dev", transport="grpc")
        assert (info.value.code, info.value.limit) == ("quota_exceeded", 1)
        assert info.value.resets_at.endswith("Z"), info.value.resets_at  # daily: the next UTC midnight
        with pytest.raises(RefusedError) as info:
            run(RecordingAgent(), server.http_url, token, phase="no-such-phase")
        assert info.value.code == "unknown_phase"
        with pytest.raises(RefusedError) as info:
            run(RecordingAgent(), server.http_url, token, benchmark="g1-smoke")
        assert info.value.code == "forbidden"


def _silent_connected() -> pb.Envelope:
    """Connected with short heartbeat settings; the silent servers below say nothing after it."""
    connected = pb.Envelope()
    connected.connected.heartbeat_interval_s = 0.05
    connected.connected.heartbeat_timeout_s = 0.3
    connected.connected.spec.action_size = 29
    return connected


@contextmanager
def silent_server(transport: str) -> Iterator[tuple[str, list[str], threading.Event]]:
    """A real server on a loopback port that answers Connect with Connected and then never speaks
    again, recording the kind of every message the client sends. Yields (url, kinds received, set
    once the client has ended the connection)."""
    received: list[str] = []
    ended = threading.Event()
    if transport == "ws":
        from websockets.sync.server import serve

        def handler(ws) -> None:  # type: ignore[no-untyped-def]
            for frame in ws:
                envelope = pb.Envelope()
                envelope.ParseFromString(frame)
                received.append(envelope.WhichOneof("msg"))
                if envelope.HasField("connect"):
                    ws.send(_silent_connected().SerializeToString())
            ended.set()

        with serve(handler, "127.0.0.1", 0) as ws_server:
            thread = threading.Thread(target=ws_server.serve_forever, daemon=True)
            thread.start()
            yield f"http://127.0.0.1:{ws_server.socket.getsockname()[1]}", received, ended
            ws_server.shutdown()
        return

    import grpc

    from arena_sdk._proto import arena_pb2_grpc

    class Silent(arena_pb2_grpc.AgentGatewayServicer):
        def Session(self, requests, context):  # type: ignore[no-untyped-def]  # noqa: N802
            for envelope in requests:
                received.append(envelope.WhichOneof("msg"))
                if envelope.HasField("connect"):
                    yield _silent_connected()
            ended.set()

    grpc_server = grpc.server(ThreadPoolExecutor(max_workers=2))
    arena_pb2_grpc.add_AgentGatewayServicer_to_server(Silent(), grpc_server)
    port = grpc_server.add_insecure_port("127.0.0.1:0")
    grpc_server.start()
    try:
        yield f"http://127.0.0.1:{port}", received, ended
    finally:
        grpc_server.stop(grace=None)


@pytest.mark.parametrize(("restart_wait_s", "counted_from"), [(0.0, 1), (0.3, 2)])
def test_a_stopping_server_is_waited_for_restart_wait_s_then_counted(restart_wait_s: float, counted_from: int) -> None:
    """A server that answers every connect with `disconnect {shutdown}` (stopping, and never
    back): the tries within restart_wait_s are not counted against max_reconnects, those after
    it are, and the run then gives up saying the server did not come back."""
    from websockets.sync.server import serve

    def handler(ws) -> None:  # type: ignore[no-untyped-def]
        for frame in ws:
            envelope = pb.Envelope()
            envelope.ParseFromString(frame)
            if envelope.HasField("connect"):
                bye = pb.Envelope()
                bye.disconnect.reason = "shutdown"
                ws.send(bye.SerializeToString())
                return

    events: list[object] = []
    with serve(handler, "127.0.0.1", 0) as ws_server:
        threading.Thread(target=ws_server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{ws_server.socket.getsockname()[1]}"
        with pytest.raises(UnreachableError) as info:
            run(
                RecordingAgent(),
                url,
                "t",
                benchmark="b",
                max_reconnects=1,
                restart_wait_s=restart_wait_s,
                initial_backoff_s=0.01,
                max_backoff_s=0.02,
                on_event=events.append,
            )
        ws_server.shutdown()
    tries = [e for e in events if isinstance(e, arena_sdk.Reconnecting)]
    assert all(e.error == "server ended the session: shutdown" for e in tries), tries
    # Zero: the first loss counts and the second ends the run. 0.3 s: at least the first try,
    # made at once, was not counted.
    if counted_from == 1:
        assert info.value.attempts == 2 and len(tries) == 1, (info.value, tries)
    else:
        assert info.value.attempts >= 3 and len(tries) >= 2, (info.value, tries)
    assert f"did not take a session within {restart_wait_s:g} s" in info.value.last_error, info.value


@pytest.mark.parametrize("transport", ["ws", "grpc"])
def test_heartbeats_and_silence(transport: str) -> None:
    """The client sends a heartbeat when it has sent nothing for heartbeat_interval_s, and a server
    silent for heartbeat_timeout_s is a lost connection (here: no reconnect allowed). The server is
    real (a socket that goes quiet after Connected), since `arena serve` cannot be made silent."""
    with silent_server(transport) as (url, received, ended):
        started = time.monotonic()
        with pytest.raises(UnreachableError, match="server silent for 0.3 s"):
            run(RecordingAgent(), url, "t", benchmark="b", transport=transport, max_reconnects=0)
        # It waited out the silence (no upper bound: a loaded machine only makes it later) ...
        assert time.monotonic() - started >= 0.3
        # ... and closed the connection; the server saw the Connect first, then heartbeats, at most
        # once per interval (load can only mean fewer) and at least a couple in 0.3 s of silence.
        assert ended.wait(10), "the client never closed the connection"
        assert received[0] == "connect", received
        assert 2 <= received.count("heartbeat") <= 7, received


def test_grpc_health_service(server: Server) -> None:
    """The standard grpc.health.v1.Health/Check answers SERVING for the gateway (raw bytes: the
    request is HealthCheckRequest{service}, the answer HealthCheckResponse{status = 1})."""
    import grpc

    with grpc.insecure_channel(server.addr) as channel:
        check = channel.unary_unary("/grpc.health.v1.Health/Check")
        service = b"arena.v1.AgentGateway"
        for request in (b"", b"\x0a" + bytes([len(service)]) + service):
            assert check(request, timeout=10) == b"\x08\x01"


def test_grpc_undecodable_message_is_answered(server: Server, team_token: str) -> None:
    """Bytes that are no Envelope, on a raw gRPC stream: first, and in the middle of a submission.
    The server answers malformed_message with the reason, then (during a session) a Disconnect
    naming it, and ends the stream (gRPC cannot go on after a bad message); the interrupted
    submission is resumed and completes."""
    import grpc

    garbage = b"\xff\x01\x02"

    def session(channel: grpc.Channel, outgoing: queue.SimpleQueue) -> Iterator[pb.Envelope]:
        call = channel.stream_stream(
            "/arena.v1.AgentGateway/Session",
            request_serializer=lambda m: m if isinstance(m, bytes) else m.SerializeToString(),
            response_deserializer=pb.Envelope.FromString,
        )
        return call(iter(outgoing.get, None), timeout=60)

    with grpc.insecure_channel(server.addr) as channel:
        outgoing: queue.SimpleQueue = queue.SimpleQueue()
        outgoing.put(garbage)
        answers = list(session(channel, outgoing))
        assert [a.WhichOneof("msg") for a in answers] == ["error"], answers
        assert answers[0].error.code == "malformed_message", answers[0]
        assert "undecodable gRPC message" in answers[0].error.message, answers[0]

        outgoing = queue.SimpleQueue()
        connect = pb.Envelope()
        connect.connect.protocol_version = 1
        connect.connect.token = team_token
        connect.connect.mode = "submission"
        connect.connect.benchmark = "g1-smoke"
        connect.connect.max_batch = 1
        outgoing.put(connect)
        seen: list[str] = []
        submission = ""
        for answer in session(channel, outgoing):
            kind = answer.WhichOneof("msg")
            seen.append(kind)
            if kind == "connected":
                submission = answer.connected.submission_id
            elif kind == "get_action" and seen.count("get_action") == 1:
                outgoing.put(garbage)
            elif kind == "error":
                assert answer.error.code == "malformed_message", answer
                outgoing.put(None)  # the request stream is over anyway
            elif kind == "disconnect":
                assert answer.disconnect.reason == "malformed_message", answer
        outgoing.put(None)
        # The server ended the stream right after its Error and Disconnect, and ran nothing more.
        assert submission and seen[-2:] == ["error", "disconnect"] and seen.count("error") == 1, seen

    summary = run(RecordingAgent(), server.http_url, team_token, submission_id=submission, transport="grpc")
    assert (summary.submission_id, summary.submission_status) == (submission, "COMPLETED")


# --- no server needed -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url, transport, expected",
    [
        ("http://h:8080", None, Endpoint("ws", "ws://h:8080/api/v1/agent")),
        ("http://h:8080/", "ws", Endpoint("ws", "ws://h:8080/api/v1/agent")),
        ("h:8080", "grpc", Endpoint("grpc", "h:8080")),
        ("http://h:8080", "grpc", Endpoint("grpc", "h:8080")),
        ("https://h", None, Endpoint("ws", "wss://h/api/v1/agent", tls=True)),
        ("ws://h:1/api/v1/agent", None, Endpoint("ws", "ws://h:1/api/v1/agent")),
        # The agent path pasted after http:// (as the server prints it) is not doubled.
        ("http://h:1/api/v1/agent", None, Endpoint("ws", "ws://h:1/api/v1/agent")),
        ("http://h:1/arena/api/v1/agent/", None, Endpoint("ws", "ws://h:1/arena/api/v1/agent")),
        ("http://h:1/arena", None, Endpoint("ws", "ws://h:1/arena/api/v1/agent")),
        ("grpc://h:1", None, Endpoint("grpc", "h:1")),
        ("grpc://h:1/", "grpc", Endpoint("grpc", "h:1")),
    ],
)
def test_resolve_endpoint(url: str, transport, expected: Endpoint) -> None:
    assert resolve_endpoint(url, transport) == expected


@pytest.mark.parametrize(
    "url, expected",
    [
        ("ws://h:1", Endpoint("ws", "ws://h:1/api/v1/agent")),
        ("ws://h:1/", Endpoint("ws", "ws://h:1/api/v1/agent")),
        ("wss://h", Endpoint("ws", "wss://h/api/v1/agent", tls=True)),
        ("ws://h:1/arena/api/v1/agent", Endpoint("ws", "ws://h:1/arena/api/v1/agent")),
        ("ws://h:1/x/", Endpoint("ws", "ws://h:1/x/")),
    ],
)
def test_ws_url_without_a_path_gets_the_agent_path(url: str, expected: Endpoint) -> None:
    """A bare ws://HOST:PORT would dial the web index (as the Rust SDK, the agent path is added);
    an explicit path is kept."""
    assert resolve_endpoint(url) == resolve_endpoint(url, "ws") == expected


@pytest.mark.parametrize(
    "url, transport",
    [("ws://h:1/x", "grpc"), ("grpc://h:1", "ws"), ("ftp://h", None), ("http://h:1/x", "grpc"), ("http://h", "udp")],
)
def test_resolve_endpoint_rejects(url: str, transport) -> None:
    with pytest.raises(ValueError):
        resolve_endpoint(url, transport)


def test_run_rejects_bad_arguments() -> None:
    agent = RecordingAgent()
    with pytest.raises(ValueError, match="json"):
        run(agent, "grpc://h:1", "t", benchmark="b", encoding="json")
    with pytest.raises(ValueError, match="benchmark"):
        run(agent, "http://h:1", "t")
    with pytest.raises(ValueError, match="practice"):
        run(agent, "http://h:1", "t", benchmark="b", practice=[])


def test_json_codec_round_trip() -> None:
    text = (
        '{"type":"episode_start","episodes":[{"episode_id":2,"motion":"squat","start_s":0.0,"duration_s":6.0,'
        '"steps":300,"seed":16481712997681181849,"dr_level":0,"attempt":1,"reference":null,"future":1}]}'
    )
    envelope = envelope_from_json(text)
    info = envelope.episode_start.episodes[0]
    assert (info.episode_id, info.motion, info.seed, info.HasField("reference")) == (
        2,
        "squat",
        16481712997681181849,
        False,
    )
    end = envelope_from_json('{"type":"episode_end","episode_id":1,"status":"fell","metrics":{"emd":1.5,"x":null}}')
    assert end.episode_end.metrics["emd"] == 1.5 and math.isnan(end.episode_end.metrics["x"])
    action = pb.Envelope()
    action.action.step = 3
    action.action.actions.add(episode_id=1, values=[0.5, -1.0])
    assert envelope_to_json(action) == '{"type":"action","step":3,"actions":[{"episode_id":1,"values":[0.5,-1.0]}]}'
    assert envelope_from_json(envelope_to_json(action)) == action
    # A message type this SDK does not know decodes to an empty Envelope (skipped by the client).
    assert envelope_from_json('{"type":"something_new","x":1}').WhichOneof("msg") is None


def test_layout_from_connected_exposes_reference_goal() -> None:
    from arena_sdk.client import _spec

    text = (
        '{"type":"connected","spec":{"observations":[{"name":"state","size":64},'
        '{"name":"reference","size":36},{"name":"reference_goal","size":1054}],"action_size":29}}'
    )
    spec = _spec(envelope_from_json(text).connected.spec)
    layout = spec.layout
    assert [name for name, _ in layout] == ["state", "reference", "reference_goal"]
    assert layout[arena_sdk.REFERENCE_GOAL_GROUP] == slice(100, 100 + 2 * arena_sdk.REFERENCE_GOAL_ROW_SIZE)
    assert layout.size == 1154
    values = np.arange(2 * layout.size, dtype=np.float32).reshape(2, layout.size)
    batch = Batch(0, np.array([1, 2], np.uint32), np.zeros(2, np.uint32), values, layout)
    rows = batch.group("reference_goal").reshape(2, -1, arena_sdk.REFERENCE_GOAL_ROW_SIZE)
    assert rows.shape == (2, 2, 527)
    assert rows[1, 1, 0] == values[1, 100 + 527]


def test_check_actions_accepts_array_likes() -> None:
    from arena_sdk.agent import ObservationLayout, check_actions

    layout = ObservationLayout([arena_sdk.ObservationGroup("state", 2)])
    batch = Batch(0, np.array([4, 9], np.uint32), np.zeros(2, np.uint32), np.zeros((2, 2), np.float32), layout)
    out = check_actions(RecordingAgent(), [[0.0] * 3, [1] * 3], batch, 3)
    assert out.dtype == np.float32 and out.flags.c_contiguous and out.shape == (2, 3)
    with pytest.raises(AgentError, match="returned None"):
        check_actions(RecordingAgent(), None, batch, 3)
    with pytest.raises(AgentError, match="dtype"):
        check_actions(RecordingAgent(), np.array([["a"] * 3] * 2), batch, 3)
    with pytest.raises(AgentError, match=r"non-finite action \(episode 9, value 1"):
        check_actions(RecordingAgent(), np.array([[0, 0, 0], [0, 1e300, 0]]), batch, 3)
    assert batch.group("state").shape == (2, 2)
    with pytest.raises(KeyError, match="state"):
        batch.group("reference")
    # The joint-position mode also takes feed-forward torques after the targets.
    assert check_actions(RecordingAgent(), np.zeros((2, 6)), batch, 3, joint_position=True).shape == (2, 6)
    with pytest.raises(AgentError, match=r"or \(2, 6\) with feed-forward torques"):
        check_actions(RecordingAgent(), np.zeros((2, 5)), batch, 3, joint_position=True)
    with pytest.raises(AgentError, match=r"expected \(2, 3\) \(2 episodes in the batch x action_size 3\)$"):
        check_actions(RecordingAgent(), np.zeros((2, 6)), batch, 3)


def test_feedforward_torques_are_sent_in_the_joint_position_mode(server: Server, team_token: str) -> None:
    class HoldWithTorques(Agent):
        def configure(self, spec: arena_sdk.EpisodeSpec) -> None:
            self.default = np.asarray(spec.default_joint_pos, np.float32)

        def act(self, batch: Batch) -> np.ndarray:
            targets = np.tile(self.default, (len(batch), 1))
            return np.concatenate([targets, np.zeros_like(targets)], axis=1)

    summary = run(HoldWithTorques(), server.http_url, team_token, benchmark="g1-smoke-robot", practice=["stand"])
    assert [e.status for e in summary.episodes] in (["completed"], ["fell"]), summary.episodes


def test_rate_limit_reset_time_is_read() -> None:
    from arena_sdk.client import _unix_time

    assert _unix_time("2026-05-01T00:00:00Z") == 1777593600.0
    # Unreadable: retry a few seconds from now.
    assert 0 < _unix_time("soon") - time.time() <= 5.0


def test_gains_as_numpy_arrays() -> None:
    """The gains an EpisodeSpec or a policy's config holds (numpy arrays) are taken as given; the
    shape checks still name what is wrong."""
    from arena_sdk.client import check_gains

    gains = check_gains(np.full(29, 40.0), np.full(29, 2.0), None)
    assert gains.stiffness == (40.0,) * 29 and gains.damping == (2.0,) * 29
    with pytest.raises(ValueError, match="joint_stiffness needs 29 values"):
        check_gains(np.full(28, 40.0), np.full(28, 2.0), None)
    with pytest.raises(ValueError, match="together"):
        check_gains(np.full(29, 40.0), None, None)
    assert check_gains(None, None, "mjlab") == check_gains((), (), "mjlab")


def test_throttle_delay_as_the_rust_sdk() -> None:
    """A rate-limit window that ends in the past on this clock waits 5 s (as the Rust SDK's
    `throttle_delay`), not a quarter second."""
    from arena_sdk.client import throttle_delay

    assert throttle_delay(1000.0 - 30, 1000.0) == 5.0
    assert throttle_delay(1000.0, 1000.0) == 0.25
    assert throttle_delay(1010.0, 1000.0) == 10.25
    assert throttle_delay(1000.0 + 600, 1000.0) == 60.25


def test_an_exception_leaving_run_names_the_submission(server: Server, team_token: str) -> None:
    """An agent's own error leaves the submission RUNNING: the exception out of `run` names it
    (an attribute, and a note in the traceback), for a caller who passed no `on_event` and never
    saw the id (a notebook's interrupted cell)."""

    class Raises(Agent):
        def act(self, batch: Batch) -> np.ndarray:
            raise ZeroDivisionError("boom")

    with pytest.raises(ZeroDivisionError) as info:
        run(Raises(), server.http_url, team_token, benchmark="g1-smoke")
    submission_id = getattr(info.value, "arena_submission_id", "")
    assert submission_id.startswith("sub-"), info.value
    if sys.version_info >= (3, 11):
        assert any(submission_id in note for note in info.value.__notes__), info.value.__notes__
    status, body = server.request("GET", f"/api/v1/submissions/{submission_id}", team_token)
    assert status == 200 and body["status"] == "RUNNING", body
