"""``spdyclient.close_upgraded``: a pool that does not read loses its connection after the 1 s grace.

A closed transport is not a released socket: asyncio keeps it until its write buffer has left, which a
peer that reads nothing never lets happen. Real loopback sockets; no Kubernetes API is involved.
"""

from __future__ import annotations

import asyncio
import socket
import time

from vkbridge.kubeletapi.streams.spdyclient import close_upgraded

BACKLOG = 1 << 20  # far past every buffer between us and the peer


async def _drain_all(sock: socket.socket, deadline: float) -> int:
    """Read until EOF or reset (or the deadline): the bytes the peer got."""
    loop, got = asyncio.get_running_loop(), 0
    sock.setblocking(False)
    while time.monotonic() < deadline:
        try:
            data = await asyncio.wait_for(loop.sock_recv(sock, 65536), deadline - time.monotonic())
        except (ConnectionResetError, TimeoutError):
            break
        if not data:
            break
        got += len(data)
    return got


async def test_a_peer_that_does_not_read_is_cut_off_after_the_grace() -> None:
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    _reader, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
    peer, _ = listener.accept()
    writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)  # kernel: small
    try:
        writer.write(b"x" * BACKLOG)  # the peer reads none of it: most stays in our buffer
        started = time.monotonic()
        await close_upgraded(None, writer)
        assert time.monotonic() - started < 3.0
        got = await _drain_all(peer, time.monotonic() + 5.0)  # now the peer reads what reached it
        assert got < BACKLOG, "everything was delivered: the connection was closed, not aborted"
    finally:
        peer.close()
        listener.close()
        writer.transport.abort()


async def test_a_peer_that_reads_gets_everything_and_a_clean_end() -> None:
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    _reader, writer = await asyncio.open_connection("127.0.0.1", listener.getsockname()[1])
    peer, _ = listener.accept()
    try:
        writer.write(b"x" * 1000)
        got = asyncio.ensure_future(_drain_all(peer, time.monotonic() + 5.0))
        await close_upgraded(None, writer)
        assert await got == 1000
    finally:
        peer.close()
        listener.close()
