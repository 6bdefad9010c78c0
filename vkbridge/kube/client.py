"""A thin raw-JSON REST client for the Kubernetes API over aiohttp.

Why our own: caches want raw dicts (no generated models), the client certificate must be swappable in
one place, and kubernetes_asyncio has no rate limiter. Two sessions share one ``SSLContext``: watches
and streams hold connections for minutes, so they never queue behind, or starve, ordinary requests.

Errors: every failure is an ``ApiError``. ``TransportError`` (status 0) is the subclass for "no HTTP
answer" (connect refused, TLS failure, reset, timeout); ``WatchExpired`` (410) means "re-list".
Bodies and auth headers are never logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections import Counter
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

import aiohttp
import orjson

from vkbridge.kube.kubeconfig import Credentials, KubeconfigError, read_token, ssl_context
from vkbridge.kube.ratelimit import TokenBucket
from vkbridge.kube.requestmetrics import APPLY_PATCH, Params, RequestCounter, RequestMetrics, classify

# orjson: 3-4x faster than json on watch streams (the hottest path under load), and it shares dict keys
# across documents, so cached objects take less memory.
_loads: Callable[[bytes], Any] = orjson.loads

__all__ = [
    "APPLY_PATCH",
    "CERTIFICATESIGNINGREQUESTS",
    "CONFIGMAPS",
    "EVENTS",
    "JSON",
    "JSON_PATCH",
    "LEASES",
    "MERGE_PATCH",
    "NAMESPACEMAPS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "RENEWS",
    "RESOURCESLICES",
    "SECRETS",
    "SELFSUBJECTREVIEWS",
    "SHADOWPODS",
    "STRATEGIC_MERGE_PATCH",
    "SUBJECTACCESSREVIEWS",
    "TOKENREVIEWS",
    "VIRTUALNODES",
    "ApiError",
    "KubeClient",
    "Resource",
    "TransportError",
    "WatchExpired",
    "classify",
]

log = logging.getLogger(__name__)

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"

DEFAULT_TIMEOUT: Final = 60.0
CONNECT_TIMEOUT: Final = 15.0
PING_CONNECT_FACTOR: Final = 3.0
WATCH_OPENED: Final = "vkbridge.io/WatchOpened"  # see KubeClient.watch(announce_open=True)
WATCH_READ_SLACK: Final = 15.0
TOKEN_REFRESH_SECONDS: Final = 60.0
READ_BUFSIZE: Final = 2**21
_ERROR_BODY_LIMIT: Final = 64 * 1024

Obj = dict[str, Any]
Body = dict[str, Any] | list[Any]  # a list is a JSON patch


# ---------------------------------------------------------------------------------------------- errors


class ApiError(Exception):
    """A non-2xx answer (``status`` > 0), or a transport failure (``TransportError``, status 0)."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        body: Obj | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body: Obj = body if body is not None else {}
        self.retry_after = retry_after
        super().__init__(f"{status} {reason}: {message[:300]}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def unauthorized(self) -> bool:
        """401 or 403: the credential was revoked, expired, or lacks RBAC."""
        return self.status in (401, 403)

    @property
    def is_transient(self) -> bool:
        return self.status == 429 or self.status >= 500


class TransportError(ApiError):
    """No HTTP answer: connection refused/reset, TLS failure, timeout, session closed by a swap."""

    def __init__(self, message: str, *, transient: bool = True, abandoned: bool = False) -> None:
        super().__init__(0, "TransportError", message)
        self._transient = transient
        self.abandoned = abandoned  # ended by us (KubeClient.abandon_inflight), not by the network

    def __str__(self) -> str:
        return f"transport error: {self.message[:300]}"

    @property
    def is_transient(self) -> bool:
        return self._transient


class WatchExpired(ApiError):
    """The watch's resourceVersion is too old (410 Gone/Expired): re-list, then watch again."""

    def __init__(self, message: str, body: Obj | None = None) -> None:
        super().__init__(410, "Expired", message, body)


# ---------------------------------------------------------------------------------------------- resources


@dataclass(frozen=True)
class Resource:
    """Where a resource type lives in the REST tree."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        if namespace is not None and not self.namespaced:
            raise ValueError(f"{self.plural} is cluster-scoped; no namespace allowed")
        if subresource is not None and name is None:
            raise ValueError("a subresource needs a name")
        p = self.prefix
        if namespace is not None:
            p += f"/namespaces/{quote(namespace, safe='')}"
        p += f"/{self.plural}"
        if name is not None:
            p += f"/{quote(name, safe='')}"
        if subresource is not None:
            p += f"/{subresource}"
        return p


PODS: Final = Resource("", "v1", "pods", True, "Pod")
NODES: Final = Resource("", "v1", "nodes", False, "Node")
EVENTS: Final = Resource("", "v1", "events", True, "Event")
SECRETS: Final = Resource("", "v1", "secrets", True, "Secret")
CONFIGMAPS: Final = Resource("", "v1", "configmaps", True, "ConfigMap")
NAMESPACES: Final = Resource("", "v1", "namespaces", False, "Namespace")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
SHADOWPODS: Final = Resource("offloading.liqo.io", "v1beta1", "shadowpods", True, "ShadowPod")
NAMESPACEMAPS: Final = Resource("offloading.liqo.io", "v1beta1", "namespacemaps", True, "NamespaceMap")
VIRTUALNODES: Final = Resource("offloading.liqo.io", "v1beta1", "virtualnodes", True, "VirtualNode")
RESOURCESLICES: Final = Resource("authentication.liqo.io", "v1beta1", "resourceslices", True, "ResourceSlice")
RENEWS: Final = Resource("authentication.liqo.io", "v1beta1", "renews", True, "Renew")
CERTIFICATESIGNINGREQUESTS: Final = Resource(
    "certificates.k8s.io", "v1", "certificatesigningrequests", False, "CertificateSigningRequest"
)
TOKENREVIEWS: Final = Resource("authentication.k8s.io", "v1", "tokenreviews", False, "TokenReview")
SELFSUBJECTREVIEWS: Final = Resource(
    "authentication.k8s.io", "v1", "selfsubjectreviews", False, "SelfSubjectReview"
)
SUBJECTACCESSREVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", False, "SubjectAccessReview"
)


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


def _error_from(status: int, http_reason: str, raw: bytes, retry_after: str | None) -> ApiError:
    body: Obj = {}
    try:
        parsed = json.loads(raw) if raw else {}
        if isinstance(parsed, dict):
            body = parsed
    except ValueError:
        pass
    if body.get("kind") == "Status":
        reason = str(body.get("reason") or http_reason or "")
        message = str(body.get("message") or "")
    else:
        reason = http_reason or ""
        message = raw[:300].decode("utf-8", "replace").strip()
    ra: float | None = None
    if retry_after:
        with contextlib.suppress(ValueError):
            ra = float(retry_after)
    if status == 410:
        return WatchExpired(message or reason, body)
    return ApiError(status, reason, message, body, retry_after=ra)


class _StreamEnded(aiohttp.ClientConnectionError):
    """We ended a live stream ourselves (credential swap, server lost): aiohttp would leave its reader
    waiting on a closed or dead connection."""


class _Flight:
    """One request on the wire, which ``KubeClient.abandon_inflight`` can end before its timeout; counted
    by (verb, resource) ``key`` and HTTP ``status`` (None: no answer) when it leaves the wire."""

    __slots__ = ("abandoned", "deadline", "key", "status")

    def __init__(self, key: tuple[str, str]) -> None:
        self.deadline: asyncio.Timeout | None = None
        self.abandoned: str | None = None
        self.key = key
        self.status: int | None = None


def is_transport_failure(exc: BaseException) -> bool:
    """What the network (or a session we closed) did to a request, as opposed to a bug: aiohttp's errors,
    timeouts, OS errors, and the bare ``RuntimeError("Connection closed.")`` aiohttp raises when a body
    is read after its session closed the connection."""
    if isinstance(exc, RuntimeError):
        return "Connection closed" in str(exc)
    return isinstance(exc, aiohttp.ClientError | TimeoutError | OSError)


def _transport_error(
    method: str, path: str, exc: BaseException, flight: _Flight | None = None
) -> TransportError:
    if flight is not None and flight.abandoned is not None:
        return TransportError(f"{method} {path}: abandoned: {flight.abandoned}"[:500], abandoned=True)
    if isinstance(exc, _StreamEnded):
        return TransportError(f"{method} {path}: ended: {exc}"[:500], abandoned=True)
    fatal = isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError)
    detail = str(exc) or type(exc).__name__
    return TransportError(f"{method} {path}: {type(exc).__name__}: {detail}"[:500], transient=not fatal)


# ---------------------------------------------------------------------------------------------- client


class KubeClient:
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
    ) -> None:
        self.name = name
        self.requests = RequestMetrics(request_counter, name)  # vkbridge_api_requests_total
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
        self._token: str | None = creds.token
        self._token_read_at = time.monotonic()
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
        self._token = creds.token
        self._token_read_at = time.monotonic()
        self._req = self._watch = None
        self.generation += 1
        log.info("%s client: credentials swapped to %r", self.name, creds)
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
            resp.content.set_exception(_StreamEnded(reason))
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

    async def _headers(self) -> dict[str, str]:
        creds = self._creds
        if creds.token_file is not None and time.monotonic() - self._token_read_at > TOKEN_REFRESH_SECONDS:
            self._token_read_at = time.monotonic()
            try:
                self._token = await asyncio.to_thread(read_token, creds.token_file)
            except KubeconfigError as exc:
                log.warning("%s client: keeping the previous token: %s", self.name, exc)
        if self._token:
            return {"Authorization": f"Bearer {self._token}"}
        return {}

    def _conn_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {}
        if self._creds.proxy_url:
            kw["proxy"] = self._creds.proxy_url
        if self._creds.tls_server_name:
            kw["server_hostname"] = self._creds.tls_server_name
        return kw

    # -- core

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: Params | None = None,
        body: Body | None = None,
        content_type: str | None = None,
        timeout: float | None = None,
    ) -> Obj:
        """One JSON request. PATCH defaults to merge-patch; SSA is ``content_type=APPLY_PATCH``."""
        method = method.upper()
        key = classify(method, path, params, content_type)
        self.stats[key] += 1
        await self._limiter.acquire()
        req_session, _ = self._sessions()
        headers = await self._headers()
        data: bytes | None = None
        if body is not None:
            headers["Content-Type"] = content_type or (MERGE_PATCH if method == "PATCH" else JSON)
            data = json.dumps(body, separators=(",", ":")).encode()
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
                raw = await resp.read()
                http_reason = resp.reason or ""
                retry_after = resp.headers.get("Retry-After")
        except Exception as exc:
            if not is_transport_failure(exc):
                raise
            log.debug("%s %s %s: transport error %s", self.name, method, path, type(exc).__name__)
            raise _transport_error(method, path, exc, flight) from exc
        log.debug("%s %s %s -> %d (%.0f ms)", self.name, method, path, status, (time.monotonic() - t0) * 1e3)
        if status >= 400:
            raise _error_from(status, http_reason, raw, retry_after)
        if not raw:
            return {}
        try:
            out = _loads(raw)
        except ValueError:
            raise ApiError(status, "BadResponse", f"{method} {path}: response is not JSON") from None
        return out if isinstance(out, dict) else {"items": out}

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
            self.requests.observe(flight.key, flight.status)

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
        headers = await self._headers()
        tmo = aiohttp.ClientTimeout(total=None, sock_connect=PING_CONNECT_FACTOR * timeout, sock_read=timeout)
        try:
            async with (
                self._in_flight(req_session, flight),
                req_session.get(
                    self._creds.server + path, headers=headers, timeout=tmo, **self._conn_kwargs()
                ) as resp,
            ):
                flight.status = resp.status
                await resp.read()
                return resp.status
        except Exception as exc:
            if not is_transport_failure(exc):
                raise
            raise _transport_error("GET", path, exc, flight) from exc

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
        headers = await self._headers()
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
                    raise _error_from(resp.status, resp.reason or "", raw, resp.headers.get("Retry-After"))
                self._live_streams.add(resp)
                try:
                    if announce_open:
                        yield {"type": WATCH_OPENED}
                    buf = bytearray()
                    async for chunk in resp.content.iter_any():
                        buf += chunk
                        while (nl := buf.find(b"\n")) >= 0:
                            line = bytes(buf[:nl])
                            del buf[: nl + 1]
                            if line.strip():
                                yield _watch_event(line)
                    if buf.strip():
                        yield _watch_event(bytes(buf))
                finally:
                    self._live_streams.discard(resp)
        except Exception as exc:
            if not is_transport_failure(exc):
                raise
            raise _transport_error("WATCH", path, exc, flight) from exc

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
        await self._limiter.acquire()
        _, watch_session = self._sessions()
        headers = await self._headers()
        tmo = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT, sock_read=timeout)
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
            self.requests.observe(key, None)
            raise _transport_error(method, path, exc) from exc
        self.requests.observe(key, resp.status)
        self._live_streams.add(resp)
        try:
            if resp.status >= 400:
                raw = await resp.content.read(_ERROR_BODY_LIMIT)
                raise _error_from(resp.status, resp.reason or "", raw, resp.headers.get("Retry-After"))
            yield resp
        finally:
            self._live_streams.discard(resp)
            resp.close()  # a stream is rarely read to the end: never return its connection to the pool

    # -- conveniences

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, *, subresource: str | None = None
    ) -> Obj:
        return await self.request("GET", resource.path(namespace, name, subresource))

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
    ) -> Obj:
        """One page (a ``*List`` dict); follow ``metadata.continue`` for the rest."""
        params: dict[str, str | int | None] = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit,
            "continue": continue_token,
            "resourceVersion": resource_version,
        }
        return await self.request("GET", resource.path(namespace), params=params, timeout=timeout)

    async def create(
        self,
        resource: Resource,
        body: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        name: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        """POST; for subresources (``eviction``, ``token``) pass the parent ``name``."""
        ns = namespace if namespace is not None else _ns_of(resource, body)
        path = resource.path(ns, name, subresource)
        return await self.request("POST", path, body=body, params={"fieldManager": field_manager})

    async def replace(
        self,
        resource: Resource,
        body: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        """PUT the whole object; its metadata.resourceVersion makes it an optimistic-concurrency update."""
        ns = namespace if namespace is not None else _ns_of(resource, body)
        path = resource.path(ns, body["metadata"]["name"], subresource)
        return await self.request("PUT", path, body=body, params={"fieldManager": field_manager})

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Body,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
        field_manager: str | None = None,
    ) -> Obj:
        path = resource.path(namespace, name, subresource)
        return await self.request(
            "PATCH", path, body=patch, content_type=content_type, params={"fieldManager": field_manager}
        )

    async def apply(
        self,
        resource: Resource,
        body: Obj,
        namespace: str | None = None,
        *,
        field_manager: str = "reflection.liqo.io",
        force: bool = True,
        subresource: str | None = None,
    ) -> Obj:
        """Server-side apply of a partial object that names apiVersion, kind and metadata.name."""
        ns = namespace if namespace is not None else _ns_of(resource, body)
        path = resource.path(ns, body["metadata"]["name"], subresource)
        return await self.request(
            "PATCH",
            path,
            body=body,
            content_type=APPLY_PATCH,
            params={"fieldManager": field_manager, "force": force},
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions_uid: str | None = None,
        preconditions_resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> Obj:
        """DELETE with DeleteOptions; returns the object (still terminating) or a Status."""
        opts: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        pre: dict[str, str] = {}
        if preconditions_uid is not None:
            pre["uid"] = preconditions_uid
        if preconditions_resource_version is not None:
            pre["resourceVersion"] = preconditions_resource_version
        if pre:
            opts["preconditions"] = pre
        if grace_period_seconds is not None:
            opts["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            opts["propagationPolicy"] = propagation_policy
        return await self.request("DELETE", resource.path(namespace, name), body=opts, content_type=JSON)


def _ns_of(resource: Resource, body: Obj) -> str | None:
    if not resource.namespaced:
        return None
    ns = body.get("metadata", {}).get("namespace")
    if not isinstance(ns, str) or not ns:
        raise ValueError(f"{resource.plural}: namespace missing (argument or metadata.namespace)")
    return ns


def _watch_event(line: bytes) -> Obj:
    try:
        ev = _loads(line)
    except ValueError:
        raise TransportError("watch stream: malformed event line") from None
    if not isinstance(ev, dict) or not isinstance(ev.get("object"), dict):
        raise TransportError("watch stream: event without an object")
    if ev.get("type") == "ERROR":
        status = ev["object"]
        code = int(status.get("code") or 0)
        message = str(status.get("message") or "")
        if code == 410 or status.get("reason") in ("Expired", "Gone"):
            raise WatchExpired(message or "resourceVersion too old", status)
        raise ApiError(code or 500, str(status.get("reason") or "WatchError"), message, status)
    return ev
