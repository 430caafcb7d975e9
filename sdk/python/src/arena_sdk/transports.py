"""Transports: move protocol `Envelope`s over WebSocket (binary protobuf or JSON text frames) or
a gRPC bidirectional stream. They know nothing of the session; `client` does that. Both are
synchronous: WebSocket through `websockets.sync`, gRPC through grpcio's blocking stream fed by a
queue-backed request iterator and drained by a reader thread (grpcio's response iterator has no
receive timeout, which heartbeats need)."""

from __future__ import annotations

import contextlib
import functools
import json
import math
import queue
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast
from urllib.parse import urlsplit

from google.protobuf.message import DecodeError, Message

from ._proto import arena_pb2 as pb
from .errors import ProtocolError

if TYPE_CHECKING:
    from websockets.sync.client import ClientConnection

#: The WebSocket endpoint's path on the server.
AGENT_PATH = "/api/v1/agent"


class ConnectionLost(Exception):
    """The connection failed or ended; the session may be resumed on a new one."""


class ServerAnswered(ConnectionLost):
    """The server answered the WebSocket handshake with a 5xx status instead of the upgrade
    (503 "retry shortly" over its connection caps): a server is there, so even a run's first
    connection is retried."""


class AtCapacity(ServerAnswered):
    """The server refused the connection at its connection caps ("too many open connections;
    retry shortly": the 503 `too_many_connections`, or gRPC's UNAVAILABLE with the
    `arena-refusal` metadata): waited out like a busy submission, for up to BUSY_WAIT_S, rather
    than counted against max_reconnects."""


# The code of the server's refusal at its connection caps (its 503's JSON body), and the gRPC
# metadata key its refusal carries (the Rust SDK's `protocol::REFUSAL_METADATA`).
AT_CAPACITY = "too_many_connections"
REFUSAL_METADATA = "arena-refusal"


def _http_refusal(status: int, body: bytes) -> tuple[str, bool]:
    """What an HTTP answer in place of the upgrade says: its status, and the API's JSON error
    (`{"error": {"code", "message"}}`) when it carries one, which the status alone hid."""
    code = message = ""
    try:
        error = json.loads(body or b"{}").get("error") or {}
        code, message = str(error.get("code", "")), str(error.get("message", ""))
    except (ValueError, AttributeError):
        pass
    words = f": {code}: {message}"[:102] if code or message else ""
    return f"the server answered HTTP {status}{words}", status == 503 and code == AT_CAPACITY


class CutBeforeAnswer(ServerAnswered):
    """The connection was accepted and then reset or closed before any answer: something
    listens there (a flaky first packet, a proxy whose backend restarts), but a run's first
    connection tries this only FIRST_CONNECTION_CUTS times, since a ws:// URL at a TLS port looks
    the same."""


class Transport(Protocol):
    def send(self, envelope: pb.Envelope) -> None:
        """Sends one message; ConnectionLost when the connection is gone."""

    def recv(self, timeout: float) -> pb.Envelope | None:
        """The next message, or None after `timeout` seconds without one. ConnectionLost when
        the connection ends; ProtocolError for a frame that cannot be decoded."""

    def close(self) -> None:
        """Ends the connection politely (idempotent)."""


@dataclass(frozen=True)
class Endpoint:
    """Where and how to connect: `transport` is "ws" or "grpc"; `address` is a WebSocket URL or
    a gRPC target (host:port)."""

    transport: str
    address: str
    tls: bool = False


def resolve_endpoint(url: str, transport: str | None = None) -> Endpoint:
    """Maps a server URL to an endpoint.

    `http://host:port` (the server's base URL, as `arena serve` prints it) serves both
    transports: WebSocket at `ws://host:port/api/v1/agent`, gRPC at `host:port`. `ws://` and
    `wss://` URLs with a path are used as given, without one (or with "/") get the agent path;
    `grpc://host:port` (and `grpcs://` for TLS) name a gRPC target. `transport` (None: from the
    URL, else "ws") must agree with an explicit scheme.
    """
    if transport not in (None, "ws", "grpc"):
        raise ValueError(f"transport must be 'ws' or 'grpc', got {transport!r}")
    if "://" not in url:
        url = "http://" + url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if not parts.netloc:
        raise ValueError(f"no host in server URL {url!r}")
    if scheme in ("ws", "wss", "grpc", "grpcs"):
        implied = "ws" if scheme.startswith("ws") else "grpc"
        if transport is not None and transport != implied:
            raise ValueError(f"URL {url!r} is a {implied} endpoint but transport={transport!r} was asked for")
        transport = implied
    elif scheme not in ("http", "https"):
        raise ValueError(f"unsupported URL scheme {scheme!r} in {url!r} (use http://, ws:// or grpc://)")
    transport = transport or "ws"
    tls = scheme in ("https", "wss", "grpcs")
    if transport == "grpc":
        if parts.path not in ("", "/"):
            raise ValueError(f"a gRPC endpoint has no path: {url!r} (use grpc://host:port)")
        return Endpoint("grpc", parts.netloc, tls)
    if scheme in ("ws", "wss"):
        if parts.path in ("", "/"):
            # A bare ws://HOST:PORT would reach the web index, not the agent endpoint (the Rust
            # SDK dials the agent path too); an explicit path is kept as given.
            return Endpoint("ws", parts._replace(path=AGENT_PATH).geturl(), tls)
        return Endpoint("ws", url, tls)
    path = parts.path.rstrip("/")
    # The agent path pasted as it is printed (http://HOST:PORT/api/v1/agent) is that path, not
    # a prefix to put it under again.
    if not path.endswith(AGENT_PATH):
        path += AGENT_PATH
    return Endpoint("ws", f"{'wss' if tls else 'ws'}://{parts.netloc}{path}", tls)


def open_transport(endpoint: Endpoint, encoding: str, open_timeout: float) -> Transport:
    """Opens a connection; ConnectionLost if it cannot be made (worth retrying)."""
    if endpoint.transport == "grpc":
        return GrpcTransport(endpoint.address, endpoint.tls, open_timeout)
    return WebSocketTransport(endpoint.address, encoding, open_timeout)


class _DrainingConnection(Protocol):
    """What WebSocketTransport uses of a connection of `_draining_connection_class()`."""

    write_error: OSError | None

    def send(self, message: str | bytes) -> None: ...

    def recv(self, timeout: float | None = None) -> str | bytes: ...


@functools.cache
def _draining_connection_class() -> type[ClientConnection]:
    """websockets' ClientConnection, except that a write to a connection the server has already
    reset (EPIPE, ECONNRESET) does not lose what the server sent before closing.

    A server that ends a session (its step deadline passed while this process was stopped, say)
    sends its episode ends, `disconnect` and a Close frame, then closes the socket; writing to it
    afterwards fails. websockets (15) then drops frames still to be delivered: its reader thread
    discards every frame parsed in the same read as the Close once its automatic Close reply
    fails ("If self.send_data raised an exception, then events are lost"), and a failed
    `send()` closes the socket before the reader has drained what the kernel still holds for
    it. Here such a write error is only recorded (`write_error`): the reader goes on, queues
    every frame the server sent, and ends the connection at the reset it then reads; the
    transport's `send` raises ConnectionLost for the recorded error itself.
    """
    from websockets.sync.client import ClientConnection

    class DrainingClientConnection(ClientConnection):
        write_error: OSError | None = None

        # Arguments passed through: `send_data` is websockets' internal (15.x takes none); a
        # release that renames it leaves this class websockets' own behaviour.
        def send_data(self, *args: Any, **kwargs: Any) -> Any:
            try:
                return super().send_data(*args, **kwargs)
            except ConnectionError as e:  # BrokenPipe, ConnectionReset/Aborted; not timeouts
                if self.write_error is None:
                    self.write_error = e
                return None

    return DrainingClientConnection


class WebSocketTransport:
    """One WebSocket connection; the encoding of the first frame (Connect) is the session's."""

    def __init__(self, url: str, encoding: str, open_timeout: float) -> None:
        from websockets.exceptions import InvalidHandshake, InvalidStatus, InvalidURI
        from websockets.sync.client import connect

        self._binary = encoding == "binary"
        # Entered as a context manager, as websockets >= 17 asks (closed by close()).
        self._stack = contextlib.ExitStack()
        try:
            # `connect` makes the connection with `create_connection`, which its annotations do
            # not carry: it is a DrainingClientConnection.
            self._ws = cast(
                _DrainingConnection,
                self._stack.enter_context(
                    connect(
                        url,
                        open_timeout=open_timeout,
                        close_timeout=2,
                        max_size=None,  # revealed references and large batches exceed websockets' 1 MiB
                        compression=None,  # the server does not negotiate it
                        ping_interval=None,  # liveness is the protocol's heartbeats
                        create_connection=_draining_connection_class(),
                    )
                ),
            )
        except InvalidURI as e:
            raise ValueError(str(e)) from e
        except InvalidStatus as e:
            # A 5xx (503 over the server's connection caps, a proxy's 502 while the server
            # restarts): retried. A 4xx (a wrong path, a plain web server) is a wrong address.
            said, at_capacity = _http_refusal(e.response.status_code, e.response.body or b"")
            if at_capacity:
                raise AtCapacity(f"connecting to {url}: {said}") from e
            if e.response.status_code >= 500:
                raise ServerAnswered(f"connecting to {url}: {said}") from e
            raise ConnectionLost(f"connecting to {url}: {said}") from e
        except (OSError, TimeoutError, InvalidHandshake) as e:  # refused, DNS, a bad handshake
            # Accepted, then reset or closed mid-handshake: something listens there (a flaky
            # first packet, a proxy whose backend restarts), so the run retries; refused (nothing
            # listening), a name that does not resolve or a wrong protocol is a wrong address.
            cut = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, EOFError)
            if isinstance(e, cut) or isinstance(e.__cause__, cut):
                raise CutBeforeAnswer(f"connecting to {url}: {e} (the connection was cut after it was accepted)") from e
            raise ConnectionLost(f"connecting to {url}: {e}") from e

    def send(self, envelope: pb.Envelope) -> None:
        from websockets.exceptions import ConnectionClosed

        frame: str | bytes = envelope.SerializeToString() if self._binary else envelope_to_json(envelope)
        try:
            self._ws.send(frame)
        except ConnectionClosed as e:
            raise ConnectionLost(f"sending to the server: {e}") from e
        # A write that failed on a reset connection (see _draining_connection_class): the
        # frames the server sent before are still delivered by `recv`.
        if self._ws.write_error is not None:
            raise ConnectionLost(f"sending to the server: {self._ws.write_error}")

    def recv(self, timeout: float) -> pb.Envelope | None:
        from websockets.exceptions import ConnectionClosed

        try:
            frame = self._ws.recv(timeout=timeout)
        except TimeoutError:
            return None
        except ConnectionClosed as e:
            raise ConnectionLost(f"server closed the connection ({e})") from e
        if isinstance(frame, str):
            return envelope_from_json(frame)
        envelope = pb.Envelope()
        try:
            envelope.ParseFromString(frame)
        except DecodeError as e:
            raise ProtocolError(f"undecodable binary frame from the server: {e}") from e
        return envelope

    def close(self) -> None:
        self._stack.close()


class _SessionCall(Protocol):
    """What GrpcTransport uses of the `Session` call (grpcio's response iterator; the generated
    arena_pb2_grpc.py is untyped)."""

    def __iter__(self) -> Iterator[pb.Envelope]: ...

    def cancel(self) -> bool: ...


class _Closed:
    """Queue marker: the response stream ended (refused at the server's connection caps when
    `at_capacity`)."""

    def __init__(self, reason: str, at_capacity: bool = False) -> None:
        self.reason = reason
        self.at_capacity = at_capacity


class GrpcTransport:
    """One `arena.v1.AgentGateway/Session` call on its own channel."""

    def __init__(self, target: str, tls: bool, open_timeout: float) -> None:
        import grpc

        from ._proto.arena_pb2_grpc import AgentGatewayStub

        self._grpc = grpc
        options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
        if tls:
            self._channel = grpc.secure_channel(target, grpc.ssl_channel_credentials(), options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        self._wait_ready(target, open_timeout)
        self._requests: queue.SimpleQueue[pb.Envelope | None] = queue.SimpleQueue()
        self._responses: queue.SimpleQueue[pb.Envelope | _Closed] = queue.SimpleQueue()
        self._closed = False
        call: _SessionCall = AgentGatewayStub(self._channel).Session(self._outgoing())
        self._call: _SessionCall | None = call
        self._reader = threading.Thread(target=self._read, args=(call,), name="arena-grpc-reader", daemon=True)
        self._reader.start()

    def _wait_ready(self, target: str, open_timeout: float) -> None:
        # Not `channel_ready_future`: it keeps retrying a refused port until the timeout, while
        # the first TRANSIENT_FAILURE already says the server is not there (the caller's
        # reconnect loop owns the retrying).
        grpc = self._grpc
        settled = threading.Event()
        seen: list[Any] = []

        def watch(state: Any) -> None:
            seen.append(state)
            if state in (
                grpc.ChannelConnectivity.READY,
                grpc.ChannelConnectivity.TRANSIENT_FAILURE,
                grpc.ChannelConnectivity.SHUTDOWN,
            ):
                settled.set()

        self._channel.subscribe(watch, try_to_connect=True)
        settled.wait(open_timeout)
        self._channel.unsubscribe(watch)
        state = seen[-1] if seen else None
        if state == grpc.ChannelConnectivity.READY:
            return
        self._channel.close()
        if state == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            raise ConnectionLost(f"connecting to {target}: unreachable or refused (gRPC TRANSIENT_FAILURE)")
        raise ConnectionLost(f"connecting to {target}: no gRPC connection within {open_timeout:g} s")

    def _outgoing(self) -> Iterator[pb.Envelope]:  # the request stream; None ends it (half-close)
        while True:
            envelope = self._requests.get()
            if envelope is None:
                return
            yield envelope

    def _read(self, call: _SessionCall) -> None:
        try:
            for envelope in call:
                self._responses.put(envelope)
            self._responses.put(_Closed("server closed the stream"))
        except self._grpc.RpcError as e:
            code = e.code() if hasattr(e, "code") else None
            details = e.details() if hasattr(e, "details") else str(e)
            # (key, value) pairs: grpcio's are namedtuples (types-grpcio's RpcError, marked
            # FIXME there, declares objects with `key` and `value` that do not unpack).
            trailing = cast(
                "Sequence[tuple[str, str | bytes]] | None",
                e.trailing_metadata() if hasattr(e, "trailing_metadata") else None,
            )
            refused = any(key == REFUSAL_METADATA for key, _ in trailing or ())
            self._responses.put(_Closed(f"gRPC stream failed: {getattr(code, 'name', code)}: {details}", refused))

    def send(self, envelope: pb.Envelope) -> None:
        if self._closed:
            raise ConnectionLost("the gRPC stream is closed")
        self._requests.put(envelope)

    def recv(self, timeout: float) -> pb.Envelope | None:
        try:
            item = self._responses.get(timeout=timeout)
        except queue.Empty:
            return None
        if isinstance(item, _Closed):
            self._closed = True
            raise AtCapacity(item.reason) if item.at_capacity else ConnectionLost(item.reason)
        return item

    def close(self) -> None:
        call: _SessionCall | None = getattr(self, "_call", None)
        if call is None:
            return
        self._requests.put(None)  # ends the request stream; the server then ends the session
        self._reader.join(timeout=2)
        call.cancel()
        self._channel.close()
        self._call = None


# JSON text frames: the message's fields by their schema names plus "type" (docs/protocol.md §4).
# Not protobuf's canonical JSON mapping, so json_format does not apply; the schema's descriptors
# drive a small converter instead.


def envelope_to_json(envelope: pb.Envelope) -> str:
    kind = envelope.WhichOneof("msg")
    if kind is None:
        raise ValueError("an Envelope with no message set")
    body = {"type": kind}
    body.update(_message_to_dict(getattr(envelope, kind)))
    return json.dumps(body, allow_nan=False, separators=(",", ":"))


def envelope_from_json(text: str) -> pb.Envelope:
    try:
        body = json.loads(text)
    except ValueError as e:
        raise ProtocolError(f"undecodable JSON frame from the server: {e}") from e
    if not isinstance(body, dict) or not isinstance(body.get("type"), str):
        raise ProtocolError(f'a JSON frame from the server without a "type": {text[:200]}')
    envelope = pb.Envelope()
    kind = body.pop("type")
    if kind not in pb.Envelope.DESCRIPTOR.fields_by_name:
        return envelope  # a message this SDK does not know: left empty, the client skips it
    message = getattr(envelope, kind)
    message.SetInParent()
    try:
        _fill(message, body)
    except (TypeError, ValueError, AttributeError) as e:
        raise ProtocolError(f"invalid {kind} from the server: {e}") from e
    return envelope


def _message_to_dict(message: Message) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in message.DESCRIPTOR.fields:
        value = getattr(message, field.name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            out[field.name] = dict(value)
        elif field.is_repeated:
            if field.message_type is not None:
                out[field.name] = [_message_to_dict(m) for m in value]
            else:
                out[field.name] = list(value)
        elif field.message_type is not None:
            if message.HasField(field.name):  # never null: the server rejects it
                out[field.name] = _message_to_dict(value)
        else:
            out[field.name] = value
    return out


def _fill(message: Message, body: dict[str, Any]) -> None:
    fields = message.DESCRIPTOR.fields_by_name
    for name, value in body.items():
        field = fields.get(name)
        if field is None or value is None:  # unknown fields are ignored; null means absent
            continue
        target = getattr(message, name)
        if field.message_type is not None and field.message_type.GetOptions().map_entry:
            for key, item in value.items():  # metric maps: a non-finite value is written null
                target[key] = math.nan if item is None else item
        elif field.is_repeated:
            if field.message_type is not None:
                for item in value:
                    _fill(target.add(), item)
            else:
                target.extend(value)
        elif field.message_type is not None:
            target.SetInParent()
            _fill(target, value)
        else:
            setattr(message, name, value)
