"""The WebSocket front of an exec/attach session (channel protocols v1/v4/v5 and base64 variants).

The API server forwards these unchanged: v4 from Python clients always, v5 from kubectl when the node
declares ``ExtendWebSocketsToKubelet`` (technotes §1.2, §1.6).

The end of a session is bounded by ``WS_CLOSE_TIMEOUT`` for this front and the WebSocket port-forward
alike: aiohttp's ``close()`` waits with no timeout for our unsent bytes to leave, so a client that
stopped reading would keep the session's task and socket. ``FrontWebSocket`` bounds every close,
including the one aiohttp runs inside ``receive()`` on a protocol error; ``closing_within`` bounds
the last Status and the close together. A client that half-closes and stops reading is heard only
when its TCP goes (asyncio keeps a transport closed on EOF until its buffer has left).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from typing import Any, Final

from aiohttp import WSCloseCode, WSMsgType, web
from aiohttp.abc import AbstractStreamWriter

from vkbridge.kubeletapi.streams.channels import (
    CLOSE,
    ERROR,
    RESIZE,
    STDERR,
    STDIN,
    STDOUT,
    V5,
    WS_MAX_MESSAGE,
    ChannelError,
    StreamOptions,
    decode_ws,
    encode_ws,
    error_payload,
)
from vkbridge.kubeletapi.streams.poolstream import aborting_after, closed_within
from vkbridge.kubeletapi.streams.relay import ExecFront, Inbound

__all__ = ["WS_CLOSE_TIMEOUT", "FrontWebSocket", "WsExecFront", "closing_within"]

# A WebSocket's last writes and close get this long, as the SPDY front's CLOSE_GRACE: aiohttp's close()
# drains our unsent bytes first (no timeout), then waits for the client's CLOSE (10 s).
WS_CLOSE_TIMEOUT: Final = 5.0


def closing_within(transport: asyncio.Transport | None) -> contextlib.AbstractAsyncContextManager[None]:
    """Run a WebSocket's last writes and close within WS_CLOSE_TIMEOUT; else abort its connection.

    The pool side's close shares the mechanism (``aborting_after``), with its own bound.
    """
    return aborting_after(transport, WS_CLOSE_TIMEOUT)


class FrontWebSocket(web.WebSocketResponse):
    """A kubelet-side WebSocket (exec, attach, port-forward) whose every close is bounded.

    ``autoclose`` off: the client's CLOSE ends the reading at once (the relay then ends the session
    and this close answers it), not after aiohttp's own answer waited on a client not reading.
    """

    def __init__(self, protocols: Iterable[str] = ()) -> None:
        super().__init__(protocols=protocols, autoclose=False, autoping=True, max_msg_size=WS_MAX_MESSAGE)
        self._front_transport: asyncio.Transport | None = None

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter:
        self._front_transport = request.transport
        return await super().prepare(request)

    async def close(self, *, code: int = WSCloseCode.OK, message: bytes = b"", drain: bool = True) -> bool:
        closing = super().close(code=code, message=message, drain=drain)
        return await closed_within(closing, self._front_transport, WS_CLOSE_TIMEOUT)


class WsExecFront(ExecFront):
    """``transport`` is the request's: what is aborted when the end of the session is not done in time."""

    def __init__(
        self,
        ws: web.WebSocketResponse,
        protocol: str,
        opts: StreamOptions,
        transport: asyncio.Transport | None,
    ) -> None:
        self.protocol = protocol
        self._ws = ws
        self._transport = transport
        self._opts = opts
        self._gone = False

    async def start(self) -> None:
        """Kubernetes servers open with an empty message on the lowest writable channel."""
        first = STDOUT if self._opts.stdout else STDERR if self._opts.stderr else ERROR
        await self._send(first, b"")

    async def receive(self) -> Inbound:
        while not self._gone:
            msg = await self._ws.receive()
            if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                if msg.type in (WSMsgType.PING, WSMsgType.PONG):
                    continue
                self._gone = True  # CLOSE, CLOSING, CLOSED, ERROR
                break
            try:
                channel, data = decode_ws(self.protocol, msg.data)
            except ChannelError:
                continue
            if channel == STDIN and data:
                return Inbound("stdin", data)
            if channel == RESIZE and data:
                return Inbound("resize", data)
            if channel == CLOSE and self.protocol == V5 and data[:1] == bytes([STDIN]):
                return Inbound("stdin_eof")
        return Inbound("gone")

    async def _send(self, channel: int, data: bytes) -> None:
        if self._ws.closed:
            return
        msg = encode_ws(self.protocol, channel, data)
        with contextlib.suppress(ConnectionError):
            if isinstance(msg, str):
                await self._ws.send_str(msg)
            else:
                await self._ws.send_bytes(msg)

    async def send(self, channel: int, data: bytes) -> None:
        if channel == STDERR and not self._opts.stderr:
            channel = STDOUT  # a TTY merges stderr into stdout
        await self._send(channel, data)

    async def finish(self, status: dict[str, Any]) -> None:
        async with closing_within(self._transport):
            payload = error_payload(self.protocol, status)
            if payload is not None:
                await self._send(ERROR, payload)
            await self._ws.close()

    async def abort(self) -> None:
        async with closing_within(self._transport):
            await self._ws.close()
