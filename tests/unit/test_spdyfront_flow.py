"""The SPDY front (the API server's connection to us) holds a bounded number of the client's bytes.

In memory: a transport that keeps what we write until the test "reads" it and applies asyncio's
write flow control (pause_writing above a high-water mark); a client that sends only while we read.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from tests.unit.streamfakes import framing
from vkbridge.kubeletapi.streams import spdy, spdyconn
from vkbridge.kubeletapi.streams.channels import V4, ChannelError, ResizeDecoder
from vkbridge.kubeletapi.streams.spdyconn import (
    INBOUND_BYTES_HIGH,
    INBOUND_BYTES_LOW,
    SpdyExecFront,
)


async def test_stdin_the_pool_does_not_take_stops_the_client_at_a_byte_bound_and_loses_nothing() -> None:
    conn, transport, client = framing((1, "error"), (3, "stdin"), (5, "stdout"))
    front = SpdyExecFront(conn, V4)
    frame = 256 * 1024
    chunks = [bytes([i]) * frame for i in range(64)]  # 16 MiB offered in 64 events
    sent = 0
    while sent < len(chunks) and transport.reading:  # the socket delivers only while we read it
        conn.data_received(client.encode(spdy.Data(3, chunks[sent])))
        sent += 1
    assert not transport.reading, (
        f"all {sent} frames ({sent * frame} bytes) were taken for a pool reading none"
    )
    assert INBOUND_BYTES_HIGH < sent * frame <= INBOUND_BYTES_HIGH + frame

    received: list[bytes] = []
    while len(received) < len(chunks):
        paused = not transport.reading
        ev = await front.receive()
        assert ev.kind == "stdin"
        received.append(ev.data)
        if paused and transport.reading:
            assert (sent - len(received)) * frame <= INBOUND_BYTES_LOW  # resumed only once drained
        while sent < len(chunks) and transport.reading:
            conn.data_received(client.encode(spdy.Data(3, chunks[sent])))
            sent += 1
            assert (sent - len(received)) * frame <= INBOUND_BYTES_HIGH + frame
    assert received == chunks


async def test_one_frame_of_many_resizes_queues_only_the_newest_size() -> None:
    conn, _, client = framing((1, "error"), (3, "stdout"), (5, "resize"))
    front = SpdyExecFront(conn, V4)
    sizes = b"".join(b'{"Width":%d,"Height":24}' % w for w in range(1, 20_001))
    conn.data_received(client.encode(spdy.Data(5, sizes)))
    ev = await front.receive()
    assert (ev.kind, json.loads(ev.data)) == ("resize", {"Width": 20_000, "Height": 24})
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.05):
            await front.receive()


def test_the_resize_decoder_drops_a_garbage_buffer_and_recovers() -> None:
    dec = ResizeDecoder()
    with pytest.raises(ChannelError):
        dec.feed(b"x" * (70 * 1024))
    assert dec.feed(b'{"Width":3,"Height":4}') == [{"Width": 3, "Height": 4}]


BACKLOG = 256 * 1024  # WRITE_BACKLOG_MAX in these tests: fewer pings to decode, the same logic


async def test_a_client_sending_pings_without_reading_the_replies_stops_being_read(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(spdyconn, "WRITE_BACKLOG_MAX", BACKLOG)
    conn, transport, client = framing()
    burst = client.encode(spdy.Ping(1)) * 1000  # 12 KB of pings per read
    for _ in range(100):  # 1.2 MB offered
        if not transport.reading:
            break
        conn.data_received(burst)
    assert not transport.reading, f"{len(transport.out)} bytes of PING replies held for a client reading none"
    assert BACKLOG < transport.most_held <= BACKLOG + len(burst)

    transport.client_reads(len(transport.out))
    assert transport.reading, "reading resumes once the client has read our replies"


async def test_a_read_pause_holds_until_every_reason_is_gone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spdyconn, "WRITE_BACKLOG_MAX", BACKLOG)
    conn, transport, client = framing()
    conn.pause_reading()  # a backlog for the pool (port-forward)
    conn.data_received(client.encode(spdy.Ping(1)) * 30_000)  # 360 KB of replies held
    assert conn.reading_paused and not transport.reading
    transport.client_reads(len(transport.out))  # the replies left: the backlog still holds
    assert not transport.reading
    conn.resume_reading()
    assert transport.reading and not conn.reading_paused
