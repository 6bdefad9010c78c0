"""A WebSocket message is held whole until it ends: the port-forward front refuses one over WS_MAX_MESSAGE.

Real loopback sockets: aiohttp serves ``pfserve.websocket``; the pool side is a PoolPortForward whose
connection only collects what we write to it (no Kubernetes API involved).
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from aiohttp import web

from tests.unit.streamfakes import CollectingWriter
from vkbridge.kubeletapi.streams import pfserve, spdy
from vkbridge.kubeletapi.streams.channels import V4, WS_MAX_MESSAGE
from vkbridge.kubeletapi.streams.portforward import PoolPortForward
from vkbridge.kubeletapi.streams.route import StreamRoute


def pool_data(written: bytes) -> int:
    """Bytes of DATA the pool was sent (the SYN_STREAMs around them aside)."""
    return sum(len(f.data) for f in spdy.FrameDecoder().feed(written) if isinstance(f, spdy.Data))


async def serve(
    writer: CollectingWriter, ended: asyncio.Event, reader: asyncio.StreamReader | None = None
) -> tuple[web.AppRunner, str]:
    async def dial(_route: StreamRoute) -> PoolPortForward:
        pool = PoolPortForward(reader or asyncio.StreamReader(), writer)  # type: ignore[arg-type]
        if reader is not None:  # the pool sends: read it as dial() would
            pool._read_task = asyncio.create_task(pool._read_loop())
        return pool

    async def handler(request: web.Request) -> web.StreamResponse:
        try:
            return await pfserve.websocket(request, StreamRoute("portforward", "ns", "pod"), dial)
        finally:
            ended.set()

    app = web.Application()
    app.router.add_get("/portForward/ns/pod", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    return runner, f"http://{host}:{port}/portForward/ns/pod?port=8080"


async def test_a_client_message_over_the_limit_ends_the_session_and_never_reaches_the_pool() -> None:
    writer, ended = CollectingWriter(), asyncio.Event()
    runner, url = await serve(writer, ended)
    try:
        async with aiohttp.ClientSession() as session, session.ws_connect(url, protocols=(V4,)) as ws:
            for _ in range(2):  # the port on the data and the error channel
                assert (await ws.receive_bytes())[1:] == (8080).to_bytes(2, "little")
            await ws.send_bytes(b"\x00" + bytes(1 << 20))  # an ordinary message passes
            # Refused at its header: the server closes (1009) while we are still writing it.
            with contextlib.suppress(ConnectionError, aiohttp.ClientError):
                await ws.send_bytes(b"\x00" + bytes(WS_MAX_MESSAGE + 1))
            async with asyncio.timeout(10):
                await ended.wait()
    finally:
        await runner.cleanup()
    assert pool_data(bytes(writer.written)) == 1 << 20


async def test_pool_output_a_websocket_client_does_not_read_is_left_with_the_pool() -> None:
    reader, pool = asyncio.StreamReader(), spdy.FrameEncoder()
    total = 32 << 20
    chunk = bytes(32 * 1024)
    for _ in range(total // len(chunk)):  # the pool's data stream is 3: the order we open them in
        reader.feed_data(pool.encode(spdy.Data(3, chunk)))
    writer, ended = CollectingWriter(), asyncio.Event()
    runner, url = await serve(writer, ended, reader)
    try:
        async with aiohttp.ClientSession() as session, session.ws_connect(url, protocols=(V4,)) as ws:
            await ws.receive_bytes()  # then read nothing: only the sockets' buffers take more
            for _ in range(40):
                await asyncio.sleep(0.05)
            left = len(reader._buffer)
    finally:
        await runner.cleanup()
    assert left >= total // 2, f"{(total - left) >> 20} MiB taken from the pool for a client reading none"
