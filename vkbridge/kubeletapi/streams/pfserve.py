"""The WebSocket side of ``/portForward``: what a kubelet serves to clients that speak WebSocket to it.

Kept out of server.py: the channel framing is ``v4.channel.k8s.io`` (binary) or
``v4.base64.channel.k8s.io``, or binary without a subprotocol, with the ports in ``?port=``; the
pool side is the same SPDY relay the API server's SPDY requests get (portforward.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Final

import aiohttp
from aiohttp import web

from vkbridge.kubeletapi.streams.channels import (
    V4,
    V4_B64,
    ChannelError,
    decode_ws,
    encode_ws,
    split_protocols,
)
from vkbridge.kubeletapi.streams.poolstream import DialError
from vkbridge.kubeletapi.streams.portforward import PoolPortForward, PortForwardError, WsPortForward, ws_ports
from vkbridge.kubeletapi.streams.route import StreamRoute
from vkbridge.kubeletapi.streams.wsfront import FrontWebSocket
from vkbridge.logs import get_logger

__all__ = ["WS_PORTFORWARD_PROTOCOLS", "websocket"]

log = get_logger("vkbridge.kubeletapi.portforward")

WS_PORTFORWARD_PROTOCOLS: Final = (V4, V4_B64)

Dial = Callable[[StreamRoute], Awaitable[PoolPortForward]]


async def websocket(request: web.Request, route: StreamRoute, dial: Dial) -> web.StreamResponse:
    """Answer one WebSocket port-forward (or the kubelet's refusal for anything else)."""
    if not web.WebSocketResponse().can_prepare(request).ok:
        return web.Response(
            status=400, text="unable to upgrade: a WebSocket or SPDY/3.1 upgrade request is required\n"
        )
    offered = split_protocols(request.headers.getall("Sec-WebSocket-Protocol", []))
    protocol = next((p for p in offered if p in WS_PORTFORWARD_PROTOCOLS), "")
    if offered and not protocol:
        return web.Response(status=400, text=f"unable to negotiate a port-forward protocol: {offered}\n")
    try:
        ports = ws_ports(request.query.getall("port", []))
    except PortForwardError as exc:
        return web.Response(status=400, text=f"{exc}\n")
    try:
        pool = await dial(route)
    except DialError as exc:
        return web.Response(status=exc.status, text=exc.message + "\n")
    ws = FrontWebSocket(protocols=(protocol,) if protocol else ())
    try:
        await ws.prepare(request)
    except BaseException:
        await pool.close()
        raise

    async def send(channel: int, payload: bytes) -> None:
        message = encode_ws(protocol or V4, channel, payload)
        if isinstance(message, str):
            await ws.send_str(message)
        else:
            await ws.send_bytes(message)

    session = WsPortForward(pool, ports, send)
    outcome = "client left"
    try:
        await session.start()
        outcome = await session.wait(_read_client(ws, protocol or V4, session))
    except (ConnectionError, aiohttp.ClientError) as exc:
        outcome = f"client connection failed: {exc}"
    finally:
        await pool.close()
        with contextlib.suppress(Exception):
            await ws.close()  # bounded: a client that does not read is cut off
    log.info("port-forward ended", pod=f"{route.namespace}/{route.pod}", transport="websocket",
             protocol=protocol or "(none)", ports=",".join(map(str, ports)), outcome=outcome)  # fmt: skip
    return ws


async def _read_client(ws: web.WebSocketResponse, protocol: str, session: WsPortForward) -> None:
    async for msg in ws:
        if msg.type not in (aiohttp.WSMsgType.BINARY, aiohttp.WSMsgType.TEXT):
            continue
        try:
            channel, payload = decode_ws(protocol, msg.data)
        except ChannelError as exc:
            log.warning("ignoring a malformed port-forward message", error=str(exc))
            continue
        await session.client_data(channel, payload)
    await session.client_closed()
