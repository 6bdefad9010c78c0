"""In-memory stand-ins for the two ends of a stream connection (no socket, no Kubernetes API), and
what the tests on real loopback sockets share."""

from __future__ import annotations

import asyncio
import socket

from vkbridge.kubeletapi.streams import spdy
from vkbridge.kubeletapi.streams.spdyconn import SpdyConnection


class HeldTransport(asyncio.Transport):
    """Keeps every written byte until ``client_reads``; pauses/resumes the protocol like asyncio does."""

    HIGH, LOW = 64 * 1024, 16 * 1024

    def __init__(self, protocol: asyncio.BaseProtocol) -> None:
        super().__init__()
        self.protocol = protocol
        self.out = bytearray()
        self.reading = True
        self.most_held = 0
        self._write_paused = False
        self._closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data
        self.most_held = max(self.most_held, len(self.out))
        if not self._write_paused and len(self.out) > self.HIGH:
            self._write_paused = True
            self.protocol.pause_writing()

    def client_reads(self, n: int) -> None:
        del self.out[:n]
        if self._write_paused and len(self.out) <= self.LOW:
            self._write_paused = False
            self.protocol.resume_writing()

    def get_write_buffer_size(self) -> int:
        return len(self.out)

    def pause_reading(self) -> None:
        self.reading = False

    def resume_reading(self) -> None:
        self.reading = True

    def is_reading(self) -> bool:
        return self.reading

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True

    def abort(self) -> None:
        self._closing = True


def held_connection() -> tuple[asyncio.StreamReader, asyncio.StreamWriter, HeldTransport]:
    """A real StreamReader/StreamWriter on a HeldTransport: the pool's connection, fed by ``feed_data``."""
    reader = asyncio.StreamReader()
    protocol = asyncio.StreamReaderProtocol(reader)
    transport = HeldTransport(protocol)
    protocol.connection_made(transport)
    return reader, asyncio.StreamWriter(transport, protocol, reader, asyncio.get_running_loop()), transport


def framing(
    *streams: tuple[int, str], idle_timeout: float | None = None
) -> tuple[SpdyConnection, HeldTransport, spdy.FrameEncoder]:
    conn = SpdyConnection() if idle_timeout is None else SpdyConnection(idle_timeout=idle_timeout)
    transport = HeldTransport(conn)
    conn.connection_made(transport)
    conn.start_framing()
    client = spdy.FrameEncoder()
    for sid, kind in streams:
        conn.data_received(client.encode(spdy.SynStream(sid, {"streamtype": [kind]})))
    transport.client_reads(len(transport.out))  # the SYN_REPLYs
    return conn, transport, client


class CollectingTransport:
    def is_closing(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return 0  # everything written has left

    def abort(self) -> None:
        return None


class CollectingWriter:
    """The pool connection: keeps what we send the pool."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.transport = CollectingTransport()

    def write(self, data: bytes) -> None:
        self.written += data

    async def drain(self) -> None:
        return None

    def close(self) -> None:
        return None

    async def wait_closed(self) -> None:
        return None


async def read_to_end(sock: socket.socket) -> int:
    """Everything a raw socket still delivers; returns once it is closed (FIN or RST)."""
    loop, total = asyncio.get_running_loop(), 0
    try:
        while data := await loop.sock_recv(sock, 65536):
            total += len(data)
    except ConnectionResetError:
        pass
    return total
