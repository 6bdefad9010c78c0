"""Closing a WebSocket over TLS returns normally, on the pool side and the kubelet side.

asyncio's TLS transport (Python 3.11, the image's) drops its protocol when it is closed a second time,
and aiohttp closes it again at every normal end (the peer closed the connection first, the connection's
release): each call on it then raises ``AttributeError``. The bounded close polls the transport for our
unsent bytes after aiohttp's close, so every normal close of a pool WebSocket raised, and in a
``finally`` the error replaced the ``CancelledError`` of a cancelled session. Real TLS on loopback
(verified, as in production) and real aiohttp on both ends; no Kubernetes API is involved.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from tests.support.certs import loopback_tls
from vkbridge.kubeletapi.streams import poolstream, wsfront
from vkbridge.kubeletapi.streams.channels import STDIN, V4, V5
from vkbridge.kubeletapi.streams.poolstream import PoolWebSocket, WsPoolStream
from vkbridge.kubeletapi.streams.wsfront import FrontWebSocket

BOUND = 3.0  # both close bounds for these tests: a close that waits them out did not see the end
BACKLOG = 1 << 20  # what the front writes a client that does not read
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture(autouse=True)
def bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(poolstream, "POOL_CLOSE_TIMEOUT", BOUND, raising=False)
    monkeypatch.setattr(wsfront, "WS_CLOSE_TIMEOUT", BOUND, raising=False)


@pytest.fixture
def tls(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for 127.0.0.1 and a client context that verifies it."""
    return loopback_tls(tmp_path, "ws-close-tls-test")


@contextlib.asynccontextmanager
async def serving_tls(handler: Handler, server_ctx: ssl.SSLContext) -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get("/exec", handler)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=server_ctx)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def answering_pool(request: web.Request) -> web.StreamResponse:
    """A pool API server that reads the session and answers our CLOSE (aiohttp's autoclose)."""
    ws = web.WebSocketResponse(protocols=(V5,))
    await ws.prepare(request)
    async for _ in ws:
        pass
    return ws


@pytest.mark.parametrize("end", ["normal", "cancelled"])
async def test_closing_the_pool_websocket_over_tls_returns_normally(
    end: str, tls: tuple[ssl.SSLContext, ssl.SSLContext]
) -> None:
    """``normal``: the relay's close at the end of a session. ``cancelled``: the session's task is
    cancelled (set-up abandoned, shutdown) and its ``finally`` closes: the task ends cancelled."""
    server_ctx, client_ctx = tls
    opened = asyncio.Event()
    async with (
        serving_tls(answering_pool, server_ctx) as port,
        aiohttp.ClientSession(ws_response_class=PoolWebSocket) as session,
    ):

        async def exec_session() -> None:
            ws = await session.ws_connect(
                f"wss://127.0.0.1:{port}/exec", protocols=(V5, V4), ssl=client_ctx,
                autoclose=poolstream.WS_AUTOCLOSE,
            )  # fmt: skip
            assert isinstance(ws, PoolWebSocket)
            pool = WsPoolStream(ws)
            try:
                await pool.send_stdin(b"in")
                await pool.close_stdin()
                opened.set()
                if end == "cancelled":
                    await asyncio.Event().wait()
            finally:
                await pool.close()

        task = asyncio.create_task(exec_session())
        async with asyncio.timeout(BOUND + 5):
            await opened.wait()
            if end == "cancelled":
                task.cancel()
            started = time.monotonic()
            await asyncio.gather(task, return_exceptions=True)
        took = time.monotonic() - started
    if end == "cancelled":
        assert task.cancelled(), f"the close replaced the cancellation: {task.exception()!r}"
    else:
        assert task.exception() is None, f"the close raised {task.exception()!r}"
    assert took < BOUND * 0.8, f"the close waited out its bound ({took:.2f} s): it did not see the end"


async def silent_tls_client(port: int, client_ctx: ssl.SSLContext) -> asyncio.StreamWriter:
    """A WebSocket (v4) over TLS with a small receive buffer, which reads nothing after the 101."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    reader, writer = await asyncio.open_connection(sock=sock, ssl=client_ctx, server_hostname="127.0.0.1")
    key = base64.b64encode(os.urandom(16)).decode()
    writer.write((
        f"GET /exec HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {V4}\r\n\r\n"
    ).encode())  # fmt: skip
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 101"), head
    writer.transport.pause_reading()  # nothing more: the server's frames stay in the kernel's buffers
    return writer


async def test_closing_the_front_websocket_over_tls_when_the_client_goes_returns_normally(
    tls: tuple[ssl.SSLContext, ssl.SSLContext],
) -> None:
    """The front closes with output the client never read, and the client's connection goes (kubectl
    interrupted): aiohttp ends the connection, and our close returns, at once and without an error."""
    server_ctx, client_ctx = tls
    closing, ended = asyncio.Event(), asyncio.Event()
    outcome: list[str] = []
    took = [0.0]

    async def handler(request: web.Request) -> web.StreamResponse:
        transport = request.transport
        assert transport is not None
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        transport.set_write_buffer_limits(high=4 * BACKLOG)  # no pause of our writes while it builds
        ws = FrontWebSocket(protocols=(V4,))
        await ws.prepare(request)
        try:
            for _ in range(BACKLOG // 32768):
                await ws.send_bytes(bytes([STDIN]) + bytes(32768))
            assert transport.get_write_buffer_size() > 0
            closing.set()
            started = time.monotonic()
            try:
                await ws.close()
                outcome.append("returned")
            except Exception as exc:
                outcome.append(repr(exc))
            took[0] = time.monotonic() - started
        finally:
            ended.set()
        return ws

    async with serving_tls(handler, server_ctx) as port:
        writer = await silent_tls_client(port, client_ctx)
        try:
            async with asyncio.timeout(BOUND + 5):
                await closing.wait()
                await asyncio.sleep(0.2)  # the close waits for the client's CLOSE
                writer.transport.abort()  # kubectl went
                await ended.wait()
        finally:
            writer.transport.abort()
    assert outcome == ["returned"]
    assert took[0] < BOUND * 0.8, f"the close waited out its bound ({took[0]:.2f} s): it did not see the end"
