"""A minimal raw-JSON Kubernetes client on aiohttp, configured from a kubeconfig file.

The fake kubelet deliberately avoids kubernetes_asyncio and vkbridge code: it must behave like an
independent node agent, and raw dicts keep 5,000-pod watches cheap.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import random
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

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


@dataclass(frozen=True)
class Kubeconfig:
    server: str
    ca_pem: bytes
    cert_pem: bytes | None
    key_pem: bytes | None
    token: str | None


def _data_or_file(entry: Mapping[str, Any], key: str, base: Path) -> bytes | None:
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return (base / str(entry[key])).read_bytes()
    return None


def load_kubeconfig(path: Path) -> Kubeconfig:
    doc = yaml.safe_load(path.read_text())
    ctx_name = doc.get("current-context") or doc["contexts"][0]["name"]
    ctx = next(c["context"] for c in doc["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in doc["clusters"] if c["name"] == ctx["cluster"])
    user: dict[str, Any] = next(
        (u["user"] for u in doc.get("users") or [] if u["name"] == ctx.get("user")), {}
    )
    user = user or {}
    if cluster.get("insecure-skip-tls-verify"):
        raise ValueError("refusing a kubeconfig with insecure-skip-tls-verify")
    base = path.parent
    ca = _data_or_file(cluster, "certificate-authority", base)
    if ca is None:
        raise ValueError("kubeconfig has no certificate-authority; TLS must be verified")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = (base / user["tokenFile"]).read_text().strip()
    return Kubeconfig(
        server=str(cluster["server"]).rstrip("/"),
        ca_pem=ca,
        cert_pem=_data_or_file(user, "client-certificate", base),
        key_pem=_data_or_file(user, "client-key", base),
        token=token,
    )


def load_cert_chain(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """ssl only loads chains from files: write them to a private temp dir and remove it at once."""
    with tempfile.TemporaryDirectory(prefix="fkl-tls-") as tmp:
        cert = Path(tmp) / "tls.crt"
        key = Path(tmp) / "tls.key"
        cert.write_bytes(cert_pem)
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key_pem)
        ctx.load_cert_chain(cert, key)


def client_ssl_context(cfg: Kubeconfig) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=cfg.ca_pem.decode())
    if cfg.cert_pem and cfg.key_pem:
        load_cert_chain(ctx, cfg.cert_pem, cfg.key_pem)
    return ctx


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

    def __init__(self, cfg: Kubeconfig, *, connections: int = 100) -> None:
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
