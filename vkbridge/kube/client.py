"""A thin raw-JSON REST client for the Kubernetes API over aiohttp.

Why our own: caches want raw dicts (no generated models), the client certificate must be swappable in
one place, and kubernetes_asyncio has no rate limiter. Two sessions share one ``SSLContext``: watches
and streams hold connections for minutes, so they never queue behind, or starve, ordinary requests.

This module is the transport. Every failure is an ``ApiError`` (``errors.py``), resource types are
``Resource``s (``resources.py``), and the verbs on them (get, list, patch...) are built in ``verbs.py``;
their names are re-exported here (``X as X``) for the callers. Bodies and auth headers are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any, Final, Unpack

import aiohttp
import orjson

from vkbridge.kube.errors import ApiError as ApiError
from vkbridge.kube.errors import StreamEnded, error_from, transport_error, watch_event
from vkbridge.kube.errors import TransportError as TransportError
from vkbridge.kube.errors import WatchExpired as WatchExpired
from vkbridge.kube.errors import is_transport_failure as is_transport_failure
from vkbridge.kube.kubeconfig import Credentials, ssl_context
from vkbridge.kube.ratelimit import TokenBucket
from vkbridge.kube.requestmetrics import APPLY_PATCH as APPLY_PATCH
from vkbridge.kube.requestmetrics import Params, RequestCounter, RequestHistogram, RequestMetrics
from vkbridge.kube.requestmetrics import classify as classify
from vkbridge.kube.resources import CERTIFICATESIGNINGREQUESTS as CERTIFICATESIGNINGREQUESTS
from vkbridge.kube.resources import CONFIGMAPS as CONFIGMAPS
from vkbridge.kube.resources import EVENTS as EVENTS
from vkbridge.kube.resources import LEASES as LEASES
from vkbridge.kube.resources import NAMESPACEMAPS as NAMESPACEMAPS
from vkbridge.kube.resources import NAMESPACES as NAMESPACES
from vkbridge.kube.resources import NODES as NODES
from vkbridge.kube.resources import PODS as PODS
from vkbridge.kube.resources import RENEWS as RENEWS
from vkbridge.kube.resources import RESOURCESLICES as RESOURCESLICES
from vkbridge.kube.resources import SECRETS as SECRETS
from vkbridge.kube.resources import SELFSUBJECTREVIEWS as SELFSUBJECTREVIEWS
from vkbridge.kube.resources import SHADOWPODS as SHADOWPODS
from vkbridge.kube.resources import SUBJECTACCESSREVIEWS as SUBJECTACCESSREVIEWS
from vkbridge.kube.resources import TOKENREVIEWS as TOKENREVIEWS
from vkbridge.kube.resources import VIRTUALNODES as VIRTUALNODES
from vkbridge.kube.resources import Resource as Resource
from vkbridge.kube.tokensource import TokenSource
from vkbridge.kube.verbs import JSON as JSON
from vkbridge.kube.verbs import JSON_PATCH as JSON_PATCH
from vkbridge.kube.verbs import MERGE_PATCH as MERGE_PATCH
from vkbridge.kube.verbs import STRATEGIC_MERGE_PATCH as STRATEGIC_MERGE_PATCH
from vkbridge.kube.verbs import Obj, RequestOptions, ResourceVerbs
from vkbridge.logs import get_logger

# orjson: 3-4x faster than json on watch streams (the hottest path under load), and it shares dict keys
# across documents, so cached objects take less memory.
_loads: Callable[[bytes], Any] = orjson.loads

log = get_logger(__name__)

DEFAULT_TIMEOUT: Final = 60.0
CONNECT_TIMEOUT: Final = 15.0
PING_CONNECT_FACTOR: Final = 3.0
WATCH_OPENED: Final = "vkbridge.io/WatchOpened"  # see KubeClient.watch(announce_open=True)
WATCH_READ_SLACK: Final = 15.0
READ_BUFSIZE: Final = 2**21
_ERROR_BODY_LIMIT: Final = 64 * 1024
# A server (a broken proxy, a hostile pool) could send a body or a watch line without end. One stored object
# is at most ~3 MiB of JSON (kube-apiserver refuses larger request bodies), so a watch line over 16 MiB is
# no event; a body is a list page of at most PAGE_SIZE (500) objects, typically a few MiB, refused at 256.
MAX_BODY_BYTES: Final = 256 * 2**20
MAX_WATCH_LINE_BYTES: Final = 16 * 2**20


async def read_bounded(resp: aiohttp.ClientResponse, limit: int, what: str) -> bytes:
    """The whole (decoded) body, refused past ``limit`` bytes, told by Content-Length or while read."""
    if resp.content_length is not None and resp.content_length > limit:
        raise ApiError(
            resp.status, "ResponseTooLarge", f"{what}: body of {resp.content_length} bytes > {limit}"
        )
    buf = bytearray()
    async for chunk in resp.content.iter_any():
        buf += chunk
        if len(buf) > limit:
            raise ApiError(resp.status, "ResponseTooLarge", f"{what}: body over {limit} bytes")
    return bytes(buf)


def _query(params: Params | None) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for k, v in (params or {}).items():
        if v is None:
            continue
        if isinstance(v, bool):
            out.append((k, "true" if v else "false"))
        elif isinstance(v, str | int | float):
            out.append((k, str(v)))
        else:
            out.extend((k, str(item)) for item in v)
    return out


class _Flight:
    """One request on the wire, which ``KubeClient.abandon_inflight`` can end before its timeout; counted
    by (verb, resource) ``key`` and HTTP ``status`` (None: no answer) when it leaves the wire."""

    __slots__ = ("abandoned", "deadline", "key", "started", "status")

    def __init__(self, key: tuple[str, str]) -> None:
        self.deadline: asyncio.Timeout | None = None
        self.abandoned: str | None = None
        self.key = key
        self.status: int | None = None
        self.started = time.monotonic()


# ---------------------------------------------------------------------------------------------- client


class KubeClient(ResourceVerbs):
    """One API server, one identity (swappable), QPS-limited, raw JSON in and out."""

    def __init__(
        self,
        creds: Credentials,
        *,
        qps: float = 100.0,
        burst: int = 100,
        timeout: float | None = None,
        name: str = "consumer",
        user_agent: str = "vkbridge/0.1.0",
        request_counter: RequestCounter | None = None,
        request_latency: RequestHistogram | None = None,
        throttle_wait: RequestHistogram | None = None,
    ) -> None:
        self.name = name
        # vkbridge_api_requests_total, _request_duration_seconds, _rate_limiter_wait_seconds
        self.requests = RequestMetrics(request_counter, name, request_latency, throttle_wait)
        self.user_agent = user_agent
        self.timeout = DEFAULT_TIMEOUT if timeout is None else timeout
        self.stats: Counter[tuple[str, str]] = Counter()
        self.generation = 0
        self._nudged = asyncio.Event()
        self._creds = creds
        self._ssl = ssl_context(creds)
        self._limiter = TokenBucket(qps, burst)
        self._req: aiohttp.ClientSession | None = None
        self._watch: aiohttp.ClientSession | None = None
        self._tokens = TokenSource(creds, name)
        self._closed = False
        self._inflight: Counter[aiohttp.ClientSession] = Counter()
        self._live_streams: set[aiohttp.ClientResponse] = set()
        self._flights: set[_Flight] = set()
        self._draining: set[asyncio.Task[None]] = set()

    # -- lifecycle

    @property
    def credentials(self) -> Credentials:
        return self._creds

    @property
    def server(self) -> str:
        return self._creds.server

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        self._closed = True
        for task in list(self._draining):
            task.cancel()
        await asyncio.gather(*self._draining, return_exceptions=True)
        old = (self._req, self._watch)
        self._req = self._watch = None
        for s in old:
            if s is not None:
                await s.close()

    def nudge(self) -> None:
        """The server answers again (the pool is back): wake everyone waiting in `pause`."""
        self._nudged.set()
        self._nudged = asyncio.Event()

    async def pause(self, seconds: float) -> None:
        """A retry backoff that ends early on `nudge`: after a long outage, watches backed off to their
        cap must not keep the pool's objects stale for another half minute once it is back."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._nudged.wait()

    async def swap_credentials(self, creds: Credentials) -> None:
        """Switch identity (and maybe server): new SSLContext and sessions, then close the old ones.

        In-flight requests, watches and streams on the old sessions fail with ``TransportError``; the
        caches reconnect from their resourceVersion, so no state is lost (client-go ``CloseAll()``).
        """
        ctx = ssl_context(creds)  # raises before anything changes
        old_req, old_watch = self._req, self._watch
        self._creds = creds
        self._ssl = ctx
        self._tokens = TokenSource(creds, self.name)
        self._req = self._watch = None
        self.generation += 1
        log.info("client credentials swapped", client=self.name, credentials=creds)
        if old_watch is not None:
            # Closing a session leaves a reader already waiting on its connection waiting forever, and one
            # that reads later gets a bare RuntimeError: end every live stream with a transport error first.
            # (No await since the sessions were replaced: every live stream is on the old one.)
            self._end_live_streams("credentials swapped")
            await old_watch.close()
        if old_req is not None:
            # Requests already on the wire finish on their connections (authenticated with a still
            # valid identity); the old session closes once they are done, at most one timeout later.
            task = asyncio.get_running_loop().create_task(self._close_when_idle(old_req))
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)

    async def _close_when_idle(self, session: aiohttp.ClientSession) -> None:
        deadline = time.monotonic() + self.timeout + CONNECT_TIMEOUT
        try:
            while self._inflight[session] > 0:
                if time.monotonic() >= deadline:
                    break
                await asyncio.sleep(0.05)
        finally:
            await session.close()

    def abandon_inflight(self, reason: str, *, streams: bool = True, connections: bool = True) -> int:
        """End every request and stream on the wire now with a ``TransportError`` naming ``reason``, and
        drop every pooled connection.

        For a server that stopped answering (the pinger declared the pool lost): a request on a dead
        connection would hold its worker for its whole timeout (60 s) and a watch would stay silent until
        its cache's inactivity timeout, so a pool back within a minute would find workers still waiting
        and caches stale. When it answers again, the requests and watch openings started meanwhile are
        stuck on connections made into the void: ``streams=False, connections=False`` ends just those.
        Returns how many requests and streams were ended.
        """
        loop = asyncio.get_running_loop()
        flights = [f for f in self._flights if f.abandoned is None]
        for flight in flights:
            flight.abandoned = reason
            assert flight.deadline is not None  # set before the flight is registered
            flight.deadline.reschedule(loop.time())
        ended = len(flights) + (self._end_live_streams(reason) if streams else 0)
        if not connections:
            return ended
        # The idle kept-alive connections are as dead as the busy ones: a request reusing one after the
        # server is back would wait for its timeout. Later requests open new ones on new sessions.
        old = [x for x in (self._req, self._watch) if x is not None]
        self._req = self._watch = None
        for session in old:  # at once, as soon as the abandoned requests have unwound
            task = loop.create_task(self._close_when_idle(session))
            self._draining.add(task)
            task.add_done_callback(self._draining.discard)
        return ended

    def _end_live_streams(self, reason: str) -> int:
        live, self._live_streams = self._live_streams, set()
        for resp in live:
            resp.content.set_exception(StreamEnded(reason))
        return len(live)

    def _sessions(self) -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
        if self._closed:
            raise TransportError(f"{self.name} client is closed", transient=False)
        if self._req is None or self._watch is None:
            headers = {"User-Agent": self.user_agent, "Accept": JSON}
            self._req = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=100),
                headers=headers,
                trust_env=False,
                read_bufsize=READ_BUFSIZE,
            )
            self._watch = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self._ssl, limit=0),
                headers=headers,
                trust_env=False,
                read_bufsize=READ_BUFSIZE,
            )
        return self._req, self._watch

    def _conn_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if self._creds.proxy_url:
            kw["proxy"] = self._creds.proxy_url
        if self._creds.tls_server_name:
            kw["server_hostname"] = self._creds.tls_server_name
        return kw

    # -- core

    async def request(self, method: str, path: str, **options: Unpack[RequestOptions]) -> Obj:
        """One JSON request. PATCH defaults to merge-patch; SSA is ``content_type=APPLY_PATCH``."""
        params = options.get("params")
        body = options.get("body")
        content_type = options.get("content_type")
        timeout = options.get("timeout")
        method = method.upper()
        key = classify(method, path, params, content_type)
        self.stats[key] += 1
        await self._throttled()
        req_session, _ = self._sessions()
        headers = await self._tokens.auth_headers()
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type or (MERGE_PATCH if method == "PATCH" else JSON)
            data = orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)  # 10x json.dumps; same JSON
        total = self.timeout if timeout is None else timeout
        t0 = time.monotonic()
        flight = _Flight(key)
        try:
            async with (
                self._in_flight(req_session, flight),
                req_session.request(
                    method,
                    self._creds.server + path,
                    params=_query(params),
                    data=data,
                    headers=headers,
                    timeout=aiohttp.ClientTimeout(total=total, sock_connect=CONNECT_TIMEOUT),
                    **self._conn_kwargs(),
                ) as resp,
            ):
                status = flight.status = resp.status
                raw = await read_bounded(resp, MAX_BODY_BYTES, f"{method} {path}")
                http_reason = resp.reason or ""
                retry_after = resp.headers.get("Retry-After")
        except Exception as exc:
            if not is_transport_failure(exc):
                raise
            if log.enabled(logging.DEBUG):
                log.debug(
                    "transport error", client=self.name, method=method, path=path, error=type(exc).__name__
                )
            raise transport_error(method, path, exc, flight.abandoned) from exc
        if log.enabled(logging.DEBUG):  # per request: build no context unless it is written
            ms = (time.monotonic() - t0) * 1e3
            log.debug(
                "request", client=self.name, method=method, path=path, status=status, elapsed=f"{ms:.0f}ms"
            )
        if status >= 400:
            raise error_from(status, http_reason, raw, retry_after)
        if not raw:
            return {}
        try:
            out = _loads(raw)
        except ValueError:
            raise ApiError(status, "BadResponse", f"{method} {path}: response is not JSON") from None
        return out if isinstance(out, dict) else {"items": out}

    async def _throttled(self) -> None:
        """The client-side rate limiter (--client-qps/--client-max-burst), its wait measured."""
        t0 = time.monotonic()
        await self._limiter.acquire()
        self.requests.waited(time.monotonic() - t0)

    @contextlib.asynccontextmanager
    async def _in_flight(self, session: aiohttp.ClientSession, flight: _Flight) -> AsyncIterator[None]:
        """Count a request on ``session`` (a credential swap closes an old session only once it is idle)
        and make it abandonable: ``abandon_inflight`` expires its deadline, which raises TimeoutError."""
        self._inflight[session] += 1
        try:
            async with asyncio.timeout(None) as deadline:
                flight.deadline = deadline
                self._flights.add(flight)
                yield
        finally:
            self._flights.discard(flight)
            self._inflight[session] -= 1
            if self._inflight[session] <= 0:
                del self._inflight[session]
            self.requests.observe(flight.key, flight.status, time.monotonic() - flight.started)

    async def ping(self, path: str, timeout: float) -> int:
        """GET ``path`` as a health probe; returns the HTTP status, raises ``TransportError``.

        Not rate limited: a probe queued behind a burst of writes would report a healthy pool as lost.
        It rides a kept-alive connection of the request session, and ``timeout`` bounds the wait for the
        answer, while a new connection gets ``PING_CONNECT_FACTOR`` times that for its TCP and TLS
        handshakes: through a slow tunnel (300 ms each way) a handshake alone exceeds a 1 s ping timeout,
        and a probe that gave it no more would never succeed again after the tunnel cut the connection.
        """
        flight = _Flight(classify("GET", path, None))
        self.stats[flight.key] += 1
        req_session, _ = self._sessions()
        headers = await self._tokens.auth_headers()
        tmo = aiohttp.ClientTimeout(total=None, sock_connect=PING_CONNECT_FACTOR * timeout, sock_read=timeout)
        try:
            async with (
                self._in_flight(req_session, flight),
                req_session.get(
                    self._creds.server + path, headers=headers, timeout=tmo, **self._conn_kwargs()
                ) as resp,
            ):
                flight.status = resp.status
                read = 0
                async for chunk in resp.content.iter_any():  # the status is the answer: the body, drained
                    read += len(chunk)
                    if read > _ERROR_BODY_LIMIT:  # no probe body is this long: stop (the connection closes)
                        break
                return resp.status
        except Exception as exc:
            if not is_transport_failure(exc):
                raise
            raise transport_error("GET", path, exc, flight.abandoned) from exc

    async def watch(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 290,
        allow_bookmarks: bool = True,
        announce_open: bool = False,
    ) -> AsyncGenerator[Obj, None]:
        """Raw watch events (``type``, ``object``) until the server ends the stream.

        With ``announce_open`` the first item is ``{"type": WATCH_OPENED}`` once the server accepted the
        watch, so a caller can tell "reconnected" from "still failing" on a quiet resource.

        ERROR 410 raises ``WatchExpired``; other ERRORs raise ``ApiError``; a dead connection raises
        ``TransportError`` after ``timeout_seconds`` + slack of silence. Not rate limited. Use it under
        ``contextlib.aclosing`` so the connection is released promptly.
        """
        path = resource.path(namespace)
        params: dict[str, str | int | bool | None] = {
            "watch": True,
            "resourceVersion": resource_version,
            "allowWatchBookmarks": allow_bookmarks,
            "timeoutSeconds": timeout_seconds,
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
        }
        flight = _Flight(("watch", resource.plural))  # abandonable while it opens; once open, a live stream
        self.stats[flight.key] += 1
        _, watch_session = self._sessions()
        headers = await self._tokens.auth_headers()
        tmo = aiohttp.ClientTimeout(
            total=None, sock_connect=CONNECT_TIMEOUT, sock_read=timeout_seconds + WATCH_READ_SLACK
        )
        try:
            async with self._in_flight(watch_session, flight):
                resp = await watch_session.get(
                    self._creds.server + path,
                    params=_query(params),
                    headers=headers,
                    timeout=tmo,
                    **self._conn_kwargs(),
                )
                flight.status = resp.status  # counted once per watch opened, however long it lives
            async with resp:
                if resp.status != 200:
                    raw = await resp.content.read(_ERROR_BODY_LIMIT)
                    raise error_from(resp.status, resp.reason or "", raw, resp.headers.get("Retry-After"))
                self._live_streams.add(resp)
                try:
                    if announce_open:
                        yield {"type": WATCH_OPENED}
                    buf = bytearray()
                    async for chunk in resp.content.iter_any():
                        scanned = len(buf)  # no newline before: look only in what is new
                        buf += chunk
                        start = 0
                        while (nl := buf.find(b"\n", max(start, scanned))) >= 0:
                            line = bytes(buf[start:nl])
                            start = nl + 1
                            if line.strip():
                                yield watch_event(line)
                        del buf[:start]
                        if len(buf) > MAX_WATCH_LINE_BYTES:  # one event that never ends: no event
                            raise TransportError(
                                f"watch stream: event line over {MAX_WATCH_LINE_BYTES} bytes"
                            )
                    if buf.strip():
                        yield watch_event(bytes(buf))
                finally:
                    self._live_streams.discard(resp)
        except Exception as exc:
            if not is_transport_failure(exc):
                raise
            raise transport_error("WATCH", path, exc, flight.abandoned) from exc

    @contextlib.asynccontextmanager
    async def stream(
        self, method: str, path: str, params: Params | None = None, *, timeout: float | None = None
    ) -> AsyncIterator[aiohttp.ClientResponse]:
        """A streaming response (logs, follow=true) on the watch session; status already checked.

        ``timeout`` bounds silence between chunks (None: unbounded, for followed logs).
        """
        method = method.upper()
        key = classify(method, path, params)
        self.stats[key] += 1
        await self._throttled()
        _, watch_session = self._sessions()
        headers = await self._tokens.auth_headers()
        tmo = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT, sock_read=timeout)
        t0 = time.monotonic()
        try:
            resp = await watch_session.request(
                method,
                self._creds.server + path,
                params=_query(params),
                headers=headers,
                timeout=tmo,
                **self._conn_kwargs(),
            )
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            self.requests.observe(key, None, time.monotonic() - t0)
            raise transport_error(method, path, exc) from exc
        self.requests.observe(key, resp.status, time.monotonic() - t0)
        self._live_streams.add(resp)
        try:
            if resp.status >= 400:
                raw = await resp.content.read(_ERROR_BODY_LIMIT)
                raise error_from(resp.status, resp.reason or "", raw, resp.headers.get("Retry-After"))
            yield resp
        finally:
            self._live_streams.discard(resp)
            resp.close()  # a stream is rarely read to the end: never return its connection to the pool
