"""The first protocol on every TLS connection: reads the request head and picks who serves it.

aiohttp cannot switch to SPDY/3.1 (its parsers only upgrade to websocket/tcp, technotes §1.7), so a
head asking for ``Upgrade: SPDY/3.1`` goes to our SPDY entry; anything else is handed, bytes intact,
to aiohttp's request handler on the same transport.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Final, cast

from vkbridge.kubeletapi.streams.rawhttp import is_spdy_upgrade

__all__ = ["Sniffer", "keepalive"]

MAX_HEAD: Final = 64 * 1024
HEAD_TIMEOUT: Final = 30.0

SpdyEntry = Callable[[asyncio.Transport, bytes, bytes], None]


class Sniffer(asyncio.Protocol):
    def __init__(
        self,
        http_factory: Callable[[], asyncio.BaseProtocol],
        spdy_entry: SpdyEntry,
        head_timeout: float = HEAD_TIMEOUT,
        live: set[Sniffer] | None = None,
    ) -> None:
        self._http_factory = http_factory
        self._spdy_entry = spdy_entry
        self._head_timeout = head_timeout
        self._buf = bytearray()
        self._transport: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._done = False
        self._live = live  # the server's set of connections not yet handed over (closed on stop)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)  # some loops' transports are not subclasses
        keepalive(transport)
        if self._live is not None:
            self._live.add(self)
        self._timer = asyncio.get_running_loop().call_later(self._head_timeout, transport.close)

    def data_received(self, data: bytes) -> None:
        if self._done or self._transport is None:
            return
        self._buf += data
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self._buf) > MAX_HEAD:
                self._transport.close()
            return
        self._done = True
        self._forget()
        transport, head = self._transport, bytes(self._buf[:end])
        if is_spdy_upgrade(head.decode("latin-1").lower()):
            self._spdy_entry(transport, head, bytes(self._buf[end + 4 :]))
            return
        proto = self._http_factory()
        transport.set_protocol(proto)
        proto.connection_made(transport)
        cast(asyncio.Protocol, proto).data_received(bytes(self._buf))
        self._buf.clear()

    def eof_received(self) -> bool | None:
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self._forget()
        self._transport = None

    def close(self) -> None:
        if self._transport is not None and not self._done:
            self._transport.close()

    def _forget(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._live is not None:
            self._live.discard(self)


def keepalive(transport: asyncio.BaseTransport) -> None:
    """TCP keepalive (~1 min to detect a vanished peer): exec and follow streams can idle for hours."""
    sock = transport.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, 30)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, 10)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)
