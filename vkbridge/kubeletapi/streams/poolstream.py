"""The pool side of an exec/attach session, whatever carries it (WebSocket or SPDY/3.1).

The relay speaks only this interface: stdin, stdin EOF and resizes go in; ``(channel, payload)``
messages come out (1 stdout, 2 stderr, 3 the Status) until the remote command ended.

Every close of the pool WebSocket is bounded by ``POOL_CLOSE_TIMEOUT`` (``PoolWebSocket``): ours, and
the one aiohttp runs inside ``receive()`` on a protocol error from the pool. The pool is semi-trusted
and sits behind the tunnel. ``aborting_after`` and ``closed_within`` are shared with the kubelet-side
fronts. Not covered: a pool that half-closes (FIN) and stops reading; asyncio keeps such a transport
until its buffer has left, so the end is heard only when the pool's TCP goes (Kubernetes servers do
not half-close a WebSocket).
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable
from typing import Any, Final

import aiohttp

from vkbridge.kubeletapi.streams.channels import CLOSE, RESIZE, STDIN, V5

__all__ = [
    "POOL_CLOSE_TIMEOUT",
    "WS_AUTOCLOSE",
    "DialError",
    "PoolStream",
    "PoolWebSocket",
    "WsPoolStream",
    "aborting_after",
    "closed_within",
]

_CHUNK: Final = 32 * 1024

# aiohttp's client close() queues CLOSE, waiting with no timeout while the transport is paused (a pool
# that stopped reading), then reads until the pool's CLOSE with 10 s per message: a pool that keeps
# writing never lets it end. As the kubelet-side WS_CLOSE_TIMEOUT.
POOL_CLOSE_TIMEOUT: Final = 5.0

# The pool WebSocket's ``autoclose``, off: aiohttp would answer the pool's CLOSE inside receive(), and
# even bounded that answer waits for our unsent stdin; the iteration ends at the CLOSE at once instead,
# and the relay's close() answers it.
WS_AUTOCLOSE: Final = False


@contextlib.asynccontextmanager
async def aborting_after(transport: asyncio.Transport | None, seconds: float) -> AsyncIterator[None]:
    """Run a WebSocket's last writes and close within ``seconds``; else abort its connection.

    Aborted, not closed: aiohttp closes the transport when its close() is interrupted, and a closed
    transport keeps the socket until its buffer has left (over TLS, until the shutdown times out).
    An interruption (cancellation, a failure) aborts too, and is raised on.
    """
    deadline = asyncio.timeout(seconds)
    completed = False
    try:
        async with deadline:
            yield
        completed = True
    except TimeoutError:
        if not deadline.expired():
            raise
    finally:
        if not completed and transport is not None:
            transport.abort()


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


class PoolWebSocket(aiohttp.ClientWebSocketResponse):
    """The pool WebSocket (``ws_response_class`` of the dialer's session), whose close is bounded.

    aiohttp's close queues CLOSE, waiting with no timeout while the transport is paused, then reads
    until the pool's CLOSE; it runs inside ``receive()`` too (on a protocol error, on EOF), where no
    caller can bound it. Past ``POOL_CLOSE_TIMEOUT``, or when our unsent bytes do not leave (aiohttp
    only closes the transport, which keeps the socket while the pool does not read), it aborts.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bounded_transport = _transport_of(self)  # taken while open: aiohttp drops it when closing

    async def close(self, *, code: int = aiohttp.WSCloseCode.OK, message: bytes = b"") -> bool:
        closing = super().close(code=code, message=message)
        return await closed_within(closing, self._bounded_transport, POOL_CLOSE_TIMEOUT)


class WsPoolStream(PoolStream):
    """``v5.channel.k8s.io`` (or v4 from old pools) over a ``PoolWebSocket``."""

    transport = "websocket"

    def __init__(self, ws: PoolWebSocket) -> None:
        self._ws = ws
        self.protocol = ws.protocol or ""
        self._pool_code: int | None = None

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
        self._pool_code = self._ws.close_code  # the pool's: an aborted close of ours would say 1006

    def end_reason(self) -> str:
        code = self._ws.close_code if self._pool_code is None else self._pool_code
        return f"WebSocket close code {code}"

    async def close(self) -> None:
        await self._ws.close()


async def closed_within(close: Awaitable[bool], transport: asyncio.Transport | None, seconds: float) -> bool:
    """An aiohttp WebSocket close, and the departure of our unsent bytes, within ``seconds``; else the
    connection is aborted. aiohttp's result, or True when aborted (the connection is gone)."""
    closed = True
    async with aborting_after(transport, seconds):
        closed = await close
        await _all_sent(transport)
    return closed


async def _all_sent(transport: asyncio.Transport | None) -> None:
    """Until what we wrote has left: aiohttp's close() only closes the transport, which then keeps the
    socket as long as the peer does not read its rest. Polled: only the protocol (aiohttp's) hears
    when a closing transport's buffer has left."""
    while transport is not None and _unsent(transport) > 0:  # noqa: ASYNC110
        await asyncio.sleep(0.05)


def _unsent(transport: asyncio.Transport) -> int:
    """The bytes ``transport`` still holds; 0 once its connection is gone.

    asyncio's TLS transport (3.11, the image's) drops its protocol on a close() after it was closed
    or lost its connection, and every call on it raises AttributeError then: aiohttp closes it again
    at every normal end (the peer closed first, the connection's release). Nothing more can be told
    or aborted through it; what the TLS layer still holds ends with asyncio's SSL shutdown timeout.
    """
    try:
        return transport.get_write_buffer_size()
    except AttributeError:
        return 0


def _transport_of(ws: aiohttp.ClientWebSocketResponse) -> asyncio.Transport | None:
    """The connection's transport. aiohttp has no public way from a client WebSocket to it: its
    response (private) holds the connection. Looked up leniently, so a renamed attribute costs the
    abort, not the stream; the unit tests of the close would fail then.
    """
    conn = getattr(getattr(ws, "_response", None), "connection", None)
    transport = getattr(conn, "transport", None)
    return transport if isinstance(transport, asyncio.Transport) else None
