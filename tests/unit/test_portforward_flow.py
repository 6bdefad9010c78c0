"""Port-forward: pool output waits for a slow client; a reset pair is forgotten; a lost pool ends it.

In memory: the front is a SpdyConnection on a transport that holds what we write until the test reads
it (asyncio's write flow control); the pool is a PoolPortForward on a StreamReader the test feeds.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.streamfakes import CollectingWriter, HeldTransport, framing
from vkbridge.kubeletapi.streams import portforward, spdy
from vkbridge.kubeletapi.streams.portforward import PoolPortForward, SpdyPortForward, WsPortForward
from vkbridge.kubeletapi.streams.spdyconn import SpdyConnection

CHUNK = 32 * 1024


def pair_headers(kind: str) -> spdy.Headers:
    return {"streamtype": [kind], "port": ["8080"], "requestid": ["0"]}


async def forwarding() -> tuple[
    SpdyConnection, HeldTransport, spdy.FrameEncoder, asyncio.StreamReader, SpdyPortForward
]:
    conn, transport, client = framing()
    reader = asyncio.StreamReader()
    pool = PoolPortForward(reader, CollectingWriter())  # type: ignore[arg-type]
    session = SpdyPortForward(conn, pool, "ns/pod")
    conn.data_received(client.encode(spdy.SynStream(1, pair_headers("error"))))
    conn.data_received(client.encode(spdy.SynStream(3, pair_headers("data"))))
    pool._read_task = asyncio.create_task(pool._read_loop())
    await asyncio.sleep(0)
    return conn, transport, client, reader, session


def pool_writes(session: SpdyPortForward) -> list[spdy.Frame]:
    return spdy.FrameDecoder().feed(bytes(session._pool._writer.written))  # type: ignore[attr-defined]


async def test_pool_output_a_client_does_not_read_stops_the_pool_read_at_the_front_mark() -> None:
    _conn, transport, _, reader, _session = await forwarding()
    pool = spdy.FrameEncoder()
    chunks = [bytes([i]) * CHUNK for i in range(256)]  # 8 MiB from the pod
    for chunk in chunks:  # the pool's data stream is 3 (error 1): the order we opened them in
        reader.feed_data(pool.encode(spdy.Data(3, chunk)))
    for _ in range(50):  # let the pool read loop run as far as it will
        await asyncio.sleep(0)
    assert transport.most_held <= HeldTransport.HIGH + CHUNK + 1024
    assert len(reader._buffer) >= len(chunks) * CHUNK - HeldTransport.HIGH - 2 * 65536  # left with the pool

    decoder, received = spdy.FrameDecoder(), bytearray()
    async with asyncio.timeout(30):
        while len(received) < len(chunks) * CHUNK:  # the client reads: everything arrives, in order
            out = bytes(transport.out)
            transport.client_reads(len(out))
            received += b"".join(f.data for f in decoder.feed(out) if isinstance(f, spdy.Data))
            await asyncio.sleep(0)
    assert received == b"".join(chunks)
    assert transport.most_held <= HeldTransport.HIGH + CHUNK + 1024


@pytest.mark.parametrize("side", ["client", "pool"])
async def test_a_reset_pair_ends_its_pump_and_is_forgotten(side: str) -> None:
    conn, _, client, reader, session = await forwarding()
    assert len(session._tasks) == 1 and {1, 3} <= conn.streams.keys()
    if side == "client":
        conn.data_received(client.encode(spdy.RstStream(3, spdy.RstStatus.CANCEL)))
    else:
        reader.feed_data(spdy.FrameEncoder().encode(spdy.RstStream(3, spdy.RstStatus.CANCEL)))
    for _ in range(20):
        await asyncio.sleep(0)
    assert not session._tasks, "the pump of a reset pair waits for a FIN that never comes"
    assert not {1, 3} & conn.streams.keys()
    if side == "client":  # the pod's socket is given up too
        assert {f.stream_id for f in pool_writes(session) if isinstance(f, spdy.RstStream)} == {1, 3}


async def test_a_refused_stream_is_not_kept() -> None:
    conn, _, client, _, _ = await forwarding()
    conn.data_received(client.encode(spdy.SynStream(5, {"streamtype": ["bogus"], "port": ["80"]})))
    assert 5 not in conn.streams


NOTICE = 0.2  # LOST_NOTICE_TIMEOUT in these tests


async def test_a_lost_pool_ends_the_session_though_the_client_reads_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(portforward, "LOST_NOTICE_TIMEOUT", NOTICE)
    conn, transport, client, reader, session = await forwarding()
    conn.data_received(client.encode(spdy.Ping(1)) * 6000)  # 72 KB of echoes the client does not read
    assert len(transport.out) > HeldTransport.HIGH and transport.reading  # writes paused, reads not
    running = asyncio.create_task(session.run())
    reader.feed_eof()  # the tunnel is cut
    async with asyncio.timeout(NOTICE + 5):
        outcome = await running
    assert outcome == "pool connection lost: the pool closed the connection"
    assert not session._tasks and transport.is_closing()
    frames = spdy.FrameDecoder().feed(bytes(transport.out))  # what a client reading late still gets
    told = b"".join(f.data for f in frames if isinstance(f, spdy.Data) and f.stream_id == 1)
    assert b"lost its connection to the pool" in told


async def test_a_lost_pool_ends_a_websocket_session_though_the_client_reads_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(portforward, "LOST_NOTICE_TIMEOUT", NOTICE)
    reader = asyncio.StreamReader()
    pool = PoolPortForward(reader, CollectingWriter())  # type: ignore[arg-type]
    pool._read_task = asyncio.create_task(pool._read_loop())
    sent: list[tuple[int, bytes]] = []

    async def send(channel: int, payload: bytes) -> None:
        sent.append((channel, payload))
        if len(sent) > 2:  # after the two port prefixes the client's socket is full: nothing leaves
            await asyncio.Event().wait()

    session = WsPortForward(pool, [8080], send)
    await session.start()
    waiting = asyncio.create_task(session.wait(asyncio.Event().wait()))
    reader.feed_eof()
    async with asyncio.timeout(NOTICE + 5):
        outcome = await waiting
    assert outcome == "pool connection lost: the pool closed the connection"
    assert sent[2][0] == 1 and b"lost its connection to the pool" in sent[2][1]  # it was tried
    await pool.close()
