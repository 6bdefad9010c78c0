"""The bench's own API access: an event loop in a thread, a raw-JSON admin client per plane, watches
that stamp each event when its bytes arrive (before parsing), and first-seen bookkeeping per pod.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import yaml

from e2e.controlplane import ControlPlane

T = TypeVar("T")


Obj = dict[str, Any]


USER_AGENT = "vkbridge-bench/1"


class AsyncLoop:
    """An event loop in a daemon thread: watches and paced writers run there, the script stays sync."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="bench-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(cancel_all(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:300]}")
        self.status = status


class Api:
    """The bench's own admin client for one plane (raw JSON, its own user agent, no rate limit)."""

    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        cfg = yaml.safe_load(Path(plane.admin_kubeconfig).read_text())
        user = cfg["users"][0]["user"]
        workdir.mkdir(parents=True, exist_ok=True)
        cert, key = workdir / f"{plane.name}-bench.crt", workdir / f"{plane.name}-bench.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.touch(mode=0o600)
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        self.ssl = ssl.create_default_context(cadata=plane.ca_pem.decode())
        self.ssl.load_cert_chain(cert, key)
        self.base = plane.url
        self.name = plane.name
        self._session: aiohttp.ClientSession | None = None
        self._watch_session: aiohttp.ClientSession | None = None

    def _sess(self, watch: bool = False) -> aiohttp.ClientSession:
        attr = "_watch_session" if watch else "_session"
        s: aiohttp.ClientSession | None = getattr(self, attr)
        if s is None or s.closed:
            s = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.ssl, limit=0 if watch else 128),
                headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=None, connect=10),
            )
            setattr(self, attr, s)
        return s

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> Obj:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else None
        async with self._sess().request(
            method, self.base + path, data=data, headers=headers, timeout=aiohttp.ClientTimeout(total=60)
        ) as resp:
            raw = await resp.read()
            if resp.status >= 300:
                raise ApiError(resp.status, raw.decode(errors="replace"))
            out: Obj = json.loads(raw) if raw else {}
            return out

    async def watch(
        self,
        path: str,
        handler: Callable[[str, Obj, float], None],
        params: Mapping[str, str] | None = None,
    ) -> None:
        """List, then watch from the list's resourceVersion forever; handler(type, obj, arrival)."""
        rv: str | None = None
        while True:
            if rv is None:
                q = urlencode(dict(params or {}))
                lst = await self.request("GET", f"{path}?{q}" if q else path)
                rv = str(lst["metadata"]["resourceVersion"])
                now = time.monotonic()
                for item in lst.get("items") or []:
                    handler("ADDED", item, now)
            q = urlencode(
                {
                    **dict(params or {}),
                    "watch": "1",
                    "resourceVersion": rv,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "900",
                }
            )
            try:
                rv = await self._stream(f"{path}?{q}", handler, rv)
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.2)

    async def _stream(self, url: str, handler: Callable[[str, Obj, float], None], rv: str) -> str | None:
        async with self._sess(watch=True).get(self.base + url) as resp:
            if resp.status == 410:
                return None
            if resp.status >= 300:
                raise ApiError(resp.status, (await resp.read()).decode(errors="replace"))
            buf = b""
            async for chunk in resp.content.iter_any():
                arrival = time.monotonic()
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line, buf = buf[:nl], buf[nl + 1 :]
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        return None if obj.get("code") == 410 else rv
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if ev.get("type") != "BOOKMARK":
                        handler(str(ev.get("type")), obj, arrival)
        return rv

    async def close(self) -> None:
        for s in (self._session, self._watch_session):
            if s is not None:
                await s.close()


def phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def name_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


@dataclass
class FirstSeen:
    """First arrival time of a condition per object name (a thread-safe enough dict under the GIL)."""

    at: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str, t: float) -> None:
        if name not in self.at:
            self.at[name] = t

    def __len__(self) -> int:
        return len(self.at)

    def times(self) -> list[float]:
        return sorted(self.at.values())


def watch_phase(
    api: Api,
    loop: AsyncLoop,
    path: str,
    running: FirstSeen,
    *,
    bound: FirstSeen | None = None,
    added: FirstSeen | None = None,
    params: Mapping[str, str] | None = None,
) -> Future[None]:
    """Stamp, per pod name, the first sight of the object, of spec.nodeName, and of phase Running."""

    def handle(etype: str, obj: Obj, t: float) -> None:
        n = name_of(obj)
        if added is not None and etype != "DELETED":
            added.mark(n, t)
        if bound is not None and (obj.get("spec") or {}).get("nodeName"):
            bound.mark(n, t)
        if phase(obj) == "Running":
            running.mark(n, t)

    return loop.submit(api.watch(path, handle, params))


async def gather_limited(coros: Iterable[Awaitable[T]], limit: int) -> list[T | BaseException]:
    sem = asyncio.Semaphore(limit)

    async def one(c: Awaitable[T]) -> T | BaseException:
        async with sem:
            try:
                return await c
            except Exception as exc:
                return exc

    return await asyncio.gather(*(one(c) for c in coros))
