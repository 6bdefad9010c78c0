"""A SPDY/3.1 remote-command client toward the pool API server (what client-go's SPDYExecutor does).

Why: a WebSocket exec is a GET, authorized as ``get`` on ``pods/exec``; Liqo's pool-side virtual
kubelet ClusterRole grants only ``create`` there (it execs over SPDY POST), so on a real pool the
WebSocket dial is refused with 403 and this client is the way in. The API server passes SPDY
through to the pool's kubelet unchanged on every version.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Final, TypeVar
from urllib.parse import urlencode, urlsplit

from vkbridge.kubeletapi.sniffer import keepalive
from vkbridge.kubeletapi.streams import spdy
from vkbridge.kubeletapi.streams.channels import ERROR, STDERR, STDOUT, StreamOptions
from vkbridge.kubeletapi.streams.poolstream import DialError, PoolStream
from vkbridge.kubeletapi.streams.spdyconn import WRITE_BACKLOG_MAX

__all__ = [
    "SpdyPoolStream",
    "close_upgraded",
    "connect",
    "hold_for_backlog",
    "host_header",
    "read_body",
    "read_head",
    "spdy_dial",
    "spdy_upgrade",
    "status_message",
]

_HEAD_LIMIT: Final = 64 * 1024
_BODY_LIMIT: Final = 64 * 1024
_CHUNK: Final = 32 * 1024
STREAM_REPLY_TIMEOUT: Final = 30.0
_OUTPUT_KINDS: Final = {"stdout": STDOUT, "stderr": STDERR, "error": ERROR}
# Pool output held for a slow home client before we stop reading the pool's connection: beyond it TCP
# pushes back on the pool, as a WebSocket relay's bounded send does (`cat` of a large file, slow terminal).
OUTPUT_BUFFER_MAX: Final = 1 << 20
_T = TypeVar("_T")


class SpdyPoolStream(PoolStream):
    """One upgraded connection; the streams are opened by ``open_streams``."""

    transport = "spdy"

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, protocol: str) -> None:
        self.protocol = protocol
        self._reader = reader
        self._writer = writer
        self._enc = spdy.FrameEncoder()
        self._dec = spdy.FrameDecoder()
        self._ids: dict[str, int] = {}
        self._kinds: dict[int, str] = {}
        self._replied: set[int] = set()
        self._open_outputs: set[int] = set()
        self._replies = asyncio.Event()
        self._out: asyncio.Queue[tuple[int, bytes] | None] = asyncio.Queue()
        self._queued = 0  # bytes in _out; the read loop waits while over OUTPUT_BUFFER_MAX
        self._drained = asyncio.Event()
        self._read_task: asyncio.Task[None] | None = None
        self._ended = "the connection is open"

    def _write(self, frame: spdy.Frame) -> None:
        self._writer.write(self._enc.encode(frame))

    async def open_streams(self, opts: StreamOptions) -> None:
        """SYN_STREAM for each stream the options need (client-go's order), then wait for replies."""
        self._read_task = asyncio.create_task(self._read_loop(), name="pool-spdy-read")
        kinds = ["error"]
        kinds += [k for k, on in (("stdin", opts.stdin), ("stdout", opts.stdout)) if on]
        if opts.stderr and not opts.tty:
            kinds.append("stderr")
        if opts.tty:
            kinds.append("resize")
        for i, kind in enumerate(kinds):
            sid = 2 * i + 1
            self._ids[kind] = sid
            self._kinds[sid] = kind
            if kind in _OUTPUT_KINDS:
                self._open_outputs.add(sid)
            self._write(spdy.SynStream(sid, {"streamtype": [kind]}))
        await self._writer.drain()
        try:
            async with asyncio.timeout(STREAM_REPLY_TIMEOUT):
                while not set(self._kinds) <= self._replied:
                    if self._read_task.done():
                        raise DialError(502, f"the pool closed the stream while opening it ({self._ended})")
                    self._replies.clear()
                    await self._replies.wait()
        except TimeoutError:
            raise DialError(504, "the pool did not accept the streams in time") from None

    async def _read_loop(self) -> None:
        try:
            while data := await self._reader.read(65536):
                for frame in self._dec.feed(data):
                    self._on_frame(frame)
                await hold_for_backlog(self._writer)
                while self._queued > OUTPUT_BUFFER_MAX:
                    self._drained.clear()
                    await self._drained.wait()
                if not self._open_outputs and self._replied:
                    self._ended = "all output streams ended"
                    return
            self._ended = "the pool closed the connection"
        except spdy.SpdyError as exc:
            self._ended = f"SPDY protocol error from the pool: {exc}"
        except (ConnectionError, OSError, ssl.SSLError) as exc:
            self._ended = f"connection error: {type(exc).__name__}: {exc}"
        finally:
            self._replies.set()
            self._out.put_nowait(None)

    def _on_frame(self, frame: spdy.Frame) -> None:
        if isinstance(frame, spdy.SynReply):
            self._replied.add(frame.stream_id)
            self._replies.set()
            if frame.fin:
                self._open_outputs.discard(frame.stream_id)
        elif isinstance(frame, spdy.Data):
            kind = self._kinds.get(frame.stream_id)
            if kind in _OUTPUT_KINDS and frame.data:
                self._out.put_nowait((_OUTPUT_KINDS[kind], frame.data))
                self._queued += len(frame.data)
            if frame.fin:
                self._open_outputs.discard(frame.stream_id)
        elif isinstance(frame, spdy.RstStream):
            self._open_outputs.discard(frame.stream_id)
        elif isinstance(frame, spdy.Ping):
            if frame.ping_id % 2 == 0:  # the server's ping: echo it
                self._write(frame)
        elif isinstance(frame, spdy.GoAway):
            self._open_outputs.clear()

    async def messages(self) -> AsyncIterator[tuple[int, bytes]]:
        while (item := await self._out.get()) is not None:
            self._queued -= len(item[1])
            if self._queued <= OUTPUT_BUFFER_MAX:
                self._drained.set()
            yield item

    async def _send(self, kind: str, data: bytes, fin: bool = False) -> None:
        sid = self._ids.get(kind)
        if sid is None:
            return
        for i in range(0, len(data), _CHUNK):
            last = i + _CHUNK >= len(data)
            self._write(spdy.Data(sid, data[i : i + _CHUNK], fin=fin and last))
        if fin and not data:
            self._write(spdy.Data(sid, b"", fin=True))
        await self._writer.drain()

    async def send_stdin(self, data: bytes) -> None:
        await self._send("stdin", data)

    async def close_stdin(self) -> None:
        await self._send("stdin", b"", fin=True)

    async def resize(self, size_json: bytes) -> None:
        await self._send("resize", size_json)

    def end_reason(self) -> str:
        return self._ended

    async def close(self) -> None:
        await close_upgraded(self._read_task, self._writer)


async def spdy_dial(
    server: str,
    ctx: ssl.SSLContext,
    *,
    path: str,
    params: Sequence[tuple[str, str]],
    protocols: Sequence[str],
    opts: StreamOptions,
    headers: Mapping[str, str],
    server_hostname: str | None = None,
    proxy_url: str | None = None,
    timeout: float = 30.0,
) -> SpdyPoolStream:
    """POST + ``Upgrade: SPDY/3.1`` to ``server``, then open the session's streams.

    DialError carries the pool's HTTP status and its Status message (the body is readable here,
    unlike aiohttp's WebSocket handshake errors).
    """

    async def open_streams(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, resp_headers: dict[str, str]
    ) -> SpdyPoolStream:
        stream = SpdyPoolStream(reader, writer, resp_headers.get("x-stream-protocol-version", ""))
        await stream.open_streams(opts)
        return stream

    return await spdy_upgrade(
        server,
        ctx,
        target=f"{path}?{urlencode(list(params))}",
        protocols=protocols,
        headers=headers,
        then=open_streams,
        server_hostname=server_hostname,
        proxy_url=proxy_url,
        timeout=timeout,
    )


async def spdy_upgrade(
    server: str,
    ctx: ssl.SSLContext,
    *,
    target: str,
    protocols: Sequence[str],
    headers: Mapping[str, str],
    then: Callable[[asyncio.StreamReader, asyncio.StreamWriter, dict[str, str]], Awaitable[_T]],
    server_hostname: str | None = None,
    proxy_url: str | None = None,
    timeout: float = 30.0,
) -> _T:
    """Connect, POST ``target`` with ``Upgrade: SPDY/3.1``, then ``then`` on the upgraded connection.

    Shared by exec/attach and port-forward. ``then`` runs inside the same deadline and error
    handling as the handshake, so a failure there also aborts the connection and becomes a DialError.
    TCP keepalive is on: SPDY has no ping of ours, so a tunnel that vanishes without a RST would
    otherwise hold an idle exec until its client leaves.
    """
    url = urlsplit(server)
    host = url.hostname or ""
    port = url.port or 443
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await connect(host, port, ctx, server_hostname or host, proxy_url)
    except (OSError, ssl.SSLError, TimeoutError) as exc:
        raise DialError(502, f"cannot reach the pool API server: {type(exc).__name__}: {exc}") from exc
    keepalive(writer.transport)
    try:
        async with asyncio.timeout(timeout):
            request = [
                f"POST {url.path.rstrip('/')}{target} HTTP/1.1",
                f"Host: {host_header(server)}",
                *(f"{k}: {v}" for k, v in headers.items()),
                "Connection: Upgrade",
                "Upgrade: SPDY/3.1",
                *(f"X-Stream-Protocol-Version: {p}" for p in protocols),
                "Content-Length: 0",
            ]
            writer.write(("\r\n".join(request) + "\r\n\r\n").encode("latin-1"))
            await writer.drain()
            status, resp_headers = await read_head(reader)
            if status != 101 or "spdy/3.1" not in resp_headers.get("upgrade", "").lower():
                body = await read_body(reader, resp_headers)
                raise DialError(status if status >= 400 else 502, status_message(status, body))
            return await then(reader, writer, resp_headers)
    except BaseException as exc:
        writer.transport.abort()
        if isinstance(exc, (OSError, ssl.SSLError, asyncio.IncompleteReadError, TimeoutError)):
            raise DialError(502, f"the pool stream failed: {type(exc).__name__}: {exc}") from exc
        raise


async def hold_for_backlog(writer: asyncio.StreamWriter) -> None:
    """Between two reads of the pool: wait, not reading it, while our unsent bytes pass the bound.

    The echoes of its PINGs are written at once (answered promptly), without waiting: a pool
    (semi-trusted, behind the tunnel) that sends PINGs and never reads would grow our buffer without
    end. The bound is the SPDY front's for its client (``spdyconn.WRITE_BACKLOG_MAX``).
    """
    if writer.transport.get_write_buffer_size() > WRITE_BACKLOG_MAX:
        await writer.drain()  # paused above the transport's high-water mark: back under its low one


async def close_upgraded(read_task: asyncio.Task[None] | None, writer: asyncio.StreamWriter) -> None:
    """Stop the reader, then close the connection: a peer that does not answer within 1 s is cut off."""
    if read_task is not None:
        read_task.cancel()
        await asyncio.gather(read_task, return_exceptions=True)
    writer.close()
    closed = False
    with contextlib.suppress(Exception):
        async with asyncio.timeout(1.0):
            await writer.wait_closed()
        closed = True
    if not closed:  # closed is not released: the socket stays until a peer that does not read reads
        writer.transport.abort()


def host_header(server: str) -> str:
    """``host[:port]`` of ``server``: never its userinfo (``netloc`` would carry ``user:secret@``)."""
    url = urlsplit(server)
    host = url.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    return f"{host}:{url.port}" if url.port else host


async def connect(
    host: str, port: int, ctx: ssl.SSLContext, server_hostname: str, proxy_url: str | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    if not proxy_url:
        return await asyncio.open_connection(host, port, ssl=ctx, server_hostname=server_hostname)
    proxy = urlsplit(proxy_url)
    if proxy.scheme != "http":
        raise OSError(f"SPDY streams through a {proxy.scheme} proxy are not supported")
    reader, writer = await asyncio.open_connection(proxy.hostname, proxy.port or 80)
    writer.write(f"CONNECT {host}:{port} HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode("latin-1"))
    await writer.drain()
    status, _ = await read_head(reader)
    if status != 200:
        writer.close()
        raise OSError(f"proxy refused CONNECT with HTTP {status}")
    await writer.start_tls(ctx, server_hostname=server_hostname)
    return reader, writer


async def read_head(reader: asyncio.StreamReader) -> tuple[int, dict[str, str]]:
    try:
        raw = await reader.readuntil(b"\r\n\r\n")
    except asyncio.LimitOverrunError:
        raise OSError("response head too large") from None
    if len(raw) > _HEAD_LIMIT:
        raise OSError("response head too large")
    lines = raw.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[1].isdigit():
        raise OSError(f"malformed response line {lines[0][:80]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if sep:
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
    return int(parts[1]), headers


async def read_body(reader: asyncio.StreamReader, headers: Mapping[str, str]) -> bytes:
    with contextlib.suppress(asyncio.IncompleteReadError, OSError, TimeoutError, ValueError):
        async with asyncio.timeout(5.0):
            if "content-length" in headers:
                return await reader.readexactly(min(int(headers["content-length"]), _BODY_LIMIT))
            return await reader.read(_BODY_LIMIT)
    return b""


def status_message(status: int, body: bytes) -> str:
    try:
        obj = json.loads(body)
        if isinstance(obj, dict) and obj.get("message"):
            return str(obj["message"])
    except ValueError:
        pass
    text = body.decode("utf-8", "replace").strip()[:500]
    return text or f"the pool API server refused the stream (HTTP {status})"
