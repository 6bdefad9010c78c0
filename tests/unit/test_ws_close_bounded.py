"""Closing a WebSocket front is bounded: a client that stopped reading does not keep the session.

aiohttp's ``close()`` waits for our unsent bytes to drain with no timeout, ours and the one it runs
inside ``receive()`` on the client's CLOSE (autoclose) or a protocol error. Real loopback sockets and
a real aiohttp server: the client is a raw socket that does the WebSocket handshake and then reads
nothing; the write buffer limits of the server's transport (asyncio's public API) decide when the
backlog pauses it. No Kubernetes API is involved.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest
from aiohttp import web

from tests.unit.streamfakes import CollectingWriter, read_to_end
from vkbridge.kubeletapi.streams import pfserve, spdy, wsfront
from vkbridge.kubeletapi.streams.channels import ERROR, STDOUT, V4, StreamOptions, internal_error
from vkbridge.kubeletapi.streams.portforward import PoolPortForward
from vkbridge.kubeletapi.streams.route import StreamRoute
from vkbridge.kubeletapi.streams.wsfront import FrontWebSocket, WsExecFront

BOUND = 0.5  # WS_CLOSE_TIMEOUT for these tests
BACKLOG = 1 << 20  # what we write the client that does not read: far past every buffer on the way
EXEC_OPTS = StreamOptions(stdin=False, stdout=True, stderr=True, tty=False)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture(autouse=True)
def short_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wsfront, "WS_CLOSE_TIMEOUT", BOUND, raising=False)


@contextlib.asynccontextmanager
async def serving(handler: Handler, path: str) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


def hold_all_unsent(request: web.Request) -> asyncio.Transport:
    """Small kernel buffers, and no pause of our writers while the backlog builds (limits raised)."""
    transport = request.transport
    assert transport is not None
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transport.set_write_buffer_limits(high=4 * BACKLOG)
    return transport


def pause_on_backlog(request: web.Request, transport: asyncio.Transport) -> None:
    """Back to asyncio's usual limits: the backlog pauses the transport, as a client not reading does."""
    transport.set_write_buffer_limits()
    assert transport.get_write_buffer_size() > BACKLOG // 2
    assert request.protocol.writing_paused


async def silent_client(port: int, path: str) -> socket.socket:
    """A WebSocket (v4) over a socket with a small receive buffer; nothing after the 101 is read."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", port))
    key = base64.b64encode(os.urandom(16)).decode()
    upgrade = (
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {V4}\r\n\r\n"
    )
    await loop.sock_sendall(sock, upgrade.encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        head += await loop.sock_recv(sock, 1)  # byte by byte: not one byte of the frames
    assert head.startswith(b"HTTP/1.1 101"), head
    return sock


@contextlib.asynccontextmanager
async def silent_session(handler: Handler, path: str, query: str = "") -> AsyncIterator[socket.socket]:
    """``handler`` served at ``path``, and a silent client connected to it (closed at the end)."""
    async with serving(handler, path) as port:
        sock = await silent_client(port, path + query)
        try:
            yield sock
        finally:
            sock.close()


def masked_frame(opcode: int, payload: bytes) -> bytes:
    """One client frame (FIN set; clients mask), payload under 126 bytes."""
    mask = os.urandom(4)
    return (
        bytes([0x80 | opcode, 0x80 | len(payload)])
        + mask
        + bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    )


async def settle(done: Callable[[], bool]) -> None:
    for _ in range(500):  # 5 s
        if done():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the server did not get there in 5 s")


async def released_within(
    ended: asyncio.Event, sock: socket.socket, started: list[float], least: float = BOUND
) -> None:
    """The handler ends within the bound (plus load slack) and the socket is let go, not left to drain."""
    async with asyncio.timeout(BOUND + 4):
        await ended.wait()
    took = time.monotonic() - started[0]
    async with asyncio.timeout(4):
        received = await read_to_end(sock)
    assert least * 0.8 <= took < BOUND + 3, f"closing took {took:.2f} s"
    assert received < BACKLOG, "everything was delivered: the connection was not aborted"


@pytest.mark.parametrize("end", ["finish", "abort", "interrupted"])
async def test_exec_front_end_with_a_client_not_reading_aborts_within_the_bound(end: str) -> None:
    """``interrupted``: the relay's shutdown path, a finish cut short by its caller, then abort."""
    ended, started = asyncio.Event(), [0.0]

    async def handler(request: web.Request) -> web.StreamResponse:
        transport = hold_all_unsent(request)
        ws = web.WebSocketResponse(protocols=(V4,))
        await ws.prepare(request)
        front = WsExecFront(ws, V4, EXEC_OPTS, transport)
        try:
            await front.start()
            for _ in range(BACKLOG // 32768):
                await front.send(STDOUT, bytes(32768))
            pause_on_backlog(request, transport)
            started[0] = time.monotonic()
            if end == "abort":
                await front.abort()
            else:
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(BOUND / 2 if end == "interrupted" else None):
                        await front.finish(internal_error("the command ended"))
                if end == "interrupted":
                    await front.abort()
        finally:
            ended.set()
        return ws

    async with silent_session(handler, "/exec") as sock:
        await released_within(ended, sock, started, BOUND / 2 if end == "interrupted" else BOUND)


async def test_exec_front_finish_to_a_reading_client_sends_the_status_and_closes_cleanly() -> None:
    ended = asyncio.Event()
    status = internal_error("the command ended")

    async def handler(request: web.Request) -> web.StreamResponse:
        assert request.transport is not None
        ws = web.WebSocketResponse(protocols=(V4,))
        await ws.prepare(request)
        front = WsExecFront(ws, V4, EXEC_OPTS, request.transport)
        try:
            await front.start()
            await front.send(STDOUT, b"out")
            await front.finish(status)
        finally:
            ended.set()
        return ws

    async with (
        serving(handler, "/exec") as port,
        aiohttp.ClientSession() as session,
        session.ws_connect(f"http://127.0.0.1:{port}/exec", protocols=(V4,)) as ws,
    ):
        got = [await ws.receive_bytes() for _ in range(3)]
        closing = await ws.receive()
        async with asyncio.timeout(5):
            await ended.wait()
    assert got[0] == bytes([STDOUT]) and got[1] == bytes([STDOUT]) + b"out"
    assert got[2][:1] == bytes([ERROR]) and b"the command ended" in got[2]
    assert closing.type == aiohttp.WSMsgType.CLOSE and ws.close_code == aiohttp.WSCloseCode.OK


async def test_port_forward_end_with_a_client_not_reading_aborts_within_the_bound() -> None:
    reader, writer, pool_enc = asyncio.StreamReader(), CollectingWriter(), spdy.FrameEncoder()
    ended, started = asyncio.Event(), [0.0]
    transports: list[asyncio.Transport] = []
    requests: list[web.Request] = []

    async def dial(_route: StreamRoute) -> PoolPortForward:
        pool = PoolPortForward(reader, writer)  # type: ignore[arg-type]
        pool._read_task = asyncio.create_task(pool._read_loop())
        return pool

    async def handler(request: web.Request) -> web.StreamResponse:
        transports.append(hold_all_unsent(request))
        requests.append(request)
        try:
            return await pfserve.websocket(request, StreamRoute("portforward", "ns", "pod"), dial)
        finally:
            ended.set()

    path = "/portForward/ns/pod"
    async with silent_session(handler, path, "?port=8080") as sock:
        await settle(lambda: len(spdy.FrameDecoder().feed(bytes(writer.written))) == 2)  # pair opened
        for _ in range(BACKLOG // 32768):  # the pod's output: error stream 1, data stream 3
            reader.feed_data(pool_enc.encode(spdy.Data(3, bytes(32768))))
        await settle(lambda: not reader._buffer)  # all of it relayed to the client's socket
        pause_on_backlog(requests[0], transports[0])
        started[0] = time.monotonic()
        reader.feed_data(pool_enc.encode(spdy.Data(3, b"", fin=True)))  # the pod side ends
        reader.feed_data(pool_enc.encode(spdy.Data(1, b"", fin=True)))
        await released_within(ended, sock, started)


@pytest.mark.parametrize("client_end", ["close", "protocol_error"])
async def test_exec_front_hears_a_client_that_ends_while_not_reading_within_the_bound(
    client_end: str,
) -> None:
    """The client sends CLOSE (or a frame aiohttp refuses) and reads nothing more: the relay hears it,
    and the session ends and lets the socket go within the bound. With aiohttp's defaults the answer
    ran inside ``receive()`` and waited with no timeout on the paused transport: the relay never heard
    it, and the pool session stayed open. For CLOSE, aiohttp's answer waits only when its 4 bytes take
    the writer's count of bytes since its last drain past its limit, so the test puts the count there
    (asserted: it reads aiohttp's private writer)."""
    ready, ended, heard, started = asyncio.Event(), asyncio.Event(), [], [0.0]

    async def handler(request: web.Request) -> web.StreamResponse:
        transport = hold_all_unsent(request)
        ws = FrontWebSocket(protocols=(V4,))
        await ws.prepare(request)
        front = WsExecFront(ws, V4, EXEC_OPTS, transport)
        try:
            await front.start()
            for _ in range(BACKLOG // 32768):
                await front.send(STDOUT, bytes(32768))
            writer = ws._writer
            assert writer is not None
            room = writer._limit - writer._output_size - 10  # the header of a frame over 64 KiB
            assert room > 65536, "aiohttp's frame accounting changed"
            await front.send(STDOUT, bytes(room - 1))  # the channel byte
            assert writer._output_size == writer._limit, "aiohttp's frame accounting changed"
            pause_on_backlog(request, transport)
            ready.set()
            heard.append((await front.receive()).kind)
            await front.finish(internal_error("the command ended"))
        finally:
            ended.set()
        return ws

    async with silent_session(handler, "/exec") as sock:
        async with asyncio.timeout(5):
            await ready.wait()
        loop = asyncio.get_running_loop()
        if client_end == "close":
            end = masked_frame(0x8, aiohttp.WSCloseCode.OK.to_bytes(2, "big"))
        else:
            end = masked_frame(0x3, b"")  # a reserved opcode: aiohttp closes with 1002
        started[0] = time.monotonic()
        await loop.sock_sendall(sock, end)
        try:
            await released_within(ended, sock, started, least=0)
        except TimeoutError:
            pytest.fail(f"the client's end did not reach the relay: heard {heard}")
    assert heard == ["gone"]
