"""Port-forward (``/portForward/{ns}/{pod}[/{uid}]``) relayed to the pool's ``pods/portforward``.

Why a relay of stream pairs and not of bytes: the kubelet protocol ``portforward.k8s.io`` multiplexes
every local connection of ``kubectl port-forward`` as one pair of SPDY streams (``streamType`` data
and error, the same ``requestID``, the ``port``) on one connection. We open one SPDY connection to the
pool per front connection and one pool pair per front pair; bytes, half-closes and the error stream's
message cross over as they are. kube-apiserver (1.31+) turns kubectl's WebSocket tunnel back into
SPDY toward the kubelet, so that is what it sends us; a client talking WebSocket straight to us gets
the kubelet's ``v4.channel.k8s.io`` port-forward framing (one connection per ``?port=``).

Buffers are bounded: bytes the pool has not taken yet pause the reading of the front connection,
and the pool's reader waits for the front's socket to drain. A lost pool connection (the tunnel cut)
writes why on every open pair's error stream and ends the whole session, as a kubelet whose runtime
went away does: kubectl prints it and exits with "lost connection to pod". Telling is best effort
within ``LOST_NOTICE_TIMEOUT``: a client that does not read does not keep the session. Our echoes of
the pool's PINGs are bounded as the exec dialer's are (``spdyclient.hold_for_backlog``).
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
import struct
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

from vkbridge.kubeletapi.streams import spdy
from vkbridge.kubeletapi.streams.channels import PORTFORWARD
from vkbridge.kubeletapi.streams.pooldial import PoolDialer
from vkbridge.kubeletapi.streams.spdyclient import close_upgraded, hold_for_backlog, spdy_upgrade
from vkbridge.kubeletapi.streams.spdyconn import SpdyConnection, SpdyStream
from vkbridge.logs import get_logger

__all__ = [
    "DATA",
    "ERROR",
    "MAX_WS_PORTS",
    "PairTracker",
    "PoolPortForward",
    "PortForwardError",
    "SpdyPortForward",
    "StreamKey",
    "WsPortForward",
    "port_prefix",
    "stream_key",
    "ws_ports",
]

log = get_logger("vkbridge.kubeletapi.portforward")

DATA: Final = "data"
ERROR: Final = "error"
DIAL_TIMEOUT: Final = 30.0
_CHUNK: Final = 32 * 1024
_PAUSE_BYTES: Final = 1 << 20  # front bytes queued for the pool before we stop reading the front
_RESUME_BYTES: Final = 256 * 1024
_ERROR_LIMIT: Final = 64 * 1024  # a pool error stream is one message; more is dropped
MAX_PAIRS: Final = 1024  # streams announced but never paired, per connection
# A WebSocket channel number is one byte and each port takes two (data 2i, error 2i+1): beyond 128 ports
# the kubelet's channels wrap (byte(i)) onto the first ports'; we refuse with 400 before the upgrade.
MAX_WS_PORTS: Final = 128
# client-go's requestIDs are counters; an unpaired stream keeps its id, so a 256 KiB one (a few hundred
# bytes through zlib) times MAX_PAIRS would hold 256 MiB.
MAX_REQUEST_ID: Final = 256
# Telling the clients of a session that the pool was lost is best effort within this; a client that
# does not read (its TCP window full) would otherwise keep the session and its tasks for ever.
LOST_NOTICE_TIMEOUT: Final = 5.0


async def _within_notice_bound(notice: Awaitable[None]) -> None:
    """Telling the clients that the pool was lost, best effort: a client that does not read is not
    waited for past LOST_NOTICE_TIMEOUT."""
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(LOST_NOTICE_TIMEOUT):
            await notice


class PortForwardError(ValueError):
    """A malformed port-forward stream or request (the kubelet's message where it has one)."""


# ---------------------------------------------------------------------------------------------- framing


@dataclass(frozen=True)
class StreamKey:
    kind: str  # DATA or ERROR
    port: int
    request_id: str


def _port(text: str | None) -> int:
    if text is None or not text.strip():
        raise PortForwardError("port header is missing")
    try:
        port = int(text.strip(), 10)
    except ValueError:
        raise PortForwardError(f'unable to parse "{text}" as a port: not a number') from None
    if not 0 < port < 65536:
        raise PortForwardError(f"port {port} must be > 0 and < 65536")
    return port


def stream_key(headers: spdy.Headers, stream_id: int) -> StreamKey:
    """What a port-forward stream is, from its SYN_STREAM headers.

    Without ``requestID`` (clients before 1.6) the kubelet pairs an error stream with the data
    stream opened right after it: stream ids ``n`` and ``n+2``; we key them the same way.
    """
    kind = (spdy.header_value(headers, "streamtype") or "").lower()
    if kind not in (DATA, ERROR):
        raise PortForwardError(f'invalid stream type "{kind}"' if kind else "stream type is missing")
    port = _port(spdy.header_value(headers, "port"))
    request_id = spdy.header_value(headers, "requestid") or ""
    if len(request_id) > MAX_REQUEST_ID:
        raise PortForwardError(f"requestID of {len(request_id)} characters")
    if not request_id:
        request_id = f"#{stream_id if kind == ERROR else stream_id - 2}"
    return StreamKey(kind, port, request_id)


@dataclass
class _Half:
    data: SpdyStream | None = None
    error: SpdyStream | None = None
    port: int = 0


class PairTracker:
    """Collects streams until both of a request's pair are there; pure (no I/O)."""

    def __init__(self, limit: int = MAX_PAIRS) -> None:
        self._open: dict[str, _Half] = {}
        self._limit = limit

    def add(self, key: StreamKey, stream: SpdyStream) -> tuple[int, SpdyStream, SpdyStream] | None:
        """(port, data, error) once the pair is complete; PortForwardError for a bad sequence."""
        half = self._open.get(key.request_id)
        if half is None:
            if len(self._open) >= self._limit:
                raise PortForwardError("too many unpaired port-forward streams")
            half = self._open[key.request_id] = _Half(port=key.port)
        elif half.port != key.port:
            raise PortForwardError(f"request {key.request_id}: port {key.port} differs from {half.port}")
        if getattr(half, key.kind) is not None:
            raise PortForwardError(f"request {key.request_id}: a second {key.kind} stream")
        setattr(half, key.kind, stream)
        if half.data is None or half.error is None:
            return None
        del self._open[key.request_id]
        return half.port, half.data, half.error

    def pending(self) -> list[SpdyStream]:
        return [s for h in self._open.values() for s in (h.data, h.error) if s is not None]


def ws_ports(values: Iterable[str]) -> list[int]:
    """The ``?port=`` list of a WebSocket port-forward (comma-separated values allowed)."""
    ports = [_port(p) for v in values for p in v.split(",") if p.strip()]
    if not ports:
        raise PortForwardError('query parameter "port" is required')
    if len(ports) > MAX_WS_PORTS:
        raise PortForwardError(f"{len(ports)} ports requested; a WebSocket port-forward takes {MAX_WS_PORTS}")
    return ports


def port_prefix(port: int) -> bytes:
    """The first message on each WebSocket channel: the port, little-endian uint16."""
    return struct.pack("<H", port)


# ---------------------------------------------------------------------------------------------- pool side


class PairSink(Protocol):
    """Where a pool pair's output goes (the front's streams); awaited, so it carries backpressure."""

    async def data(self, payload: bytes) -> None: ...
    async def data_end(self) -> None: ...
    async def error(self, payload: bytes) -> None: ...
    async def error_end(self) -> None: ...
    async def reset(self) -> None: ...


@dataclass(eq=False)
class PoolPair:
    port: int
    data_id: int
    error_id: int
    sink: PairSink
    data_done: bool = False
    error_done: bool = False
    write_closed: bool = False
    error_bytes: int = 0


class PoolPortForward:
    """One SPDY connection to the pool's ``pods/portforward`` of one pod; we open every stream."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._enc = spdy.FrameEncoder()
        self._dec = spdy.FrameDecoder()
        self._next_id = 1
        self._by_id: dict[int, PoolPair] = {}
        self._read_task: asyncio.Task[None] | None = None
        self.lost = asyncio.Event()
        self.reason = ""

    @classmethod
    async def dial(cls, dialer: PoolDialer, path: str) -> PoolPortForward:
        """POST + ``Upgrade: SPDY/3.1`` with ``portforward.k8s.io``; DialError with the pool's answer."""
        creds, ctx, headers = await dialer.identity()
        reader, writer = await spdy_upgrade(
            creds.server,
            ctx,
            target=path,
            protocols=(PORTFORWARD,),
            headers=headers,
            then=_upgraded,
            server_hostname=creds.tls_server_name,
            proxy_url=creds.proxy_url,
            timeout=DIAL_TIMEOUT,
        )
        conn = cls(reader, writer)
        conn._read_task = asyncio.create_task(conn._read_loop(), name="pool-portforward-read")
        return conn

    def open_pair(self, port: int, request_id: str, sink: PairSink) -> PoolPair:
        """SYN_STREAM error then data (client-go's order); data may follow before the replies."""
        pair = PoolPair(port, data_id=self._next_id + 2, error_id=self._next_id, sink=sink)
        self._next_id += 4
        self._by_id[pair.error_id] = self._by_id[pair.data_id] = pair
        for sid, kind in ((pair.error_id, ERROR), (pair.data_id, DATA)):
            hdrs = {"streamtype": [kind], "port": [str(port)], "requestid": [request_id]}
            self._write(spdy.SynStream(sid, hdrs, fin=kind == ERROR))  # we never write to error
        return pair

    async def send(self, pair: PoolPair, data: bytes) -> None:
        if pair.write_closed or self.lost.is_set():
            return
        for i in range(0, len(data), _CHUNK):
            self._write(spdy.Data(pair.data_id, data[i : i + _CHUNK]))
        await self._drain()

    async def close_write(self, pair: PoolPair) -> None:
        """Half-close: the local client sent everything (the pod's socket gets its FIN)."""
        if not pair.write_closed:
            pair.write_closed = True
            self._write(spdy.Data(pair.data_id, b"", fin=True))
            await self._drain()

    def reset(self, pair: PoolPair) -> None:
        pair.write_closed = True
        for sid in (pair.data_id, pair.error_id):
            if self._by_id.pop(sid, None) is not None:
                self._write(spdy.RstStream(sid, spdy.RstStatus.CANCEL))

    def _write(self, frame: spdy.Frame) -> None:
        if not self._writer.transport.is_closing():
            self._writer.write(self._enc.encode(frame))

    async def _drain(self) -> None:
        with contextlib.suppress(ConnectionError, OSError, ssl.SSLError):
            await self._writer.drain()

    async def _read_loop(self) -> None:
        try:
            while data := await self._reader.read(65536):
                for frame in self._dec.feed(data):
                    await self._on_frame(frame)
                await hold_for_backlog(self._writer)  # the PING echoes a pool leaves unread
            self.reason = "the pool closed the connection"
        except spdy.SpdyError as exc:
            self.reason = f"SPDY protocol error from the pool: {exc}"
        except (ConnectionError, OSError, ssl.SSLError) as exc:
            self.reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        finally:
            self.lost.set()

    async def _on_frame(self, frame: spdy.Frame) -> None:
        if isinstance(frame, spdy.Data):
            await self._on_data(frame)
        elif isinstance(frame, spdy.RstStream):
            if (pair := self._by_id.get(frame.stream_id)) is not None:
                pair.write_closed = True  # the pool's stream is gone: nothing more goes to it
                self._forget(pair)
                await pair.sink.reset()
        elif isinstance(frame, spdy.Ping):
            if frame.ping_id % 2 == 0:  # the server's ping: echo it
                self._write(frame)
        elif isinstance(frame, spdy.GoAway):
            self.reason = "the pool ended the session (GOAWAY)"
        elif isinstance(frame, (spdy.SynReply, spdy.HeadersFrame)) and frame.fin:
            await self._on_data(spdy.Data(frame.stream_id, b"", fin=True))

    async def _on_data(self, frame: spdy.Data) -> None:
        pair = self._by_id.get(frame.stream_id)
        if pair is None:
            return
        if frame.stream_id == pair.data_id and not pair.data_done:
            if frame.data:
                await pair.sink.data(frame.data)
            if frame.fin:
                pair.data_done = True
                await pair.sink.data_end()
        elif frame.stream_id == pair.error_id and not pair.error_done:
            if frame.data and pair.error_bytes < _ERROR_LIMIT:
                chunk = frame.data[: _ERROR_LIMIT - pair.error_bytes]
                pair.error_bytes += len(chunk)
                await pair.sink.error(chunk)
            if frame.fin:
                pair.error_done = True
                await pair.sink.error_end()
        if pair.data_done and pair.error_done:
            self._forget(pair)

    def _forget(self, pair: PoolPair) -> None:
        self._by_id.pop(pair.data_id, None)
        self._by_id.pop(pair.error_id, None)

    def open_pairs(self) -> list[PoolPair]:
        return list({id(p): p for p in self._by_id.values()}.values())

    async def close(self) -> None:
        await close_upgraded(self._read_task, self._writer)


async def _upgraded(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _headers: dict[str, str]
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The upgraded connection as is: the port-forward session opens its streams per pair."""
    return reader, writer


def lost_message(port: int, reason: str) -> bytes:
    return (
        f"error forwarding port {port}: vkbridge lost its connection to the pool ({reason}); "
        "the port-forward session ends"
    ).encode()


# ---------------------------------------------------------------------------------------------- SPDY front


class _Backlog:
    """Front bytes queued for the pool, across pairs: pauses the front's reading above a bound."""

    def __init__(self, pause: Callable[[], None], resume: Callable[[], None]) -> None:
        self._pause, self._resume = pause, resume
        self.size = 0
        self.paused = False

    def add(self, n: int) -> None:
        self.size += n
        if not self.paused and self.size > _PAUSE_BYTES:
            self.paused = True
            self._pause()

    def take(self, n: int) -> None:
        self.size -= n
        if self.paused and self.size <= _RESUME_BYTES:
            self.paused = False
            self._resume()


@dataclass(eq=False)
class _SpdySink:
    conn: SpdyConnection
    data_stream: SpdyStream
    error_stream: SpdyStream
    inbound: asyncio.Queue[bytes | None]  # the client's bytes for the pool; None ends the pump
    closed: asyncio.Event = field(default_factory=asyncio.Event)

    async def data(self, payload: bytes) -> None:
        self.conn.send_data(self.data_stream, payload)
        await self.conn.drain()

    async def data_end(self) -> None:
        self.conn.send_data(self.data_stream, b"", fin=True)

    async def error(self, payload: bytes) -> None:
        self.conn.send_data(self.error_stream, payload)

    async def error_end(self) -> None:
        self.conn.send_data(self.error_stream, b"", fin=True)
        self.closed.set()

    async def reset(self) -> None:
        self.conn.reset_stream(self.data_stream)
        self.conn.reset_stream(self.error_stream)
        self.end()

    def end(self) -> None:
        """Reset: no FIN will come from the client, so the pump (and the pair's memory) ends here."""
        self.closed.set()
        self.inbound.put_nowait(None)


class SpdyPortForward:
    """The API server's SPDY port-forward connection, relayed pair by pair to one pool connection."""

    def __init__(self, conn: SpdyConnection, pool: PoolPortForward, pod: str) -> None:
        self._conn = conn
        self._pool = pool
        self._pod = pod
        self._tracker = PairTracker()
        self._tasks: set[asyncio.Task[None]] = set()
        self._sinks: dict[int, tuple[_SpdySink, PoolPair]] = {}  # by front data stream id
        self._backlog = _Backlog(conn.pause_reading, conn.resume_reading)
        self.pairs = 0
        conn.on_stream = self._on_stream
        conn.on_stream_reset = self._on_reset

    def _on_stream(self, stream: SpdyStream) -> None:
        try:
            key = stream_key(stream.headers, stream.stream_id)
            stream.headers = {}  # all it says is in key; a waiting half must not hold a 256 KiB block
            complete = self._tracker.add(key, stream)
        except PortForwardError as exc:
            log.warning("refusing a port-forward stream", pod=self._pod, error=str(exc))
            self._conn.reset_stream(stream, spdy.RstStatus.REFUSED_STREAM)
            self._conn.forget(stream.stream_id)  # nothing will be relayed on it
            return
        if complete is not None:
            self._start_pair(key.request_id, *complete)

    def _start_pair(self, request_id: str, port: int, data: SpdyStream, error: SpdyStream) -> None:
        self.pairs += 1
        inbound: asyncio.Queue[bytes | None] = asyncio.Queue()
        sink = _SpdySink(self._conn, data, error, inbound)
        pair = self._pool.open_pair(port, request_id, sink)
        self._sinks[data.stream_id] = (sink, pair)

        def on_data(payload: bytes, fin: bool) -> None:
            if payload:
                self._backlog.add(len(payload))
                inbound.put_nowait(payload)
            if fin:
                inbound.put_nowait(None)

        self._conn.attach(data, on_data)  # with what the client sent before the pair was complete
        self._conn.attach(error, _discard)  # the client writes nothing there; what it does is dropped
        if data.remote_closed:
            inbound.put_nowait(None)
        task = asyncio.create_task(self._pump(inbound, pair, sink), name="portforward-pump")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _pump(self, inbound: asyncio.Queue[bytes | None], pair: PoolPair, sink: _SpdySink) -> None:
        """Front to pool for one pair, until the client's half-close or a reset of either side."""
        while (chunk := await inbound.get()) is not None:
            self._backlog.take(len(chunk))
            await self._pool.send(pair, chunk)
        while not inbound.empty():  # nothing follows a FIN or a reset; a second end may
            self._backlog.take(len(inbound.get_nowait() or b""))
        await self._pool.close_write(pair)
        await sink.closed.wait()
        self._sinks.pop(sink.data_stream.stream_id, None)
        for st in (sink.data_stream, sink.error_stream):  # a long session opens many pairs
            self._conn.forget(st.stream_id)

    def _on_reset(self, stream: SpdyStream) -> None:
        entry = self._sinks.pop(stream.stream_id, None)
        if entry is not None:  # the client gave up this connection: so does the pod's socket
            sink, pair = entry
            self._pool.reset(pair)
            sink.end()

    async def run(self) -> str:
        """Relay until the client or the pool leaves; returns how it ended, for the log."""
        client_gone = asyncio.ensure_future(self._conn.gone.wait())
        pool_lost = asyncio.ensure_future(self._pool.lost.wait())
        try:
            await asyncio.wait((client_gone, pool_lost), return_when=asyncio.FIRST_COMPLETED)
        finally:
            client_gone.cancel()
            pool_lost.cancel()
        if self._conn.gone.is_set():
            outcome = "client left"
        else:
            outcome = f"pool connection lost: {self._pool.reason}"
            await _within_notice_bound(self._tell_lost())
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._pool.close()
        self._conn.close(goaway=True)
        return outcome

    async def _tell_lost(self) -> None:
        for sink, pair in list(self._sinks.values()):
            if not sink.closed.is_set():
                await sink.error(lost_message(pair.port, self._pool.reason))
                await sink.error_end()
                await sink.data_end()
        for stream in self._tracker.pending():
            self._conn.reset_stream(stream)
        await self._conn.drain()
        await asyncio.sleep(0.2)  # let the error frames leave before the GOAWAY


def _discard(_data: bytes, _fin: bool) -> None:
    return None


# ------------------------------------------------------------------------------------------ WebSocket front


@dataclass(eq=False)
class _WsSink:
    send: Callable[[int, bytes], Awaitable[None]]
    channel: int  # the data channel; error is channel + 1
    done: asyncio.Event = field(default_factory=asyncio.Event)
    data_ended: bool = False
    error_ended: bool = False

    async def data(self, payload: bytes) -> None:
        await self.send(self.channel, payload)

    async def data_end(self) -> None:
        self.data_ended = True
        self._check()

    async def error(self, payload: bytes) -> None:
        await self.send(self.channel + 1, payload)

    async def error_end(self) -> None:
        self.error_ended = True
        self._check()

    async def reset(self) -> None:
        self.data_ended = self.error_ended = True
        self._check()

    def _check(self) -> None:
        if self.data_ended and self.error_ended:
            self.done.set()


class WsPortForward:
    """The kubelet's WebSocket port-forward: channels 2i (data) and 2i+1 (error) for ``ports[i]``.

    The framing (``[channel] + payload``, or base64 text) is the caller's ``send``; the session ends
    when every port's pod side ended, the client left, or the pool was lost.
    """

    def __init__(
        self, pool: PoolPortForward, ports: Sequence[int], send: Callable[[int, bytes], Awaitable[None]]
    ) -> None:
        self._pool = pool
        self._ports = list(ports)
        self._send = send
        self._pairs: list[tuple[_WsSink, PoolPair]] = []

    async def start(self) -> None:
        for i, port in enumerate(self._ports):
            await self._send(2 * i, port_prefix(port))
            await self._send(2 * i + 1, port_prefix(port))
            sink = _WsSink(self._send, 2 * i)
            self._pairs.append((sink, self._pool.open_pair(port, str(i), sink)))

    async def client_data(self, channel: int, payload: bytes) -> None:
        """A client message: bytes for the port of data channel ``channel``; others are ignored."""
        if channel % 2 == 0 and channel // 2 < len(self._pairs) and payload:
            await self._pool.send(self._pairs[channel // 2][1], payload)

    async def client_closed(self) -> None:
        for _, pair in self._pairs:
            await self._pool.close_write(pair)

    async def wait(self, client_gone: Awaitable[object]) -> str:
        all_done = asyncio.gather(*(s.done.wait() for s, _ in self._pairs))
        lost = asyncio.ensure_future(self._pool.lost.wait())
        gone = asyncio.ensure_future(client_gone)
        try:
            await asyncio.wait((all_done, lost, gone), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for f in (all_done, lost, gone):
                f.cancel()
            await asyncio.gather(all_done, lost, gone, return_exceptions=True)  # retrieved: no log noise
        if all(sink.done.is_set() for sink, _ in self._pairs):  # not all_done: a cancelled gather is done
            return "pod side closed"
        if self._pool.lost.is_set():
            await _within_notice_bound(self._tell_lost())
            return f"pool connection lost: {self._pool.reason}"
        return "client left"

    async def _tell_lost(self) -> None:
        for sink, pair in self._pairs:
            if not sink.done.is_set():
                with contextlib.suppress(ConnectionError):
                    await sink.error(lost_message(pair.port, self._pool.reason))
