"""Our SPDY dials to the pool turn TCP keepalive on (issue 35: "no TCP keepalive on the pool SPDY dial").

SPDY sends no ping of ours: without keepalive, a tunnel that vanishes without a RST holds an idle exec
(and its pool connection) until the client leaves. On loopback: the TLS connect is replaced by TCP.
"""

from __future__ import annotations

import asyncio
import socket
import ssl

import pytest

from vkbridge.kubeletapi.streams import spdyclient


async def test_the_pool_spdy_dial_turns_tcp_keepalive_on(monkeypatch: pytest.MonkeyPatch) -> None:
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nConnection: Upgrade\r\n\r\n")
        await writer.drain()
        await reader.read()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]

    async def plain(host: str, port: int, *_: object) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        return await asyncio.open_connection(host, port)

    monkeypatch.setattr(spdyclient, "connect", plain)

    async def then(
        _reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _headers: dict[str, str]
    ) -> int:
        sock = writer.get_extra_info("socket")
        value = int(sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE))
        writer.close()
        return value

    async with server:
        keepalive = await spdyclient.spdy_upgrade(
            f"https://127.0.0.1:{port}",
            ssl.create_default_context(),
            target="/api/v1/namespaces/ns/pods/p/portforward",
            protocols=("portforward.k8s.io",),
            headers={},
            then=then,
            timeout=5.0,
        )
    assert keepalive == 1, "the pool's SPDY connection has no TCP keepalive"
