"""Exec/attach streams to the pool API server with the pool client's identity.

Why not through KubeClient: streams need an upgraded connection. The identity is read from
``pool.credentials`` at every dial, so a hot-swapped certificate or server is used by the next exec
(running ones keep theirs, as client-go's do). TLS is always verified; a token file is re-read at
most once a minute, by the same ``TokenSource`` as KubeClient's.

WebSocket ``v5.channel.k8s.io`` is tried first; when the pool answers 403 (Liqo's pool-side role
grants ``create`` on ``pods/exec`` but not the ``get`` a WebSocket GET needs) we use SPDY/3.1 POST,
as Liqo's virtual kubelet does, and keep doing so for a while without asking again.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from collections.abc import Callable, Sequence
from typing import Final

import aiohttp

from vkbridge.kube.client import KubeClient
from vkbridge.kube.kubeconfig import Credentials, ssl_context
from vkbridge.kube.tokensource import TokenSource
from vkbridge.kubeletapi.streams.channels import SPDY_PROTOCOLS, V4, V5, WS_MAX_MESSAGE, StreamOptions
from vkbridge.kubeletapi.streams.poolstream import (
    WS_AUTOCLOSE,
    DialError,
    PoolStream,
    PoolWebSocket,
    WsPoolStream,
)
from vkbridge.kubeletapi.streams.spdyclient import spdy_dial
from vkbridge.logs import get_logger

__all__ = ["GENERIC_REFUSAL", "DialError", "PoolDialer"]

log = get_logger("vkbridge.kubeletapi.pooldial")

DIAL_TIMEOUT: Final = 30.0
HEARTBEAT: Final = 30.0
WS_FORBIDDEN_MEMORY: Final = 600.0
GENERIC_REFUSAL: Final = "the pool API server refused the stream"


class PoolDialer:
    """Dials remote-command streams on the pool API server; one instance per pool client."""

    def __init__(
        self,
        pool: KubeClient,
        *,
        user_agent: str = "vkbridge/0.1.0",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._user_agent = user_agent
        self._clock = clock
        self._session: aiohttp.ClientSession | None = None
        self._creds: Credentials | None = None
        self._ssl: ssl.SSLContext | None = None
        self._tokens = TokenSource(pool.credentials, "pool streams", clock)  # renewed with each identity
        self._ws_forbidden_until = 0.0
        self.dials: dict[str, int] = {"websocket": 0, "spdy": 0}

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _context(self, creds: Credentials) -> ssl.SSLContext:
        if creds is not self._creds or self._ssl is None:
            self._ssl = ssl_context(creds)
            self._creds = creds
            self._tokens = TokenSource(creds, "pool streams", self._clock)
            self._ws_forbidden_until = 0.0  # a new identity may have other rights
        return self._ssl

    async def _headers(self) -> dict[str, str]:
        return {"User-Agent": self._user_agent, **await self._tokens.auth_headers()}

    async def identity(self) -> tuple[Credentials, ssl.SSLContext, dict[str, str]]:
        """The pool's credentials, TLS context and auth headers for one dial (port-forward's too)."""
        creds = self._pool.credentials
        return creds, self._context(creds), await self._headers()

    async def open(self, path: str, params: Sequence[tuple[str, str]], opts: StreamOptions) -> PoolStream:
        """An open session; DialError with the HTTP status to show the user when it cannot be had."""
        creds = self._pool.credentials
        ctx = self._context(creds)
        headers = await self._headers()
        if self._clock() >= self._ws_forbidden_until:
            try:
                return await self._ws(creds, ctx, headers, path, params)
            except DialError as exc:
                if exc.status != 403:
                    raise
                self._ws_forbidden_until = self._clock() + WS_FORBIDDEN_MEMORY
                log.info("the pool forbids WebSocket exec to this identity; using SPDY/3.1")
        self.dials["spdy"] += 1
        return await spdy_dial(
            creds.server,
            ctx,
            path=path,
            params=params,
            protocols=SPDY_PROTOCOLS[:2],
            opts=opts,
            headers=headers,
            server_hostname=creds.tls_server_name,
            proxy_url=creds.proxy_url,
            timeout=DIAL_TIMEOUT,
        )

    async def _ws(
        self,
        creds: Credentials,
        ctx: ssl.SSLContext,
        headers: dict[str, str],
        path: str,
        params: Sequence[tuple[str, str]],
    ) -> PoolStream:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=15.0),
                trust_env=False,
                ws_response_class=PoolWebSocket,
            )
        self.dials["websocket"] += 1
        url = "wss://" + creds.server.removeprefix("https://") + path
        try:
            async with asyncio.timeout(DIAL_TIMEOUT):
                ws = await self._session.ws_connect(
                    url,
                    params=list(params),
                    protocols=(V5, V4),
                    headers=headers,
                    ssl=ctx,
                    heartbeat=HEARTBEAT,
                    max_msg_size=WS_MAX_MESSAGE,
                    autoclose=WS_AUTOCLOSE,
                    autoping=True,
                    proxy=creds.proxy_url or None,
                    server_hostname=creds.tls_server_name or None,
                )
        except aiohttp.WSServerHandshakeError as exc:
            status = exc.status or 502
            raise DialError(status, f"{GENERIC_REFUSAL} (HTTP {status})") from None
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            raise DialError(502, f"cannot reach the pool API server: {type(exc).__name__}: {exc}") from exc
        if not isinstance(ws, PoolWebSocket):  # the session's ws_response_class: every close bounded
            raise TypeError(f"the pool session made a {type(ws).__name__}")
        return WsPoolStream(ws)
