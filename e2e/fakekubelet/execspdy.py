"""Exec over SPDY/3.1, as a real kubelet serves it next to WebSocket on the same port.

aiohttp will not switch to SPDY, so ``Sniffer`` reads each connection's first request head: a SPDY
upgrade goes to ``on_spdy``, anything else to aiohttp's own protocol with the bytes read so far.
``SpdyChannels`` is the connection after ``101 Switching Protocols``: client-go opens one stream per
type (error, stdin, stdout, stderr, resize) and we map them onto the channel numbers of execws.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import cast

from . import spdy
from .execws import CLOSE, ERROR, RESIZE, STDERR, STDIN, STDOUT, V4, V5

log = logging.getLogger(__name__)

V3, V2, V1 = "v3.channel.k8s.io", "v2.channel.k8s.io", "channel.k8s.io"
SPDY_PROTOCOLS = (V5, V4, V3, V2, V1)
STREAM_CHANNELS = {"stdin": STDIN, "stdout": STDOUT, "stderr": STDERR, "error": ERROR, "resize": RESIZE}
MAX_HEAD = 64 * 1024
STREAMS_TIMEOUT = 30.0
CHUNK = 32 * 1024


@dataclass(frozen=True)
class RequestHead:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, list[str]]  # lowercased names

    def header(self, name: str) -> str:
        return ", ".join(self.headers.get(name, []))

    @property
    def protocols(self) -> list[str]:
        return [p.strip() for v in self.headers.get("x-stream-protocol-version", []) for p in v.split(",")]


def parse_head(raw: bytes) -> RequestHead:
    lines = raw.decode("latin-1").split("\r\n")
    method, target, _ = lines[0].split(" ", 2)
    url = urllib.parse.urlsplit(target)
    headers: dict[str, list[str]] = {}
    for line in lines[1:]:
        if ":" in line:
            name, value = line.split(":", 1)
            headers.setdefault(name.strip().lower(), []).append(value.strip())
    return RequestHead(method, urllib.parse.unquote(url.path), urllib.parse.parse_qs(url.query), headers)


def wanted_streams(query: dict[str, list[str]], protocol: str) -> set[str]:
    """The streams client-go opens for these exec options (remotecommand v1-v5 createStreams)."""

    def flag(*names: str) -> bool:
        return any(v.lower() in ("1", "true") for n in names for v in query.get(n, []))

    tty = flag("tty")
    kinds = {"error"}
    kinds |= {"stdin"} if flag("input", "stdin") else set()
    kinds |= {"stdout"} if flag("output", "stdout") else set()
    kinds |= {"stderr"} if flag("error", "stderr") and not tty else set()
    kinds |= {"resize"} if tty and protocol in (V5, V4, V3) else set()
    return kinds


OnSpdy = Callable[["SpdyChannels", RequestHead], None]


class Sniffer(asyncio.Protocol):
    """First protocol of every connection: routes on the request head (see the module docstring)."""

    def __init__(self, http_factory: Callable[[], asyncio.Protocol], on_spdy: OnSpdy) -> None:
        self._http_factory, self._on_spdy = http_factory, on_spdy
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._spdy: SpdyChannels | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        if self._spdy is not None:  # still ours until the SPDY side switches
            self._spdy.early += data
            return
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0 and len(self._buf) < MAX_HEAD:
            return
        head = parse_head(bytes(self._buf[:end])) if end >= 0 else None
        if head is not None and "spdy/3.1" in head.header("upgrade").lower():
            self._spdy = SpdyChannels(self._transport, bytes(self._buf[end + 4 :]))
            self._on_spdy(self._spdy, head)
            return
        http = self._http_factory()
        self._transport.set_protocol(http)
        http.connection_made(self._transport)
        http.data_received(bytes(self._buf))

    def connection_lost(self, exc: Exception | None) -> None:
        self._transport = None
        if self._spdy is not None:
            self._spdy.connection_lost(exc)


class SpdyChannels(asyncio.Protocol):
    """One SPDY/3.1 connection in the server role, as execws Channels (see the module docstring)."""

    def __init__(self, transport: asyncio.Transport, early: bytes) -> None:
        self._transport = transport
        self.early = bytearray(early)
        self._decoder = spdy.Decoder()
        self._encoder = spdy.Encoder()
        self._streams: dict[str, int] = {}  # stream type -> id
        self._kinds: dict[int, str] = {}
        self._events: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._opened = asyncio.Event()
        self._wanted: set[str] = set()
        self._resize = bytearray()
        self._closed = False

    # -- the HTTP part, before the switch

    def refuse(self, status: int, reason: str, text: str) -> None:
        body = text.encode()
        self._transport.write(
            f"HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n".encode()
            + body
        )
        self._transport.close()

    async def switch(self, protocol: str, wanted: set[str]) -> bool:
        """Answer 101, take the connection over and wait for the client's streams; False if it did not."""
        self._transport.write(
            b"HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
            + f"X-Stream-Protocol-Version: {protocol}\r\n\r\n".encode()
        )
        self._wanted = wanted
        self._transport.set_protocol(self)
        if self.early:
            self.data_received(bytes(self.early))
        self._check_opened()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._opened.wait(), STREAMS_TIMEOUT)
        if not self._opened.is_set():
            log.warning("SPDY exec: the client opened %s, not %s", sorted(self._streams), sorted(wanted))
            await self.close()
        return self._opened.is_set()

    # -- asyncio.Protocol

    def data_received(self, data: bytes) -> None:
        try:
            frames = self._decoder.feed(data)
        except spdy.SpdyError as exc:
            log.warning("SPDY exec: bad framing from the client: %s", exc)
            self._transport.abort()
            return
        for frame in frames:
            self._frame(frame)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self._events.put_nowait(None)

    def _frame(self, f: spdy.Frame) -> None:
        if f.kind == spdy.SYN_STREAM:
            kind = (f.headers or {}).get("streamtype", "")
            self._streams[kind], self._kinds[f.stream_id] = f.stream_id, kind
            self._write(self._encoder.syn_reply(f.stream_id))
            if f.fin and kind == "stdin":
                self._events.put_nowait((CLOSE, bytes([STDIN])))
            self._check_opened()
        elif f.kind == 0:
            self._data(self._kinds.get(f.stream_id), f.data, f.fin)
        elif f.kind == spdy.PING:
            self._write(self._encoder.ping(f.value))
        elif f.kind == spdy.RST_STREAM and self._kinds.get(f.stream_id) == "stdin":
            self._events.put_nowait((CLOSE, bytes([STDIN])))
        elif f.kind == spdy.GOAWAY:
            self._events.put_nowait(None)

    def _data(self, kind: str | None, data: bytes, fin: bool) -> None:
        if kind == "stdin":
            if data:
                self._events.put_nowait((STDIN, data))
            if fin:
                self._events.put_nowait((CLOSE, bytes([STDIN])))
        elif kind == "resize":  # a stream of JSON objects, one a line (Go's json.Encoder)
            self._resize += data
            while (nl := self._resize.find(b"\n")) >= 0:
                self._events.put_nowait((RESIZE, bytes(self._resize[:nl])))
                del self._resize[: nl + 1]

    def _check_opened(self) -> None:
        if self._wanted and self._wanted <= self._streams.keys():
            self._opened.set()

    def _write(self, data: bytes) -> None:
        if not self._closed and not self._transport.is_closing():
            self._transport.write(data)

    # -- execws.Channels

    async def send(self, channel: int, data: bytes) -> None:
        kind = next((k for k, c in STREAM_CHANNELS.items() if c == channel), None)
        sid = self._streams.get(kind or "")
        for i in range(0, len(data), CHUNK):
            if sid is not None:
                self._write(self._encoder.data(sid, data[i : i + CHUNK]))
        await asyncio.sleep(0)

    async def incoming(self) -> AsyncIterator[tuple[int, bytes]]:
        while (event := await self._events.get()) is not None:
            yield event

    async def close(self) -> None:
        """FIN on every stream we write, GOAWAY, then close (the client reads the Status first)."""
        for kind in ("stdout", "stderr", "error"):
            if kind in self._streams:
                self._write(self._encoder.data(self._streams[kind], b"", fin=True))
        self._write(self._encoder.goaway(max(self._kinds, default=0)))
        self._closed = True
        self._transport.close()
