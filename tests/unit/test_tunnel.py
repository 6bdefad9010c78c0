"""TunnelProxy against a loopback asyncio echo server: each fault must be observable by a client."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from e2e.tunnel import TunnelProxy
from e2e.waiting import eventually

pytestmark = pytest.mark.timeout(10)

HANG_S = 0.25  # how long a read must stay silent to count as "hanging"


class EchoServer:
    def __init__(self) -> None:
        self.accepted = 0
        self.server: asyncio.Server | None = None
        self.port = 0

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
        except OSError:
            pass
        finally:
            writer.close()

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self.server is not None
        self.server.close()


@pytest.fixture
async def echo() -> AsyncIterator[EchoServer]:
    server = EchoServer()
    await server.start()
    yield server
    await server.stop()


@pytest.fixture
async def proxy(echo: EchoServer) -> AsyncIterator[TunnelProxy]:
    tp = TunnelProxy("127.0.0.1", echo.port)
    await tp.start_async()
    yield tp
    await tp.stop_async()


async def connect(tp: TunnelProxy) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", tp.port)


async def roundtrip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, payload: bytes) -> bytes:
    writer.write(payload)
    await writer.drain()
    return await asyncio.wait_for(reader.readexactly(len(payload)), 2)


async def expect_reset(reader: asyncio.StreamReader) -> None:
    """The proxy resets with SO_LINGER 0, so the client must see ECONNRESET, not a clean EOF."""
    with pytest.raises(ConnectionResetError):
        await asyncio.wait_for(reader.read(100), 2)


async def expect_hang(reader: asyncio.StreamReader) -> None:
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(reader.read(100), HANG_S)


async def test_forwards_both_ways_and_counts(proxy: TunnelProxy, echo: EchoServer) -> None:
    assert proxy.url == f"https://127.0.0.1:{proxy.port}"
    r, w = await connect(proxy)
    big = bytes(range(256)) * 2048  # 512 KiB: several chunks each way
    assert await roundtrip(r, w, big) == big
    assert echo.accepted == 1
    assert proxy.connections_total == 1
    assert proxy.open_connections == 1
    assert proxy.bytes_up == len(big)
    assert proxy.bytes_down == len(big)
    w.write_eof()  # half-close travels through; the echo server closes; so does the proxy
    assert await asyncio.wait_for(r.read(), 2) == b""
    w.close()
    await eventually(lambda: proxy.open_connections == 0, 2.0, "every connection closed")


async def test_latency_is_added_per_direction_and_keeps_order(proxy: TunnelProxy) -> None:
    r, w = await connect(proxy)
    assert await roundtrip(r, w, b"warm") == b"warm"
    proxy.set_latency(0.15)
    t0 = time.monotonic()
    for i in range(5):
        w.write(b"%d;" % i)
        await w.drain()
    data = await asyncio.wait_for(r.readexactly(10), 2)
    elapsed = time.monotonic() - t0
    assert data == b"0;1;2;3;4;"
    assert 0.3 <= elapsed < 1.5  # 0.15 up + 0.15 down, chunks pipelined rather than serialised
    proxy.set_latency(0)
    t0 = time.monotonic()
    assert await roundtrip(r, w, b"fast") == b"fast"
    assert time.monotonic() - t0 < 0.3  # with the old latency it would take >= 0.3 s
    w.close()


async def test_blackhole_hangs_existing_and_new_then_restore(proxy: TunnelProxy, echo: EchoServer) -> None:
    r1, w1 = await connect(proxy)
    assert await roundtrip(r1, w1, b"before") == b"before"
    up_before = proxy.bytes_up
    proxy.blackhole()
    w1.write(b"lost")
    await w1.drain()
    await expect_hang(r1)
    r2, w2 = await connect(proxy)  # accepted, but never reaches the pool
    w2.write(b"lost too")
    await w2.drain()
    await expect_hang(r2)
    assert echo.accepted == 1
    assert proxy.bytes_up == up_before
    assert proxy.open_connections == 2

    proxy.restore()
    await expect_reset(r1)
    await expect_reset(r2)
    r3, w3 = await connect(proxy)
    assert await roundtrip(r3, w3, b"after") == b"after"
    for w in (w1, w2, w3):
        w.close()


async def test_reset_all_breaks_open_connections_only(proxy: TunnelProxy) -> None:
    conns = [await connect(proxy) for _ in range(3)]
    for r, w in conns:
        assert await roundtrip(r, w, b"x") == b"x"
    proxy.reset_all()
    for r, _ in conns:
        await expect_reset(r)
    await eventually(lambda: proxy.open_connections == 0, 2.0, "every connection closed")
    assert proxy.resets_total == 3
    r, w = await connect(proxy)  # mode unchanged: new connections still work
    assert await roundtrip(r, w, b"y") == b"y"
    for _, cw in [*conns, (r, w)]:
        cw.close()


async def test_refuse_resets_open_and_closes_new(proxy: TunnelProxy, echo: EchoServer) -> None:
    r1, w1 = await connect(proxy)
    assert await roundtrip(r1, w1, b"x") == b"x"
    proxy.refuse()
    await expect_reset(r1)
    r2, w2 = await connect(proxy)
    with pytest.raises((ConnectionResetError, asyncio.IncompleteReadError)):
        await roundtrip(r2, w2, b"hello")
    assert echo.accepted == 1
    assert proxy.connections_total == 2
    proxy.restore()
    r3, w3 = await connect(proxy)
    assert await roundtrip(r3, w3, b"back") == b"back"
    for w in (w1, w2, w3):
        w.close()


async def test_cut_every_cuts_each_connection_and_can_be_disabled(proxy: TunnelProxy) -> None:
    r1, w1 = await connect(proxy)
    assert await roundtrip(r1, w1, b"x") == b"x"
    proxy.cut_every(0.05, 0.1)  # applies to the already open connection
    r2, w2 = await connect(proxy)  # and to new ones
    assert await roundtrip(r2, w2, b"y") == b"y"
    await expect_reset(r1)
    await expect_reset(r2)
    assert proxy.resets_total == 2

    proxy.cut_every(None)
    r3, w3 = await connect(proxy)
    await asyncio.sleep(0.2)  # longer than the old max lifetime: the connection must survive it
    assert await roundtrip(r3, w3, b"z") == b"z"
    assert proxy.resets_total == 2
    for w in (w1, w2, w3):
        w.close()


async def test_upstream_down_resets_client() -> None:
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    dead_port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    tp = TunnelProxy("127.0.0.1", dead_port)
    await tp.start_async()
    try:
        r, _w = await connect(tp)
        await expect_reset(r)
    finally:
        await tp.stop_async()


async def test_threaded_start_and_control_from_another_thread(echo: EchoServer) -> None:
    tp = TunnelProxy("127.0.0.1", echo.port)
    tp.start()  # own loop in a daemon thread; control calls below come from this (other) loop's thread
    try:
        r, w = await connect(tp)
        assert await roundtrip(r, w, b"threaded") == b"threaded"
        tp.blackhole()
        await expect_hang(r)
        tp.restore()
        await expect_reset(r)
        r2, w2 = await connect(tp)
        assert await roundtrip(r2, w2, b"again") == b"again"
        tp.reset_all()  # returns once applied on the proxy loop
        await expect_reset(r2)
        assert tp.connections_total == 2
    finally:
        tp.stop()
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", tp.port)
