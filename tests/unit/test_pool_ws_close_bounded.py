"""Closing our WebSocket to the pool is bounded: a pool that stops reading does not keep the session.

Ours and the closes aiohttp runs inside ``receive()`` (the pool's EOF, a protocol error) alike.
aiohttp's client ``close()`` queues CLOSE (waiting with no timeout when the transport is paused), then
reads until the pool's CLOSE, 10 s per message: a pool that never answers takes 10 s, one that keeps
writing never lets it end. Real loopback sockets and a real aiohttp client; the pool is a raw socket
that answers the handshake and then reads nothing. No Kubernetes API is involved.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import socket
import time
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from tests.unit.streamfakes import read_to_end
from vkbridge.kubeletapi.streams import poolstream
from vkbridge.kubeletapi.streams.channels import CLOSE, STDIN, STDOUT, V4, V5
from vkbridge.kubeletapi.streams.poolstream import PoolWebSocket, WsPoolStream

BOUND = 0.5  # POOL_CLOSE_TIMEOUT for these tests
BACKLOG = 1 << 20  # the stdin we write the pool that does not read: far past every buffer on the way
NEAR_LIMIT = 262066  # stdin whose eight frames count 262,138 bytes: the 8-byte CLOSE crosses 256 KiB
_WS_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


@pytest.fixture(autouse=True)
def short_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(poolstream, "POOL_CLOSE_TIMEOUT", BOUND, raising=False)


async def _head(sock: socket.socket) -> bytes:
    loop, head = asyncio.get_running_loop(), b""
    while not head.endswith(b"\r\n\r\n"):
        head += await loop.sock_recv(sock, 1)  # byte by byte: not one byte of the frames
    return head


@contextlib.asynccontextmanager
async def silent_pool() -> AsyncIterator[tuple[int, asyncio.Future[socket.socket]]]:
    """A pool that answers one WebSocket handshake (v5) with a small receive buffer, then reads nothing."""
    loop = asyncio.get_running_loop()
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)  # inherited by the accepted socket
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.setblocking(False)
    accepted: asyncio.Future[socket.socket] = loop.create_future()

    async def serve() -> None:
        sock, _ = await loop.sock_accept(listener)
        head = await _head(sock)
        key = next(
            ln.split(b":", 1)[1].strip()
            for ln in head.split(b"\r\n")
            if ln.lower().startswith(b"sec-websocket-key:")
        )
        accept = base64.b64encode(hashlib.sha1(key + _WS_GUID).digest()).decode()
        await loop.sock_sendall(sock, (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Protocol: {V5}\r\n\r\n"
        ).encode())  # fmt: skip
        accepted.set_result(sock)

    server = asyncio.create_task(serve())
    try:
        yield listener.getsockname()[1], accepted
    finally:
        server.cancel()
        await asyncio.gather(server, return_exceptions=True)
        listener.close()
        if accepted.done():
            accepted.result().close()


def client_transport(ws: aiohttp.ClientWebSocketResponse) -> asyncio.Transport:
    conn = ws._response.connection
    assert conn is not None and conn.transport is not None
    return conn.transport


async def backlog_stdin(pool: WsPoolStream, transport: asyncio.Transport) -> None:
    """BACKLOG of stdin the pool does not read, then asyncio's usual limits: the transport is paused."""
    transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    transport.set_write_buffer_limits(high=4 * BACKLOG)  # no pause of our sends while it builds
    await pool.send_stdin(bytes(BACKLOG))
    transport.set_write_buffer_limits()
    assert transport.get_write_buffer_size() > BACKLOG // 2


async def chatter(sock: socket.socket) -> None:
    """The pool keeps writing output (never a CLOSE): each message restarts aiohttp's 10 s wait."""
    loop = asyncio.get_running_loop()
    with contextlib.suppress(OSError):
        while True:
            await loop.sock_sendall(sock, bytes([0x82, 2, STDOUT]) + b"x")
            await asyncio.sleep(0.02)


@pytest.mark.parametrize("pool_side", ["silent", "chatty", "interrupted"])
async def test_close_to_a_pool_not_reading_aborts_within_the_bound(pool_side: str) -> None:
    """``interrupted``: the close is cancelled by its caller before the bound; the socket goes too."""
    async with (
        silent_pool() as (port, accepted),
        aiohttp.ClientSession(ws_response_class=PoolWebSocket) as session,
        session.ws_connect(f"http://127.0.0.1:{port}/exec", protocols=(V5, V4)) as ws,
    ):
        pool_sock = await accepted
        pool = WsPoolStream(ws)
        await backlog_stdin(pool, client_transport(ws))
        talking = asyncio.create_task(chatter(pool_sock)) if pool_side == "chatty" else None
        started = time.monotonic()
        closing = asyncio.create_task(pool.close())
        try:
            if pool_side == "interrupted":
                await asyncio.sleep(BOUND / 2)
                closing.cancel()
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                async with asyncio.timeout(BOUND + 4):
                    await asyncio.shield(closing)
            took = time.monotonic() - started
            assert closing.done(), f"close() still waiting after {took:.2f} s"
            assert closing.cancelled() == (pool_side == "interrupted")
            async with asyncio.timeout(4):
                received = await read_to_end(pool_sock)
        finally:
            for task in (closing, talking):
                if task is not None:
                    task.cancel()
                    await asyncio.gather(task, return_exceptions=True)
    least = BOUND / 2 if pool_side == "interrupted" else BOUND
    assert least * 0.8 <= took < BOUND + 3, f"closing took {took:.2f} s"
    assert received < BACKLOG, "all the stdin was delivered: the connection was not aborted"


async def test_close_to_a_pool_that_answers_is_a_clean_close() -> None:
    """A pool that reads and answers our CLOSE: the stdin arrives whole and the close code is 1000."""
    got: list[bytes] = []
    pool_saw: list[int | None] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(protocols=(V5,))
        await ws.prepare(request)
        async for msg in ws:  # aiohttp answers our CLOSE and ends the loop
            got.append(msg.data)
        pool_saw.append(ws.close_code)
        return ws

    app = web.Application()
    app.router.add_get("/exec", handler)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        async with aiohttp.ClientSession(ws_response_class=PoolWebSocket) as session:
            ws = await session.ws_connect(f"http://127.0.0.1:{runner.addresses[0][1]}/exec", protocols=(V5,))
            pool = WsPoolStream(ws)
            await pool.send_stdin(b"in")
            await pool.close_stdin()
            async with asyncio.timeout(BOUND * 0.8):
                await pool.close()
            for _ in range(300):
                if pool_saw:
                    break
                await asyncio.sleep(0.01)
    finally:
        await runner.cleanup()
    assert got == [bytes([STDIN]) + b"in", bytes([CLOSE, STDIN])]
    assert pool_saw == [aiohttp.WSCloseCode.OK]
    assert pool.end_reason() == "WebSocket close code 1000"


@pytest.mark.parametrize("pool_end", ["close", "protocol_error"])
async def test_a_pool_that_closes_while_not_reading_ends_the_relay_within_the_bound(pool_end: str) -> None:
    """The pool sends its last output and CLOSE (or a frame aiohttp refuses) but reads none of our
    stdin: the messages end and every close is bounded. aiohttp answered inside receive() (its
    autoclose; its close on a protocol error), waiting with no timeout on the paused
    transport: the relay never saw the end. The wait happens when the CLOSE frame (8 bytes) takes
    aiohttp's count of bytes written since its last drain past 256 KiB, so the test puts the count
    there first (asserted: it reads aiohttp's private writer)."""
    async with (
        silent_pool() as (port, accepted),
        aiohttp.ClientSession(ws_response_class=PoolWebSocket) as session,
        session.ws_connect(
            f"http://127.0.0.1:{port}/exec", protocols=(V5, V4), autoclose=poolstream.WS_AUTOCLOSE
        ) as ws,
    ):
        pool_sock = await accepted
        pool = WsPoolStream(ws)
        await backlog_stdin(pool, client_transport(ws))  # an even count of frames: aiohttp's count is 0
        await pool.send_stdin(bytes(NEAR_LIMIT))  # paused, but aiohttp's writer drains only past 256 KiB
        limit = ws._writer._limit
        assert limit - 8 < ws._writer._output_size <= limit, "aiohttp's frame accounting changed"
        loop = asyncio.get_running_loop()
        close_ok = bytes([0x88, 2]) + aiohttp.WSCloseCode.OK.to_bytes(2, "big")
        end = close_ok if pool_end == "close" else bytes([0x83, 0])  # opcode 3 is reserved
        await loop.sock_sendall(pool_sock, bytes([0x82, 2, STDOUT]) + b"x" + end)

        async def collect() -> list[tuple[int, bytes]]:
            return [m async for m in pool.messages()]

        reading = asyncio.create_task(collect())
        try:
            async with asyncio.timeout(BOUND + 2):
                got = await asyncio.shield(reading)
        except TimeoutError:
            pytest.fail(f"the pool's {pool_end} did not end the messages: stuck answering it")
        finally:
            reading.cancel()
            await asyncio.gather(reading, return_exceptions=True)
        started = time.monotonic()
        async with asyncio.timeout(BOUND + 3):
            await pool.close()
        took = time.monotonic() - started
        async with asyncio.timeout(4):
            received = await read_to_end(pool_sock)
    assert got == [(STDOUT, b"x")]
    assert took < BOUND + 1, f"closing took {took:.2f} s"
    assert received < BACKLOG, "all the stdin was delivered: the connection was not aborted"
    expected = 1000 if pool_end == "close" else 1006  # aiohttp's answer (1002) was aborted
    assert pool.end_reason() == f"WebSocket close code {expected}"
