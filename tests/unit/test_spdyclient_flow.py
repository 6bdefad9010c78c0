"""Our echoes of the pool's PINGs are bounded: a pool that sends them and never reads stops being read.

In memory: a real StreamReader/StreamWriter on a transport that holds what we write until the test lets
the pool read it (asyncio's write flow control); the pool's frames are fed to the reader. Both SPDY
dialers to the pool (exec/attach and port-forward) share the bound.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.streamfakes import HeldTransport, held_connection
from vkbridge.kubeletapi.streams import spdy, spdyclient
from vkbridge.kubeletapi.streams.channels import V4
from vkbridge.kubeletapi.streams.portforward import PoolPortForward
from vkbridge.kubeletapi.streams.spdyclient import SpdyPoolStream

BACKLOG = 256 * 1024  # WRITE_BACKLOG_MAX in these tests: fewer pings to decode, the same logic
READ_SIZE = 65536  # what a read loop takes from the connection at a time
PING = spdy.FrameEncoder().encode(spdy.Ping(2))  # the server's pings have even ids


async def reading(dialer: str) -> tuple[asyncio.StreamReader, HeldTransport, asyncio.Task[None]]:
    reader, writer, transport = held_connection()
    pool = SpdyPoolStream(reader, writer, V4) if dialer == "exec" else PoolPortForward(reader, writer)
    task = asyncio.create_task(pool._read_loop())
    return reader, transport, task


async def settle() -> None:
    for _ in range(50):  # let the read loop run as far as it will
        await asyncio.sleep(0)


@pytest.mark.parametrize("dialer", ["exec", "portforward"])
async def test_pool_pings_whose_echoes_are_not_read_stop_the_read_at_the_bound(
    dialer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spdyclient, "WRITE_BACKLOG_MAX", BACKLOG)
    reader, transport, task = await reading(dialer)
    reader.feed_data(PING)
    await settle()
    assert bytes(transport.out) == PING, "an ordinary ping is answered at once"
    transport.client_reads(len(PING))

    offered = 4 * BACKLOG // len(PING)  # 1 MiB of pings, never read back
    reader.feed_data(PING * offered)
    await settle()
    assert BACKLOG < transport.most_held <= BACKLOG + READ_SIZE, f"{transport.most_held} bytes of echoes held"
    assert len(reader._buffer) >= offered * len(PING) - BACKLOG - 2 * READ_SIZE  # left with the pool
    assert not transport.reading, "the pool's socket is no longer read"

    echoed = 0
    async with asyncio.timeout(30):
        while echoed < offered:  # the pool reads: every ping is answered, none twice
            echoed += len(transport.out) // len(PING)
            transport.client_reads(len(transport.out))
            await asyncio.sleep(0)
    await settle()
    assert echoed == offered and not transport.out
    assert transport.most_held <= BACKLOG + READ_SIZE
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
