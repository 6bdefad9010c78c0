"""The SPDY pool stream holds at most OUTPUT_BUFFER_MAX bytes of pool output for a slow home client.

In memory: a StreamReader fed with the pool's frames, a writer that only collects; no socket.
"""

from __future__ import annotations

import asyncio

from tests.unit.streamfakes import CollectingWriter
from vkbridge.kubeletapi.streams import spdy
from vkbridge.kubeletapi.streams.channels import STDOUT, StreamOptions
from vkbridge.kubeletapi.streams.spdyclient import OUTPUT_BUFFER_MAX, SpdyPoolStream

READ_SIZE = 65536  # what the read loop takes from the connection at a time


async def opened(reader: asyncio.StreamReader, pool: spdy.FrameEncoder) -> SpdyPoolStream:
    stream = SpdyPoolStream(reader, CollectingWriter(), "v4.channel.k8s.io")  # type: ignore[arg-type]
    opening = asyncio.create_task(stream.open_streams(StreamOptions(False, True, False, False)))
    reader.feed_data(pool.encode(spdy.SynReply(1)) + pool.encode(spdy.SynReply(3)))  # error, stdout
    await opening
    return stream


async def test_a_client_that_does_not_read_stops_the_pool_read_at_the_buffer_and_loses_nothing() -> None:
    reader, pool = asyncio.StreamReader(), spdy.FrameEncoder()
    stream = await opened(reader, pool)
    chunk = bytes(range(256)) * 128  # 32 KiB
    count = 4 * OUTPUT_BUFFER_MAX // len(chunk)
    for i in range(count):
        reader.feed_data(pool.encode(spdy.Data(3, chunk[i % 256 :] + chunk[: i % 256])))
    reader.feed_data(pool.encode(spdy.Data(3, b"", fin=True)) + pool.encode(spdy.Data(1, b"", fin=True)))
    reader.feed_eof()
    for _ in range(50):  # let the read loop run as far as it will
        await asyncio.sleep(0)
    assert not reader.at_eof(), "the read loop took all of the pool's output for a client that reads none"
    assert OUTPUT_BUFFER_MAX <= stream._queued <= OUTPUT_BUFFER_MAX + READ_SIZE

    received = [data async for channel, data in stream.messages() if channel == STDOUT]
    assert len(received) == count
    assert all(data == chunk[i % 256 :] + chunk[: i % 256] for i, data in enumerate(received))
    assert stream.end_reason() == "all output streams ended" and reader.at_eof()
