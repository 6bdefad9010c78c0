"""The pool side of an exec/attach session, whatever carries it (WebSocket or SPDY/3.1).

The relay speaks only this interface: stdin, stdin EOF and resizes go in; ``(channel, payload)``
messages come out (1 stdout, 2 stderr, 3 the Status) until the remote command ended.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from typing import Final

import aiohttp

from vkbridge.kubeletapi.streams.channels import CLOSE, RESIZE, STDIN, V5

__all__ = ["DialError", "PoolStream", "WsPoolStream"]

_CHUNK: Final = 32 * 1024


class DialError(Exception):
    """The pool refused or failed the stream; ``status`` is the HTTP status to answer with."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class PoolStream(abc.ABC):
    protocol: str
    transport: str  # "websocket" or "spdy", for logs

    @abc.abstractmethod
    async def send_stdin(self, data: bytes) -> None: ...

    @abc.abstractmethod
    async def close_stdin(self) -> None: ...

    @abc.abstractmethod
    async def resize(self, size_json: bytes) -> None: ...

    @abc.abstractmethod
    def messages(self) -> AsyncIterator[tuple[int, bytes]]:
        """Output until the session ended; raises ConnectionError-like errors on failure."""

    @abc.abstractmethod
    def end_reason(self) -> str:
        """How the stream ended, for the Status when the pool sent none."""

    @abc.abstractmethod
    async def close(self) -> None: ...


class WsPoolStream(PoolStream):
    """``v5.channel.k8s.io`` (or v4 from old pools) over an aiohttp WebSocket."""

    transport = "websocket"

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self._ws = ws
        self.protocol = ws.protocol or ""

    async def send_stdin(self, data: bytes) -> None:
        for i in range(0, len(data), _CHUNK):
            await self._ws.send_bytes(bytes([STDIN]) + data[i : i + _CHUNK])

    async def close_stdin(self) -> None:
        if self.protocol == V5:  # v4 has no way to say "EOF on stdin"
            await self._ws.send_bytes(bytes([CLOSE, STDIN]))

    async def resize(self, size_json: bytes) -> None:
        await self._ws.send_bytes(bytes([RESIZE]) + size_json)

    async def messages(self) -> AsyncIterator[tuple[int, bytes]]:
        async for msg in self._ws:
            if msg.type == aiohttp.WSMsgType.BINARY and msg.data:
                yield msg.data[0], bytes(msg.data[1:])

    def end_reason(self) -> str:
        return f"WebSocket close code {self._ws.close_code}"

    async def close(self) -> None:
        await self._ws.close()
