"""Aborted exec/attach sessions leave nothing behind: tasks, pool connections, sockets, session objects.

Liqo's port-forward leaks a pool connection per aborted session (liqo#2612). Here N WebSocket exec
sessions are aborted at each stage (the client gone before the 101, the client gone mid-stream, the
pool gone mid-stream) through the product's own pieces: ``FrontWebSocket``/``WsExecFront``, ``relay``
and a ``PoolWebSocket`` dialed as the dialer does, in a handler shaped as the kubelet server's
``_ws_stream``. The pool is a real aiohttp WebSocket server that echoes stdin. Loopback only, no
Kubernetes API. The counts are taken once everything settled, against a baseline taken after warm-up.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import logging
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import aiohttp
import pytest
from aiohttp import web

from vkbridge.kubeletapi.streams import poolstream, wsfront
from vkbridge.kubeletapi.streams.channels import STDIN, STDOUT, V4, V5, StreamOptions
from vkbridge.kubeletapi.streams.poolstream import PoolWebSocket, WsPoolStream
from vkbridge.kubeletapi.streams.relay import relay
from vkbridge.kubeletapi.streams.wsfront import FrontWebSocket, WsExecFront

SESSIONS = 5  # per stage
OPTS = StreamOptions(stdin=True, stdout=True, stderr=False, tty=False)


@pytest.fixture(autouse=True)
def short_bounds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(poolstream, "POOL_CLOSE_TIMEOUT", 1.0, raising=False)
    monkeypatch.setattr(wsfront, "WS_CLOSE_TIMEOUT", 1.0, raising=False)
    # aiohttp logs a handler's error with its traceback, and pytest's log capture keeps the record:
    # its frames would hold the session's objects for the whole test (a logging handler of the
    # product formats and drops it).
    monkeypatch.setattr(logging.getLogger("aiohttp.server"), "disabled", True)


@dataclass
class Bench:
    front_port: int = 0
    pool_open: int = 0  # pool-side sessions whose handler has not ended
    front_open: int = 0  # kubelet-side sessions whose handler has not ended
    front_errors: list[str] = field(default_factory=list)


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def live(cls: type) -> int:
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, cls))


async def serve_exec(handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.AppRunner:
    """``handler`` on GET /exec of a loopback port of its own; the caller cleans the runner up."""
    app = web.Application()
    app.router.add_get("/exec", handler)
    runner = web.AppRunner(app, shutdown_timeout=1.0)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


@contextlib.asynccontextmanager
async def bench() -> AsyncIterator[Bench]:
    b = Bench()

    async def pool_handler(request: web.Request) -> web.StreamResponse:
        b.pool_open += 1
        try:
            ws = web.WebSocketResponse(protocols=(V5,))
            await ws.prepare(request)
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.BINARY or msg.data[:1] != bytes([STDIN]):
                    continue
                if msg.data[1:] == b"die":  # the pool's connection goes (tunnel cut, pool restart)
                    assert request.transport is not None
                    request.transport.abort()
                    break
                await ws.send_bytes(bytes([STDOUT]) + msg.data[1:])
            return ws
        finally:
            b.pool_open -= 1

    pool_runner = await serve_exec(pool_handler)
    pool_url = f"http://127.0.0.1:{pool_runner.addresses[0][1]}/exec"
    dial_session = aiohttp.ClientSession(ws_response_class=PoolWebSocket)

    async def front_handler(request: web.Request) -> web.StreamResponse:
        """As the kubelet server's ``_ws_stream``: dial the pool, upgrade the client, relay."""
        b.front_open += 1
        try:
            ws_pool = await dial_session.ws_connect(pool_url, protocols=(V5, V4), autoclose=False)
            assert isinstance(ws_pool, PoolWebSocket)
            pool = WsPoolStream(ws_pool)
            try:
                ws = FrontWebSocket(protocols=(V4,))
                await ws.prepare(request)
                front = WsExecFront(ws, V4, OPTS, request.transport)
                await front.start()
            except BaseException:
                await pool.close()
                raise
            await relay(front, pool)
            return ws
        except Exception as exc:
            b.front_errors.append(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            b.front_open -= 1

    front_runner = await serve_exec(front_handler)
    b.front_port = front_runner.addresses[0][1]
    try:
        yield b
    finally:
        await dial_session.close()
        await front_runner.cleanup()
        await pool_runner.cleanup()


async def gone_before_101(b: Bench, _client: aiohttp.ClientSession) -> None:
    """The upgrade request is sent and the client goes before any answer."""
    loop = asyncio.get_running_loop()
    sock = socket.socket()
    sock.setblocking(False)
    await loop.sock_connect(sock, ("127.0.0.1", b.front_port))
    key = base64.b64encode(os.urandom(16)).decode()
    await loop.sock_sendall(sock, (
        f"GET /exec HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: {V4}\r\n\r\n"
    ).encode())  # fmt: skip
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")  # RST
    sock.close()


async def gone_mid_stream(b: Bench, client: aiohttp.ClientSession) -> None:
    """stdin goes round through the pool, then the client's connection is cut (kubectl killed)."""
    ws = await client.ws_connect(f"http://127.0.0.1:{b.front_port}/exec", protocols=(V4,))
    assert (await ws.receive_bytes()) == bytes([STDOUT])  # the opening message
    await ws.send_bytes(bytes([STDIN]) + b"hi")
    assert (await ws.receive_bytes()) == bytes([STDOUT]) + b"hi"
    conn = ws._response.connection
    assert conn is not None and conn.transport is not None
    conn.transport.abort()
    await ws.close()


async def pool_gone(b: Bench, client: aiohttp.ClientSession) -> None:
    """The pool's connection goes mid-stream: the client gets a Status and a close."""
    ws = await client.ws_connect(f"http://127.0.0.1:{b.front_port}/exec", protocols=(V4,))
    assert (await ws.receive_bytes()) == bytes([STDOUT])
    await ws.send_bytes(bytes([STDIN]) + b"die")
    async for _ in ws:  # the Status on the error channel, then the close
        pass
    assert ws.close_code is not None


async def settle(b: Bench, baseline_tasks: int) -> None:
    for _ in range(500):  # 5 s
        if b.pool_open == 0 and b.front_open == 0 and len(asyncio.all_tasks()) <= baseline_tasks:
            return
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("abort", [gone_before_101, gone_mid_stream, pool_gone], ids=lambda f: f.__name__)
async def test_aborted_exec_sessions_leave_no_task_connection_or_socket_behind(abort: object) -> None:
    assert callable(abort)
    async with bench() as b, aiohttp.ClientSession() as client:
        await gone_mid_stream(b, client)  # warm-up: lazily made objects (resolver, pools) exist
        await settle(b, len(asyncio.all_tasks()))
        await asyncio.sleep(0.1)
        tasks, fds = len(asyncio.all_tasks()), open_fds()
        objects = (live(PoolWebSocket), live(FrontWebSocket), live(WsExecFront))
        for _ in range(SESSIONS):
            await abort(b, client)
        await settle(b, tasks)
        await asyncio.sleep(0.1)  # closed sockets are released on the next loop turns
        left = {
            "tasks": len(asyncio.all_tasks()) - tasks,
            "pool sessions": b.pool_open,
            "front sessions": b.front_open,
            "fds": open_fds() - fds,
            "objects": tuple(n - m for n, m in zip(
                (live(PoolWebSocket), live(FrontWebSocket), live(WsExecFront)), objects, strict=True)),
        }  # fmt: skip
    assert left == {"tasks": 0, "pool sessions": 0, "front sessions": 0, "fds": 0, "objects": (0, 0, 0)}, (
        left,
        [t.get_coro() for t in asyncio.all_tasks()],
        b.front_errors,
    )
