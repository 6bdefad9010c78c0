"""Resident memory per TLS connection: asyncio's default read buffer (256 KiB each) versus ours."""

from __future__ import annotations

import asyncio
import ssl
import tracemalloc
from asyncio import sslproto
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.certs import loopback_tls
from vkbridge.kube.tlsbuffer import TLS_READ_BUFFER, limit_tls_read_buffer

CONNECTIONS = 20


@pytest.fixture
def default_buffer() -> Iterator[None]:
    """Each test starts from asyncio's own size and leaves it as it found it."""
    saved = sslproto.SSLProtocol.max_size
    sslproto.SSLProtocol.max_size = 256 * 1024
    yield
    sslproto.SSLProtocol.max_size = saved


def _contexts(tmp_path: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    return loopback_tls(tmp_path, "tls-buffer-test")  # the client verifies, as in production


async def _bytes_per_connection(tmp_path: Path) -> float:
    server_ctx, client_ctx = _contexts(tmp_path)

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.readexactly(4))
        await writer.drain()
        await reader.read()  # hold the connection until the client closes it
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    writers = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for _ in range(CONNECTIONS):
            reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx)
            writer.write(b"ping")
            assert await reader.readexactly(4) == b"ping"
            writers.append(writer)
        grown = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
        for writer in writers:
            writer.close()
        server.close()
        await server.wait_closed()
    return grown / (2 * CONNECTIONS)  # both ends of each connection are in this process


async def test_asyncio_default_reserves_a_quarter_mebibyte_per_tls_connection(
    default_buffer: None, tmp_path: Path
) -> None:
    """The premise: without the limit, every connection end holds >= 256 KiB (what the bench saw)."""
    assert await _bytes_per_connection(tmp_path) >= 256 * 1024


async def test_limited_tls_connections_hold_a_quarter_of_that(default_buffer: None, tmp_path: Path) -> None:
    limit_tls_read_buffer()
    per_connection = await _bytes_per_connection(tmp_path)
    assert TLS_READ_BUFFER <= per_connection < 96 * 1024


def test_the_limit_never_goes_below_one_tls_record(default_buffer: None) -> None:
    limit_tls_read_buffer(1024)
    assert sslproto.SSLProtocol.max_size == 16 * 1024
