"""A minimal Kubernetes API client over aiohttp, raw JSON dicts in and out.

The emulator plays Liqo's controllers, so it must not share code with vkbridge: this is its own client.
TLS is always verified against the kubeconfig's CA (e2e.kubeconfig refuses a kubeconfig asking to skip it).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import aiohttp

from e2e.kubeconfig import Credentials, client_ssl_context, read_kubeconfig

log = logging.getLogger(__name__)

Obj = dict[str, Any]

_CONNECT_TIMEOUT_S = 10.0
_REQUEST_TIMEOUT_S = 30.0


class ApiError(Exception):
    """A non-2xx answer from the API server, with the Status object's reason and message."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"


class WatchExpired(Exception):
    """The watch's resourceVersion is too old (410 Gone): the caller must list again."""


def api_path(
    gv: str, plural: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    """REST path: gv "v1" is the core group; namespace None means cluster-scoped or all namespaces."""
    p = "/api/v1" if gv == "v1" else f"/apis/{gv}"
    if namespace:
        p += f"/namespaces/{quote(namespace)}"
    p += f"/{plural}"
    if name:
        p += f"/{quote(name)}"
    if sub:
        p += f"/{sub}"
    return p


class Kube:
    """One API server; every call raises ApiError on failure."""

    def __init__(self, creds: Credentials, *, name: str = "kube") -> None:
        self.creds = creds
        self.name = name
        self._ssl = client_ssl_context(creds)
        self._session: aiohttp.ClientSession | None = None
        self._watch_session: aiohttp.ClientSession | None = None

    @classmethod
    def from_kubeconfig(cls, src: Path | str | Mapping[str, Any], *, name: str = "kube") -> Kube:
        return cls(read_kubeconfig(src), name=name)

    def _headers(self) -> dict[str, str]:
        h = {"Accept": "application/json"}
        if self.creds.token:
            h["Authorization"] = f"Bearer {self.creds.token}"
        return h

    def _sess(self, watch: bool = False) -> aiohttp.ClientSession:
        # Watches get their own pool so a pile of long polls never starves writes.
        attr = "_watch_session" if watch else "_session"
        s: aiohttp.ClientSession | None = getattr(self, attr)
        if s is None or s.closed:
            s = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=50),
                headers=self._headers(),
                timeout=aiohttp.ClientTimeout(total=None, connect=_CONNECT_TIMEOUT_S),
            )
            setattr(self, attr, s)
        return s

    async def close(self) -> None:
        for s in (self._session, self._watch_session):
            if s is not None:
                await s.close()

    async def __aenter__(self) -> Kube:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
        timeout: float = _REQUEST_TIMEOUT_S,
    ) -> Obj:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else None
        async with self._sess().request(
            method,
            self.creds.server + path,
            data=data,
            params=params,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            raw = await resp.read()
            if resp.status >= 300:
                raise _error(resp.status, raw)
            return json.loads(raw) if raw else {}

    async def get(self, path: str) -> Obj:
        return await self.request("GET", path)

    async def get_or_none(self, path: str) -> Obj | None:
        try:
            return await self.get(path)
        except ApiError as e:
            if e.not_found:
                return None
            raise

    async def list(self, path: str, *, label_selector: str | None = None) -> Obj:
        params = {"labelSelector": label_selector} if label_selector else None
        return await self.request("GET", path, params=params)

    async def create(self, path: str, body: Obj) -> Obj:
        return await self.request("POST", path, body=body)

    async def update(self, path: str, body: Obj) -> Obj:
        return await self.request("PUT", path, body=body)

    async def patch(self, path: str, body: Any, *, kind: str = "merge") -> Obj:
        ct = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[kind]
        return await self.request("PATCH", path, body=body, content_type=ct)

    async def delete(self, path: str, *, uid: str | None = None, grace: int | None = None) -> bool:
        """Delete; True when something was deleted, False when it was already gone."""
        body: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            body["preconditions"] = {"uid": uid}
        if grace is not None:
            body["gracePeriodSeconds"] = grace
        try:
            await self.request("DELETE", path, body=body)
        except ApiError as e:
            if e.not_found:
                return False
            raise
        return True

    async def ensure(self, path: str, body: Obj) -> Obj:
        """Create unless it already exists; returns the stored object either way."""
        try:
            return await self.create(path, body)
        except ApiError as e:
            if not e.already_exists:
                raise
        return await self.get(f"{path}/{quote(body['metadata']['name'])}")

    async def read_modify_write(self, path: str, change: Callable[[Obj], Obj], *, sub: str = "") -> Obj:
        """PUT ``change(current)`` to path (or its subresource); a lost race (409 Conflict) reads again."""
        for _ in range(5):
            try:
                return await self.update(f"{path}/{sub}" if sub else path, change(await self.get(path)))
            except ApiError as e:
                if not e.conflict:
                    raise
        raise RuntimeError(f"could not update {path}: conflicts")

    async def create_or_update(self, collection: str, body: Obj, merge: Callable[[Obj], Obj]) -> Obj:
        """Create, or PUT ``merge(current)`` over the existing object."""
        try:
            return await self.create(collection, body)
        except ApiError as e:
            if not e.already_exists:
                raise
        return await self.read_modify_write(f"{collection}/{quote(body['metadata']['name'])}", merge)

    async def watch(
        self,
        path: str,
        resource_version: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_s: int = 240,
    ) -> AsyncIterator[Obj]:
        """Yield watch events until the server closes the stream; WatchExpired on 410."""
        params = {
            "watch": "1",
            "resourceVersion": resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_s),
        }
        if label_selector:
            params["labelSelector"] = label_selector
        if field_selector:
            params["fieldSelector"] = field_selector
        async with self._sess(watch=True).get(
            self.creds.server + path,
            params=params,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=timeout_s + 30),
        ) as resp:
            if resp.status == 410:
                raise WatchExpired(path)
            if resp.status >= 300:
                raise _error(resp.status, await resp.read())
            buf = b""
            async for chunk in resp.content.iter_any():
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    if ev.get("type") == "ERROR":
                        st = ev.get("object", {})
                        if st.get("code") == 410:
                            raise WatchExpired(path)
                        raise ApiError(st.get("code", 500), st.get("reason", ""), st.get("message", ""))
                    yield ev


def _error(status: int, raw: bytes) -> ApiError:
    reason, message = "", raw[:300].decode(errors="replace")
    with contextlib.suppress(ValueError):
        st = json.loads(raw)
        reason, message = st.get("reason", ""), st.get("message", message)
    return ApiError(status, reason, message)


async def wait_for(predicate: Any, *, timeout: float, interval: float = 0.2, what: str = "condition") -> Any:
    """Poll an async predicate until it returns something truthy (used by fixtures and tests)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last_exc: BaseException | None = None
    while True:
        try:
            result = await predicate()
            if result:
                return result
        except ApiError as e:  # transient answers while things settle
            last_exc = e
        if loop.time() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}; last error: {last_exc}")
        await asyncio.sleep(interval)
