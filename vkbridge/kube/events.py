"""core/v1 Event recorder with client-go's spam filter and count aggregation.

Mirrors ``record.EventBroadcaster`` + ``EventCorrelator`` defaults: per source and involved object a token
bucket of 25 events refilled 1 per 300 s (the spam filter, applied to every event, including repeats);
an identical event (same object, type, reason and message) seen within 10 minutes bumps the existing
Event's ``count``/``lastTimestamp`` with a PATCH instead of creating a new Event; a bounded backlog of
1000 that drops when full, so ``event()`` never blocks a reconciler.

Messages are stored in the cluster and readable by anyone who can list Events: callers must pass object
names only, never Secret data, tokens or keys. The recorder cannot tell, so it is the caller's duty.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from reflectors.forge.timefmt import rfc3339
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.ratelimit import Clock, TokenBucket
from vkbridge.logs import get_logger

__all__ = ["EventRecorder", "EventType", "EventWriter", "SpamFilter", "event_name"]

log = get_logger("vkbridge.events")

EventType = Literal["Normal", "Warning"]

MAX_MESSAGE_CHARS = 1024
SPAM_BURST = 25
SPAM_QPS = 1.0 / 300.0
AGGREGATION_WINDOW = 600.0
CACHE_SIZE = 4096
BACKLOG = 1000
MAX_NAME_CHARS = 253  # an Event's name must be a DNS subdomain


class EventWriter(Protocol):
    """The two API calls the recorder needs (the real one wraps the consumer's CoreV1 client).

    Errors carrying ``status`` (as ``ApiException`` and ``aiohttp.ClientResponseError`` do) are
    classified like client-go: 404 on patch means "recreate", other 4xx drop the event, anything else
    (5xx, 429, transport errors) is retried.
    """

    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> object: ...


class SpamFilter:
    """Per-key token buckets (client-go ``EventSourceObjectSpamFilter``), LRU-bounded."""

    def __init__(
        self,
        burst: int = SPAM_BURST,
        qps: float = SPAM_QPS,
        clock: Clock = time.monotonic,
        max_keys: int = CACHE_SIZE,
    ) -> None:
        self._burst = burst
        self._qps = qps
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: OrderedDict[Hashable, TokenBucket] = OrderedDict()

    def allow(self, key: Hashable) -> bool:
        """True if an event for ``key`` may be written now (consumes a token)."""
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = TokenBucket(self._qps, self._burst, clock=self._clock)
            self._buckets[key] = bucket
            if len(self._buckets) > self._max_keys:
                self._buckets.popitem(last=False)
        else:
            self._buckets.move_to_end(key)
        return bucket.try_acquire()

    def __len__(self) -> int:
        return len(self._buckets)


@dataclass(slots=True)
class _Pending:
    namespace: str
    ref: dict[str, str]
    type_: EventType
    reason: str
    message: str
    wall_ns: int


@dataclass(slots=True)
class _Observed:
    namespace: str
    name: str
    count: int
    last_seen: float


def event_name(object_name: str, wall_ns: int) -> str:
    """client-go's `<object>.<unix nanoseconds in hex>`, with the object part cut so the whole stays a
    DNS subdomain of at most 253 characters. A 253-character pod's would be 270: core/v1 still stores
    it (its legacy validation skips Event names) but it is no valid object name, and events.k8s.io/v1
    or anything that validates names refuses it. `involvedObject.name` keeps the full name."""
    suffix = f".{wall_ns:x}"
    base = object_name[: MAX_NAME_CHARS - len(suffix)].rstrip("-.")
    return f"{base or 'event'}{suffix}"


def _event_time(wall_ns: int) -> str:
    """A ``time.time_ns()`` reading as the whole-second ``metav1.Time`` an Event's timestamps hold."""
    return rfc3339(datetime.fromtimestamp(wall_ns // 1_000_000_000, tz=UTC))


def _status(err: BaseException) -> int | None:
    status = getattr(err, "status", None)
    return status if isinstance(status, int) else None


def _object_ref(obj: Mapping[str, Any], kind: str | None, api_version: str | None) -> dict[str, str]:
    meta = obj.get("metadata") or {}
    fields = {
        "kind": kind or obj.get("kind"),
        "namespace": meta.get("namespace"),
        "name": meta.get("name"),
        "uid": meta.get("uid"),
        "apiVersion": api_version or obj.get("apiVersion"),
        "resourceVersion": meta.get("resourceVersion"),
    }
    return {k: str(v) for k, v in fields.items() if v}


class EventRecorder:
    """Records Events about objects without blocking the caller; ``run()`` writes them.

    Usage: start ``run()`` in the app's TaskGroup, call ``event()`` from reconcilers, ``await aclose()``
    at shutdown (flushes the backlog for up to ``timeout`` seconds).
    """

    def __init__(
        self,
        writer: EventWriter,
        component: str,
        host: str | None = None,
        *,
        clock: Clock = time.monotonic,
        wall_clock_ns: Callable[[], int] = time.time_ns,
        spam_filter: SpamFilter | None = None,
        maxsize: int = BACKLOG,
        max_tries: int = 12,
        retry_backoff: Backoff | None = None,
    ) -> None:
        self._writer = writer
        self._component = component
        self._host = host
        self._clock = clock
        self._wall_clock_ns = wall_clock_ns
        self._spam = spam_filter if spam_filter is not None else SpamFilter(clock=clock)
        self._maxsize = maxsize
        self._max_tries = max_tries
        self._retry_backoff = retry_backoff if retry_backoff is not None else Backoff(base=1.0, cap=10.0)
        self._pending: deque[_Pending] = deque()
        self._observed: OrderedDict[tuple[str, ...], _Observed] = OrderedDict()
        self._wake = asyncio.Event()
        self._finished = asyncio.Event()
        self._closed = False
        self._runner: asyncio.Task[None] | None = None
        self.dropped = 0  # events lost to a full backlog, the spam filter, or rejection (for metrics)

    @property
    def backlog(self) -> int:
        return len(self._pending)

    def event(
        self,
        obj: Mapping[str, Any],
        type_: EventType,
        reason: str,
        message: str,
        *,
        kind: str | None = None,
        api_version: str | None = None,
    ) -> None:
        """Queue an Event about ``obj`` (a raw API dict). Never blocks, never raises on a full backlog.

        ``kind``/``api_version`` override the object's own, which list responses omit from items.
        ``message`` must not contain Secret data (names only); it is cut to 1024 characters.
        """
        if type_ not in ("Normal", "Warning"):
            log.error("unsupported event type: dropped", type=repr(type_), reason=reason)
            return
        if self._closed:
            log.debug("recorder closed: dropping event", reason=reason)
            return
        if len(self._pending) >= self._maxsize:
            self.dropped += 1
            log.debug("event backlog full: dropping event", backlog=self._maxsize, reason=reason)
            return
        ref = _object_ref(obj, kind, api_version)
        self._pending.append(
            _Pending(
                namespace=ref.get("namespace") or "default",
                ref=ref,
                type_=type_,
                reason=reason,
                message=message[:MAX_MESSAGE_CHARS],
                wall_ns=self._wall_clock_ns(),
            )
        )
        self._wake.set()

    async def run(self) -> None:
        """Write queued events until ``aclose()``; then flush the backlog and return."""
        self._runner = asyncio.current_task()
        self._finished.clear()
        try:
            while True:
                while self._pending:
                    await self._record(self._pending.popleft())
                if self._closed:
                    return
                self._wake.clear()
                await self._wake.wait()
        finally:
            self._finished.set()

    async def aclose(self, timeout: float = 5.0) -> None:
        """Stop accepting events and let ``run()`` flush for up to ``timeout`` s; then cancel it."""
        self._closed = True
        self._wake.set()
        runner = self._runner
        if runner is None or runner.done() or runner is asyncio.current_task():
            return
        try:
            async with asyncio.timeout(timeout):
                await self._finished.wait()
        except TimeoutError:
            self.dropped += len(self._pending)
            log.debug("event recorder: dropping events at shutdown", count=len(self._pending))
            self._pending.clear()
            runner.cancel()
            await self._finished.wait()

    # -- correlation and writing ----------------------------------------------------------------------

    def _spam_key(self, p: _Pending) -> tuple[str, ...]:
        ref = p.ref
        return (
            self._component,
            self._host or "",
            ref.get("kind", ""),
            ref.get("namespace", ""),
            ref.get("name", ""),
            ref.get("uid", ""),
            ref.get("apiVersion", ""),
        )

    def _body(self, p: _Pending) -> dict[str, Any]:
        ts = _event_time(p.wall_ns)
        source = {"component": self._component}
        if self._host:
            source["host"] = self._host
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": event_name(p.ref.get("name", ""), p.wall_ns), "namespace": p.namespace},
            "involvedObject": dict(p.ref),
            "reason": p.reason,
            "message": p.message,
            "type": p.type_,
            "source": source,
            "firstTimestamp": ts,
            "lastTimestamp": ts,
            "count": 1,
            "reportingComponent": self._component,
            "reportingInstance": self._host or "",
        }

    def _lookup(self, key: tuple[str, ...]) -> _Observed | None:
        seen = self._observed.get(key)
        if seen is None:
            return None
        if self._clock() - seen.last_seen > AGGREGATION_WINDOW:
            del self._observed[key]
            return None
        self._observed.move_to_end(key)
        return seen

    def _remember(self, key: tuple[str, ...], namespace: str, name: str, count: int) -> None:
        self._observed[key] = _Observed(namespace, name, count, self._clock())
        self._observed.move_to_end(key)
        if len(self._observed) > CACHE_SIZE:
            self._observed.popitem(last=False)

    async def _record(self, p: _Pending) -> None:
        spam_key = self._spam_key(p)
        if not self._spam.allow(spam_key):
            self.dropped += 1
            log.debug(
                "event spam filter: dropping event",
                type=p.type_,
                reason=p.reason,
                object="/".join(spam_key[3:5]),
            )
            return
        key = (*spam_key, p.type_, p.reason, p.message)
        seen = self._lookup(key)
        backoff = self._retry_backoff
        backoff.reset()
        for attempt in range(1, self._max_tries + 1):
            try:
                if seen is not None:
                    await self._patch(key, seen, p)
                else:
                    await self._create(key, p)
                return
            except Exception as err:
                status = _status(err)
                if seen is not None and status == 404:
                    seen = None  # the Event expired (1 h TTL) or was deleted: create a new one
                    continue
                if status is not None and 400 <= status < 500 and status != 429:
                    self.dropped += 1
                    log.debug("event rejected: dropped", reason=p.reason, status=status, error=err)
                    return
                if attempt == self._max_tries:
                    break
                delay = backoff.next()
                log.debug(
                    "writing event failed; retrying", reason=p.reason, error=err, retry_in=f"{delay:.1f}s"
                )
                await asyncio.sleep(delay)
        self.dropped += 1
        log.warning("could not write event: dropped", reason=p.reason, tries=self._max_tries)

    async def _create(self, key: tuple[str, ...], p: _Pending) -> None:
        body = self._body(p)
        created = await self._writer.create_event(p.namespace, body)
        name = body["metadata"]["name"]
        with contextlib.suppress(AttributeError, KeyError, TypeError):
            name = created["metadata"]["name"] or name
        self._remember(key, p.namespace, str(name), 1)

    async def _patch(self, key: tuple[str, ...], seen: _Observed, p: _Pending) -> None:
        count = seen.count + 1
        patch = {"count": count, "lastTimestamp": _event_time(p.wall_ns), "message": p.message}
        await self._writer.patch_event(seen.namespace, seen.name, patch)
        self._remember(key, seen.namespace, seen.name, count)
