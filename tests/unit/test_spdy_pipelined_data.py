"""DATA a client sends before our reader of its stream exists is kept for it, within a bound.

client-go writes stdin as soon as its streams are open; we attach the exec front only once every stream
is there, and a port-forward pair only once both halves are: spdystream holds such DATA (its unbuffered
channel blocks the frame reader), so must we (issue 35, "DATA pipelined before the exec front attaches").
"""

from __future__ import annotations

import asyncio

from tests.unit.streamfakes import CollectingWriter, framing
from vkbridge.kubeletapi.streams import spdy
from vkbridge.kubeletapi.streams.channels import V4
from vkbridge.kubeletapi.streams.portforward import PoolPortForward, SpdyPortForward
from vkbridge.kubeletapi.streams.spdyconn import INBOUND_BYTES_HIGH, SpdyExecFront


async def test_stdin_pipelined_before_the_exec_front_attaches_reaches_the_pool_before_its_eof() -> None:
    conn, _, client = framing((1, "error"), (3, "stdin"))
    # `echo hi | kubectl exec -i`: the last SYN_STREAM, stdin and its FIN in one read, before the front
    conn.data_received(
        client.encode(spdy.SynStream(5, {"streamtype": ["stdout"]}))
        + client.encode(spdy.Data(3, b"hi\n"))
        + client.encode(spdy.Data(3, b"", fin=True))
    )
    front = SpdyExecFront(conn, V4)
    async with asyncio.timeout(2):
        first = await front.receive()
        assert (first.kind, first.data) == ("stdin", b"hi\n"), "the input was lost, only its EOF came"
        assert (await front.receive()).kind == "stdin_eof"


async def test_data_kept_for_a_stream_without_its_reader_stops_the_client_at_a_bound() -> None:
    conn, transport, client = framing((1, "error"), (3, "stdin"))
    chunk = 256 * 1024
    sent = bytearray()
    while transport.reading and len(sent) < 8 * INBOUND_BYTES_HIGH:
        data = bytes([len(sent) // chunk]) * chunk
        conn.data_received(client.encode(spdy.Data(3, data)))
        sent += data
    assert not transport.reading, f"{len(sent)} bytes kept for a stream nobody reads yet"
    assert len(sent) <= INBOUND_BYTES_HIGH + chunk

    front = SpdyExecFront(conn, V4)
    async with asyncio.timeout(2):
        ev = await front.receive()
    assert (ev.kind, ev.data) == ("stdin", bytes(sent))
    assert transport.reading, "reading resumes once the front has taken what was kept"


async def test_data_on_a_stream_nobody_reads_is_dropped_once_the_exec_front_is_attached() -> None:
    conn, transport, client = framing((1, "error"), (3, "stdin"), (5, "stdout"))
    conn.data_received(client.encode(spdy.Data(5, b"x" * 1000)))  # the client writes on its stdout
    SpdyExecFront(conn, V4)
    for _ in range(8):
        conn.data_received(client.encode(spdy.Data(5, b"x" * (256 * 1024))))
    assert transport.reading, "bytes nobody will read stopped the client"


async def test_port_forward_bytes_sent_before_the_pair_is_complete_reach_the_pool() -> None:
    conn, _, client = framing()
    writer = CollectingWriter()
    pool = PoolPortForward(asyncio.StreamReader(), writer)  # type: ignore[arg-type]
    SpdyPortForward(conn, pool, "ns/pod")
    headers = {"port": ["8080"], "requestid": ["0"]}
    conn.data_received(client.encode(spdy.SynStream(1, {"streamtype": ["data"], **headers})))
    conn.data_received(client.encode(spdy.Data(1, b"GET / HTTP/1.0\r\n\r\n")))
    conn.data_received(client.encode(spdy.SynStream(3, {"streamtype": ["error"], **headers}, fin=True)))
    for _ in range(10):
        await asyncio.sleep(0)
    frames = spdy.FrameDecoder().feed(bytes(writer.written))
    sent = b"".join(f.data for f in frames if isinstance(f, spdy.Data))
    assert sent == b"GET / HTTP/1.0\r\n\r\n"
