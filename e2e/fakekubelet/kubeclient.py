"""A minimal raw-JSON Kubernetes client on aiohttp, configured from a kubeconfig file.

The fake kubelet deliberately avoids kubernetes_asyncio and vkbridge code: it must behave like an
independent node agent, and raw dicts keep 5,000-pod watches cheap.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp

from e2e.kubeconfig import Credentials, client_ssl_context

log = logging.getLogger(__name__)

Json = dict[str, Any]
MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"


class ApiError(Exception):
    def __init__(self, status: int, body: Any, method: str, path: str) -> None:
        reason = body.get("message") if isinstance(body, dict) else str(body)[:200]
        super().__init__(f"{method} {path}: HTTP {status}: {reason}")
        self.status = status
        self.body = body


def _params(params: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for k, v in (params or {}).items():
        if v is None:
            continue
        if isinstance(v, bool):
            v = "true" if v else "false"
        out.append((k, str(v)))
    return out


class KubeClient:
    """JSON requests with capped retries on transient failures, and line-delimited watches."""

    RETRIES = 6

    def __init__(self, cfg: Credentials, *, connections: int = 100) -> None:
        self._cfg = cfg
        self._ssl = client_ssl_context(cfg)
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    @property
    def session(self) -> aiohttp.ClientSession:
        if self._session is None:
            headers = {"Accept": "application/json", "User-Agent": "vkbridge-fakekubelet/0.1"}
            if self._cfg.token:
                headers["Authorization"] = f"Bearer {self._cfg.token}"
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=self._connections),
                headers=headers,
                read_bufsize=1 << 20,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Json:
        delay = 0.2
        for attempt in range(self.RETRIES):
            try:
                async with self.session.request(
                    method,
                    self._cfg.server + path,
                    params=_params(params),
                    data=None if body is None else json.dumps(body),
                    headers={"Content-Type": content_type} if body is not None else None,
                    timeout=aiohttp.ClientTimeout(total=timeout),
                ) as resp:
                    text = await resp.text()
                    try:
                        payload = json.loads(text) if text else {}
                    except ValueError:
                        payload = text
                    if resp.status < 300:
                        return payload if isinstance(payload, dict) else {}
                    transient = resp.status == 429 or resp.status >= 500
                    if not transient or attempt == self.RETRIES - 1:
                        raise ApiError(resp.status, payload, method, path)
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                if attempt == self.RETRIES - 1:
                    raise
                log.debug("%s %s failed (%s); retrying", method, path, exc)
            await asyncio.sleep(delay * (0.5 + random.random()))
            delay = min(delay * 2, 3.0)
        raise AssertionError("unreachable")

    async def watch(self, path: str, params: Mapping[str, Any]) -> AsyncIterator[Json]:
        """One watch request; yields events until the server ends it. Raises ApiError on HTTP errors."""
        query = {**params, "watch": True, "allowWatchBookmarks": True}
        async with self.session.get(
            self._cfg.server + path,
            params=_params(query),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10, sock_read=None),
        ) as resp:
            if resp.status >= 300:
                text = await resp.text()
                try:
                    payload: Any = json.loads(text)
                except ValueError:
                    payload = text
                raise ApiError(resp.status, payload, "WATCH", path)
            while True:
                line = await resp.content.readline()
                if not line:
                    return
                if line.strip():
                    yield json.loads(line)
