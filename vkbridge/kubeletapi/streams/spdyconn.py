"""The server side of one SPDY/3.1 connection (after ``101 Switching Protocols``) and its exec front.

``SpdyConnection`` is the asyncio protocol: it frames, replies to the client's streams, echoes pings
and applies write backpressure. ``SpdyExecFront`` maps the remote-command streams (identified by the
``streamtype`` header, not by id) onto ``ExecFront`` for the relay. Behaviour follows what client-go
and moby/spdystream expect from a kubelet (technotes §1.5): empty SYN_REPLY for every stream, data
after the reply, FIN on every stream we write, the Status on ``error`` last.

DATA that arrives before a stream's reader is attached (stdin sent right after its SYN_STREAM, while
we still wait for the other streams) is kept for it, as spdystream's unbuffered channel holds it, within
``INBOUND_BYTES_HIGH`` per connection: above it the client is not read until a reader takes it.
HEADERS frames after SYN_STREAM are dropped (their FIN still half-closes): spdystream never merges them
into ``Stream.Headers()``, which is all the kubelet reads, and keeping them let a client grow our memory
without bound through zlib's shared context.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, cast

from vkbridge.kubeletapi.streams import spdy
from vkbridge.kubeletapi.streams.channels import STDERR, STDOUT, ChannelError, ResizeDecoder, error_payload
from vkbridge.kubeletapi.streams.relay import ExecFront, Inbound
from vkbridge.logs import get_logger

__all__ = ["SpdyConnection", "SpdyExecFront", "SpdyStream", "StreamSetTimeout"]

log = get_logger("vkbridge.kubeletapi.spdy")

STREAM_CREATION_TIMEOUT: Final = 30.0
CLOSE_GRACE: Final = 5.0
ABORT_AFTER: Final = 1.0
_DATA_CHUNK: Final = 32 * 1024
_INBOUND_HIGH: Final = 64  # queued client events before we stop reading the socket
_INBOUND_LOW: Final = 16
# Client bytes (stdin) queued for the pool before we stop reading the socket: a frame may carry 16 MiB,
# so counting events alone would let 64 of them (1 GiB) in while the pool reads slowly.
INBOUND_BYTES_HIGH: Final = 1 << 20
INBOUND_BYTES_LOW: Final = 256 * 1024
# Our unsent bytes above which we stop reading the client: data writers wait for the drain, but the
# replies to its frames (PING echoes, SYN_REPLY, RST) do not, so a client that sends without reading
# would otherwise grow this buffer for as long as it sends. Well above the transports' high-water marks.
WRITE_BACKLOG_MAX: Final = 1 << 20
# The kubelet's streamingConnectionIdleTimeout default: a connection with no frame read or written for
# this long is closed, its streams with it (spdystream's idle timer; client-go pings every 5 s, so only a
# client that is alive but silent, without pings, is ever closed by it). A dead peer is TCP keepalive's.
STREAMING_IDLE_TIMEOUT: Final = 4 * 3600.0
KNOWN_STREAM_TYPES: Final = frozenset({"error", "stdin", "stdout", "stderr", "resize"})


class StreamSetTimeout(Exception):
    """The client did not open the streams it announced in time."""


@dataclass
class SpdyStream:
    stream_id: int
    headers: spdy.Headers
    kind: str
    remote_closed: bool = False
    local_closed: bool = False
    reset: bool = False
    on_data: Callable[[bytes, bool], None] | None = field(default=None, repr=False)
    pending: bytearray = field(default_factory=bytearray, repr=False)  # DATA before on_data was set


class SpdyConnection(asyncio.Protocol):
    """asyncio protocol for a SPDY/3.1 connection whose peer (the client) opens every stream."""

    def __init__(
        self, accept: frozenset[str] = KNOWN_STREAM_TYPES, idle_timeout: float = STREAMING_IDLE_TIMEOUT
    ) -> None:
        super().__init__()
        self._accept = accept
        self._idle_timeout = idle_timeout
        self._last_frame = 0.0  # loop time of the last frame read or written
        self._idle_timer: asyncio.TimerHandle | None = None
        self._transport: asyncio.Transport | None = None
        self._decoder = spdy.FrameDecoder()
        self._encoder = spdy.FrameEncoder()
        self._framing = False
        self._prebuffer = bytearray()
        self._last_peer_id = 0
        self.streams: dict[int, SpdyStream] = {}
        self.by_kind: dict[str, SpdyStream] = {}
        self._stream_event = asyncio.Event()
        self._writable = asyncio.Event()
        self._writable.set()
        self._read_pauses: set[str] = set()  # why the client is not being read (any reason holds it)
        self._pending_bytes = 0  # DATA kept for streams without a reader yet, across streams
        self._settled = False  # every reader there will be is attached: DATA without one is dropped
        self.closed = asyncio.Event()  # transport gone
        self.gone = asyncio.Event()  # peer said GOAWAY or the transport is gone
        self.on_gone: Callable[[], None] | None = None
        self.on_stream_reset: Callable[[SpdyStream], None] | None = None
        self.on_lost: Callable[[], None] | None = None
        # Set (port-forward): every stream goes here, with any number of each kind, not into by_kind.
        self.on_stream: Callable[[SpdyStream], None] | None = None

    # -- asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # some loops' transports are not subclasses

    def data_received(self, data: bytes) -> None:
        if not self._framing:
            self._prebuffer += data  # the client may only speak SPDY after our 101; keep it for then
            if len(self._prebuffer) > 1 << 20:
                self.close()
            return
        try:
            frames = self._decoder.feed(data)
        except spdy.SpdyError as exc:
            log.warning("SPDY protocol error from the API server; closing", error=str(exc))
            self._send(spdy.GoAway(self._last_peer_id, spdy.GoAwayStatus.PROTOCOL_ERROR))
            self.close()
            return
        if frames:
            self._last_frame = time.monotonic()
        for frame in frames:
            self._handle(frame)
        self._check_write_backlog()

    def eof_received(self) -> bool | None:
        self._mark_gone()
        return None  # close the transport

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._idle_timer is not None:
            self._idle_timer.cancel()
            self._idle_timer = None
        self._writable.set()
        self._mark_gone()
        self.closed.set()
        if self.on_lost is not None:
            self.on_lost()

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()
        self.resume_reading("writes")

    def _check_write_backlog(self) -> None:
        """Stop reading a client that does not read our replies, until the transport drains."""
        t = self._transport
        if t is not None and not self._writable.is_set() and t.get_write_buffer_size() > WRITE_BACKLOG_MAX:
            self.pause_reading("writes")

    # -- control

    def start_framing(self) -> None:
        """Switch from "HTTP handshake" to SPDY frames (after the 101 has been written)."""
        self._framing = True
        self._last_frame = time.monotonic()
        self._idle_timer = asyncio.get_running_loop().call_later(self._idle_timeout, self._check_idle)
        if self._prebuffer:
            pending, self._prebuffer = bytes(self._prebuffer), bytearray()
            self.data_received(pending)

    def write_raw(self, data: bytes) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(data)

    async def drain(self) -> None:
        await self._writable.wait()

    def pause_reading(self, reason: str = "backlog") -> None:
        """Stop reading the client while any reason holds (a backlog for the pool, our unsent replies)."""
        was_reading = not self._read_pauses
        self._read_pauses.add(reason)
        if was_reading and self._transport is not None and not self._transport.is_closing():
            self._transport.pause_reading()

    def resume_reading(self, reason: str = "backlog") -> None:
        if reason not in self._read_pauses:
            return
        self._read_pauses.discard(reason)
        if not self._read_pauses and self._transport is not None and not self._transport.is_closing():
            self._transport.resume_reading()

    @property
    def reading_paused(self) -> bool:
        return bool(self._read_pauses)

    def close(self, goaway: bool = False) -> None:
        """Close after flushing; abort if the TLS close handshake has not finished in ABORT_AFTER.

        Go peers often leave refused or finished upgrade connections open without answering the
        TLS close_notify, which would keep the socket for the loop's whole shutdown timeout.
        """
        transport = self._transport
        if transport is None or transport.is_closing():
            return
        if goaway:
            self._send(spdy.GoAway(self._last_peer_id, spdy.GoAwayStatus.OK))
        transport.close()
        asyncio.get_running_loop().call_later(ABORT_AFTER, self._abort_if_open, transport)

    def _abort_if_open(self, transport: asyncio.Transport) -> None:
        if not self.closed.is_set():
            transport.abort()

    async def wait_streams(self, kinds: frozenset[str], timeout: float = STREAM_CREATION_TIMEOUT) -> None:
        async def all_there() -> None:
            while not kinds <= self.by_kind.keys():
                if self.gone.is_set():
                    raise ConnectionError("the client went away before opening its streams")
                self._stream_event.clear()
                await self._stream_event.wait()

        try:
            async with asyncio.timeout(timeout):
                await all_there()
        except TimeoutError:
            missing = ",".join(sorted(kinds - self.by_kind.keys()))
            raise StreamSetTimeout(f"timed out waiting for client to create streams ({missing})") from None

    def send_data(self, stream: SpdyStream, data: bytes, fin: bool = False) -> None:
        if stream.local_closed or stream.reset:
            return
        for i in range(0, len(data), _DATA_CHUNK):
            last = i + _DATA_CHUNK >= len(data)
            self._send(spdy.Data(stream.stream_id, data[i : i + _DATA_CHUNK], fin=fin and last))
        if not data and fin:
            self._send(spdy.Data(stream.stream_id, b"", fin=True))
        if fin:
            stream.local_closed = True

    def reset_stream(self, stream: SpdyStream, status: int = spdy.RstStatus.CANCEL) -> None:
        """RST_STREAM ``stream`` (a port-forward pair whose pool side failed)."""
        if not stream.reset:
            stream.reset = stream.local_closed = True
            self._drop_pending(stream)
            self._send(spdy.RstStream(stream.stream_id, status))

    def attach(self, stream: SpdyStream, on_data: Callable[[bytes, bool], None]) -> None:
        """Give ``stream`` its reader, first with the DATA that came before it (its FIN stays in
        ``remote_closed``, for the caller to check after this, as before)."""
        stream.on_data = on_data
        if stream.pending:
            data = bytes(stream.pending)
            self._drop_pending(stream)
            on_data(data, False)

    def settle(self) -> None:
        """Every reader is attached (exec): DATA on any other stream is dropped from now on."""
        self._settled = True
        for st in self.streams.values():
            self._drop_pending(st)

    def forget(self, stream_id: int) -> None:
        """Done with a stream (refused, or its pair ended): nothing of it is kept."""
        if (st := self.streams.pop(stream_id, None)) is not None:
            self._drop_pending(st)

    def _drop_pending(self, stream: SpdyStream) -> None:
        if stream.pending:
            self._pending_bytes -= len(stream.pending)
            stream.pending = bytearray()
            if self._pending_bytes <= INBOUND_BYTES_LOW:
                self.resume_reading("pending")

    def _keep_pending(self, stream: SpdyStream, data: bytes) -> None:
        stream.pending += data
        self._pending_bytes += len(data)
        if self._pending_bytes > INBOUND_BYTES_HIGH:
            self.pause_reading("pending")

    # -- frames

    def _send(self, frame: spdy.Frame) -> None:
        if self._transport is not None and not self._transport.is_closing():
            self._transport.write(self._encoder.encode(frame))
            self._last_frame = time.monotonic()

    def _check_idle(self) -> None:
        """The idle timer: close a connection with no frame either way for ``idle_timeout``, else wait on."""
        self._idle_timer = None
        if self._transport is None:
            return
        left = self._last_frame + self._idle_timeout - time.monotonic()
        if left > 0:
            self._idle_timer = asyncio.get_running_loop().call_later(left, self._check_idle)
            return
        log.info(
            "streaming connection idle: closed, as the kubelet's streamingConnectionIdleTimeout does",
            idle_seconds=round(self._idle_timeout),
            streams=len(self.streams),
        )
        for st in self.streams.values():
            st.reset = st.local_closed = True
            self._drop_pending(st)
        self._mark_gone()
        self.close()

    def _mark_gone(self) -> None:
        if not self.gone.is_set():
            self.gone.set()
            self._stream_event.set()
            if self.on_gone is not None:
                self.on_gone()

    def _handle(self, frame: spdy.Frame) -> None:
        if isinstance(frame, spdy.Data):
            st = self.streams.get(frame.stream_id)
            if st is None or st.reset:
                return  # spdystream drops these too (the stream may just have been reset)
            if st.on_data is not None and (frame.data or frame.fin):
                st.on_data(frame.data, frame.fin)
            elif st.on_data is None and frame.data and not self._settled:
                self._keep_pending(st, frame.data)
            if frame.fin:
                st.remote_closed = True
        elif isinstance(frame, spdy.SynStream):
            self._on_syn_stream(frame)
        elif isinstance(frame, spdy.Ping):
            if frame.ping_id & 1:  # the client's ping (odd ids): echo it; ours would be even
                self._send(frame)
        elif isinstance(frame, spdy.RstStream):
            st = self.streams.get(frame.stream_id)
            if st is not None:
                st.reset = True
                self._drop_pending(st)
                if self.on_stream_reset is not None:
                    self.on_stream_reset(st)
        elif isinstance(frame, spdy.GoAway):
            self._mark_gone()
        elif isinstance(frame, spdy.HeadersFrame):
            st = self.streams.get(frame.stream_id)
            if st is not None and not st.reset and frame.fin:  # the block is dropped (module docstring)
                st.remote_closed = True
                if st.on_data is not None:
                    st.on_data(b"", True)
        # SETTINGS, WINDOW_UPDATE, SYN_REPLY (we open no streams): nothing to do

    def _on_syn_stream(self, frame: spdy.SynStream) -> None:
        sid = frame.stream_id
        if sid % 2 == 0 or sid <= self._last_peer_id:
            self._send(spdy.RstStream(sid, spdy.RstStatus.PROTOCOL_ERROR))
            return
        self._last_peer_id = sid
        kind = (spdy.header_value(frame.headers, "streamtype") or "").lower()
        if self.on_stream is not None:
            st = SpdyStream(sid, dict(frame.headers), kind, remote_closed=frame.fin)
            self.streams[sid] = st
            self._send(spdy.SynReply(sid, {}))
            self.on_stream(st)
            return
        if kind not in self._accept or kind in self.by_kind:
            log.warning("rejecting an unexpected SPDY stream", stream_type=kind or "(none)")
            self._send(spdy.RstStream(sid, spdy.RstStatus.REFUSED_STREAM))
            return
        st = SpdyStream(sid, dict(frame.headers), kind, remote_closed=frame.fin)
        self.streams[sid] = st
        self.by_kind[kind] = st
        self._send(spdy.SynReply(sid, {}))
        self._stream_event.set()


class SpdyExecFront(ExecFront):
    """Remote-command streams of one SPDY connection, as the relay sees them."""

    def __init__(self, conn: SpdyConnection, protocol: str) -> None:
        self.protocol = protocol
        self._conn = conn
        self._inbound: asyncio.Queue[Inbound] = asyncio.Queue()
        self._inbound_bytes = 0
        self._paused = False
        self._finished = False
        self._resize = ResizeDecoder()
        conn.on_gone = lambda: self._push(Inbound("gone"))
        conn.on_stream_reset = self._on_reset
        if (stdin := conn.by_kind.get("stdin")) is not None:
            conn.attach(stdin, self._on_stdin)
            if stdin.remote_closed:
                self._push(Inbound("stdin_eof"))
        if (resize := conn.by_kind.get("resize")) is not None:
            conn.attach(resize, self._on_resize)
        conn.settle()
        if conn.gone.is_set():
            self._push(Inbound("gone"))

    def _push(self, ev: Inbound) -> None:
        self._inbound.put_nowait(ev)
        self._inbound_bytes += len(ev.data)
        full = self._inbound.qsize() >= _INBOUND_HIGH or self._inbound_bytes > INBOUND_BYTES_HIGH
        if not self._paused and full:
            self._paused = True
            self._conn.pause_reading()

    def _on_stdin(self, data: bytes, fin: bool) -> None:
        if data:
            self._push(Inbound("stdin", data))
        if fin:
            self._push(Inbound("stdin_eof"))

    def _on_resize(self, data: bytes, fin: bool) -> None:
        try:
            sizes = self._resize.feed(data)
        except ChannelError as exc:
            log.warning("ignoring a malformed resize stream", error=str(exc))
            return
        for size in sizes:
            self._push(Inbound("resize", json.dumps(size, separators=(",", ":")).encode()))

    def _on_reset(self, stream: SpdyStream) -> None:
        if stream.kind == "stdin":
            self._push(Inbound("stdin_eof"))
        elif stream.kind == "error":
            self._push(Inbound("gone"))  # nobody will read the outcome: treat as the client leaving

    async def receive(self) -> Inbound:
        ev = await self._inbound.get()
        self._inbound_bytes -= len(ev.data)
        low = self._inbound.qsize() <= _INBOUND_LOW and self._inbound_bytes <= INBOUND_BYTES_LOW
        if self._paused and low:
            self._paused = False
            self._conn.resume_reading()
        if ev.kind == "gone":
            self._inbound.put_nowait(ev)  # sticky
        return ev

    async def send(self, channel: int, data: bytes) -> None:
        kind = "stdout" if channel == STDOUT else "stderr" if channel == STDERR else ""
        stream = self._conn.by_kind.get(kind)
        if stream is None and channel == STDERR:
            stream = self._conn.by_kind.get("stdout")  # a TTY merges stderr into stdout
        if stream is None:
            return
        self._conn.send_data(stream, data)
        await self._conn.drain()

    async def finish(self, status: dict[str, Any]) -> None:
        if self._finished:
            return
        self._finished = True
        conn = self._conn
        for kind in ("stdout", "stderr", "stdin", "resize"):
            if (st := conn.by_kind.get(kind)) is not None:
                conn.send_data(st, b"", fin=True)
        if (err := conn.by_kind.get("error")) is not None:
            conn.send_data(err, error_payload(self.protocol, status) or b"", fin=True)
        # The client closes the connection once it has read everything; give it a moment to do so.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_GRACE):
                await conn.closed.wait()
        conn.close(goaway=True)

    async def abort(self) -> None:
        self._finished = True
        self._conn.close(goaway=True)
