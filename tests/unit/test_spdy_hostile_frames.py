"""Hostile SPDY frames cost us neither unbounded memory nor a stalled loop (issue 35, items 4 and 5).

A client allowed ``pods/exec`` (through kube-apiserver) or a hostile pool (on our dials) sends: HEADERS
frames that zlib's shared context makes cheap to send and dear to keep; a SETTINGS frame announcing
millions of entries; a PING as long as a frame may be. In memory, on the product classes.
"""

from __future__ import annotations

import asyncio
import struct

import pytest

from tests.unit.streamfakes import CollectingWriter, framing, held_connection
from vkbridge.kubeletapi.streams import spdy
from vkbridge.kubeletapi.streams.channels import V4
from vkbridge.kubeletapi.streams.portforward import PoolPortForward, SpdyPortForward
from vkbridge.kubeletapi.streams.spdyclient import SpdyPoolStream
from vkbridge.kubeletapi.streams.spdyconn import SpdyConnection

HUGE = spdy.MAX_FRAME_PAYLOAD  # what a 24-bit length allows: 16 MiB


def control_header(ftype: int, length: int) -> bytes:
    return struct.pack(">HHI", 0x8000 | spdy.VERSION, ftype, length)


def header_floods(client: spdy.FrameEncoder, sid: int, frames: int) -> bytes:
    """HEADERS frames of 200 new names each: a few bytes apiece once zlib has seen the pattern."""
    return b"".join(
        client.encode(spdy.HeadersFrame(sid, {f"x-{i}-{j}": ["v" * 64] for j in range(200)}))
        for i in range(frames)
    )


# ---------------------------------------------------------------------------------------------- HEADERS


async def test_headers_frames_after_syn_stream_do_not_grow_an_exec_stream() -> None:
    conn, _, client = framing((1, "error"), (3, "stdin"), (5, "stdout"))
    before = {sid: dict(st.headers) for sid, st in conn.streams.items()}
    flood = header_floods(client, 3, 200)
    conn.data_received(flood)
    kept = sum(len(st.headers) for st in conn.streams.values())
    assert kept == 3, f"{kept} header entries kept from {len(flood)} bytes of HEADERS frames"
    assert {sid: st.headers for sid, st in conn.streams.items()} == before


async def test_headers_frames_on_a_waiting_port_forward_stream_are_not_kept() -> None:
    conn, _, client = framing()
    SpdyPortForward(conn, PoolPortForward(asyncio.StreamReader(), CollectingWriter()), "ns/pod")  # type: ignore[arg-type]
    conn.data_received(client.encode(spdy.SynStream(1, {"streamtype": ["error"], "port": ["80"]})))
    conn.data_received(header_floods(client, 1, 100))
    assert 1 in conn.streams  # the half waits for its data stream
    assert sum(len(st.headers) for st in conn.streams.values()) <= 2


async def test_a_headers_fin_still_half_closes_the_stream() -> None:
    conn, _, client = framing((1, "error"), (3, "stdin"))
    got: list[tuple[bytes, bool]] = []
    conn.streams[3].on_data = lambda data, fin: got.append((data, fin))
    conn.data_received(client.encode(spdy.HeadersFrame(3, {"x": ["y"]}, fin=True)))
    assert conn.streams[3].remote_closed and got == [(b"", True)]
    assert "x" not in conn.streams[3].headers


# ---------------------------------------------------------------------------------------------- SETTINGS


def test_a_settings_frame_with_more_entries_than_spdy_defines_is_refused_from_its_header() -> None:
    decoder = spdy.FrameDecoder()
    entries = (HUGE - 4) // 8  # two million
    with pytest.raises(spdy.SpdyError, match="SETTINGS"):
        decoder.feed(control_header(spdy.FrameType.SETTINGS, 4 + 8 * entries) + struct.pack(">I", entries))
    nine = struct.pack(">I", 9) + b"".join(struct.pack(">II", i, 1) for i in range(1, 10))
    with pytest.raises(spdy.SpdyError, match="SETTINGS"):
        spdy.FrameDecoder().feed(control_header(spdy.FrameType.SETTINGS, len(nine)) + nine)


def test_settings_with_every_entry_spdy_defines_still_decode() -> None:
    every = tuple((0, i, 100 + i) for i in range(1, 9))  # the 8 ids SPDY/3.1 defines
    wire = spdy.FrameEncoder().encode(spdy.Settings(every))
    assert spdy.FrameDecoder().feed(wire) == [spdy.Settings(every)]


@pytest.mark.parametrize(
    ("ftype", "length"),
    [(spdy.FrameType.PING, HUGE), (spdy.FrameType.RST_STREAM, HUGE), (spdy.FrameType.GOAWAY, 1 << 20)],
)
def test_a_fixed_length_control_frame_announced_longer_is_refused_from_its_header(
    ftype: int, length: int
) -> None:
    with pytest.raises(spdy.SpdyError, match="must be"):
        spdy.FrameDecoder().feed(control_header(ftype, length))


async def test_a_huge_settings_frame_closes_the_front_connection_before_its_payload() -> None:
    conn, transport, _ = framing((1, "error"))
    conn.data_received(control_header(spdy.FrameType.SETTINGS, HUGE) + b"\x00" * 4096)
    assert transport.is_closing(), "the connection waits for 16 MiB of SETTINGS entries"
    frames = spdy.FrameDecoder().feed(bytes(transport.out))
    assert frames == [spdy.GoAway(1, spdy.GoAwayStatus.PROTOCOL_ERROR)]


@pytest.mark.parametrize("dialer", ["exec", "portforward"])
async def test_a_pool_sending_a_huge_settings_frame_ends_our_dial_before_its_payload(dialer: str) -> None:
    reader, writer, _ = held_connection()
    pool = SpdyPoolStream(reader, writer, V4) if dialer == "exec" else PoolPortForward(reader, writer)
    task = asyncio.create_task(pool._read_loop())
    reader.feed_data(control_header(spdy.FrameType.SETTINGS, HUGE) + b"\x00" * 4096)
    try:
        async with asyncio.timeout(2):
            await task
    except TimeoutError:
        pytest.fail("the read loop waits for 16 MiB of SETTINGS entries from the pool")
    reason = pool.end_reason() if isinstance(pool, SpdyPoolStream) else pool.reason
    assert reason.startswith("SPDY protocol error from the pool") and "SETTINGS" in reason


async def test_the_front_still_takes_an_ordinary_settings_frame() -> None:
    conn, transport, client = framing((1, "error"))
    conn.data_received(client.encode(spdy.Settings(((0, 7, 65536),))) + client.encode(spdy.Ping(1)))
    assert not transport.is_closing()
    assert spdy.FrameDecoder().feed(bytes(transport.out)) == [spdy.Ping(1)]
    assert isinstance(conn, SpdyConnection)
