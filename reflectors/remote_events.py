"""Remote pod Events -> Events on the local pod, so users can debug without pool access (DESIGN §1).

Per namespace pair: a cache of the pool's Pod Events in the remote namespace, and an index of the local
copies we own (seeded by one LIST at start, then kept from our own writes: no second watch, and a few
hundred bytes per copy instead of the whole Event). Keys are ``<local ns>/<event name>``; the local copy
keeps the remote Event's name, so a restart addresses the same object. Level-based: ``handle`` reads
the caches, never an event payload.

Never in the way of pod reflection: its own queue and workers, every failure logged once and retried
a few times with capped backoff, then dropped. Writes per local pod pass client-go's spam filter
(burst 25, then 1 per 300 s); what it drops is counted in ``dropped``, not treated as an error.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from reflectors.context import ReflectionContext
from reflectors.forge import constants as c
from reflectors.forge.events import aggregation_digest, event_patch, local_event, spam_key
from reflectors.forge.labels import is_reflected, reflected_label_selector
from reflectors.forge.pods import KubeObj, ReadObj, name_of, uid_of
from reflectors.generic import Pair, PairReflector, TaskFactory
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.cache import Cache, EventType
from vkbridge.kube.client import EVENTS, ApiError
from vkbridge.kube.events import SpamFilter
from vkbridge.kube.ratelimit import Clock
from vkbridge.kube.workqueue import RequeueAfter, WorkQueue, run_workers
from vkbridge.logs import get_logger

__all__ = ["REMOTE_EVENT_SELECTOR", "RecordedUid", "RemoteEventReflector"]

# (local namespace, pod name, UID of the pool object an Event is about) -> the local pod UID that pool pod
# or ShadowPod records, when we hold it (the engine reads its pair caches).
RecordedUid = Callable[[str, str, str], str | None]

log = get_logger("reflectors.remote_events")

# Server-side filter: pod events only, and not the pool scheduler's "Scheduled" ones (see
# forge.events.NOT_REFLECTED): neither decoded nor cached, half the events of a quiet pool.
REMOTE_EVENT_SELECTOR = "involvedObject.kind=Pod,reason!=Scheduled"
MAX_TRIES = 5
RETRY_BASE = 1.0
RETRY_CAP = 30.0
WARNING_INTERVAL = 10.0  # at most one failure warning per interval; the rest go to debug
SEED_PAGE = 500


# ---------------------------------------------------------------------------------------------- helpers


def _namespace_terminating(err: ApiError) -> bool:
    return err.status == 403 and "being terminated" in err.message


def _involved_name(event: ReadObj | None) -> str:
    return str(((event or {}).get("involvedObject") or {}).get("name") or "")


# ---------------------------------------------------------------------------------------------- state


@dataclass(slots=True)
class _Copy:
    """One local copy we own: its UID (the precondition of its deletion) and the ``aggregation_digest`` of
    what we last wrote (one per copied Event, ~3 per pod, kept an hour: ~130 bytes with its UID)."""

    uid: str
    digest: int

    @classmethod
    def of(cls, uid: str, written: ReadObj) -> _Copy:
        return cls(uid, aggregation_digest(written))


@dataclass(kw_only=True)
class EventPair(Pair):
    """One reflected namespace pair, as far as Events go."""

    cache: Cache
    copies: dict[str, _Copy] = field(default_factory=dict)  # event name -> our local copy
    # pod name -> remote event names; a tuple (64 bytes for three, a set 216): a pod has a handful
    by_pod: dict[str, tuple[str, ...]] = field(default_factory=dict)
    foreign: set[str] = field(default_factory=set)  # names taken locally by an Event that is not ours
    # remote Events about an earlier same-name pod's pool pod: never copied onto its successor
    earlier: set[str] = field(default_factory=set)
    ready: bool = False  # local copies seeded and the remote cache synced

    def caches(self) -> list[Cache]:
        return [self.cache]


# ---------------------------------------------------------------------------------------------- reflector


class RemoteEventReflector(PairReflector[EventPair]):
    """Pool Events about our pods, copied onto the local pods: the pool kubelet's as the node's kubelet's,
    other components' suffixed " (remote)"."""

    name = "events"
    gates_pods = False  # never in the way of pod reflection

    def __init__(
        self,
        ctx: ReflectionContext,
        local_pods: Cache,
        workers: int = 3,
        *,
        inactivity_timeout: float = 60.0,
        clock: Clock = time.monotonic,
        wall_clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        spam_filter: SpamFilter | None = None,
        max_tries: int = MAX_TRIES,
        retry_backoff: Callable[[], Backoff] = lambda: Backoff(RETRY_BASE, RETRY_CAP),
        recorded_uid: RecordedUid = lambda _ns, _name, _uid: None,
    ) -> None:
        super().__init__()
        self.ctx = ctx
        self.local_pods = local_pods
        self.workers = max(0, workers)
        self.inactivity_timeout = inactivity_timeout
        self.queue: WorkQueue[str] = WorkQueue("events", metrics=ctx.metrics.workqueue("events"))
        self.dropped = 0  # writes the spam filter refused
        self.failed = 0  # events given up after MAX_TRIES (or a permanent refusal)
        self._clock = clock
        self._wall_clock = wall_clock
        self._spam = spam_filter if spam_filter is not None else SpamFilter(clock=clock)
        self._max_tries = max(1, max_tries)
        self._retry_backoff = retry_backoff
        self._recorded_uid = recorded_uid
        self._failures: dict[str, tuple[int, Backoff]] = {}
        self._last_warning = -WARNING_INTERVAL
        self._suppressed = 0
        self._selector = reflected_label_selector(ctx.local_cluster_id, ctx.remote_cluster_id)
        if self.enabled:
            local_pods.subscribe(self._on_local_pod)

    @property
    def enabled(self) -> bool:
        """``--event-reflection-workers=0`` disables the reflector (no caches, no queue), as in Liqo."""
        return self.workers > 0

    # ------------------------------------------------------------------------------------------ lifecycle

    async def run(self) -> None:
        """Workers until ``stop()``; run it in the engine's TaskGroup."""
        if not self.enabled:
            return
        log.info("Starting the Event reflector", workers=self.workers)
        await run_workers(self.queue, self._handle, self.workers, "events", on_result=self._on_result)

    def stop(self) -> None:
        self.queue.shutdown()

    def start_pair(self, local: str, remote: str, task_factory: TaskFactory) -> None:
        """Start reflecting Events of ``remote`` onto ``local``; tasks are created with ``task_factory``."""
        if self.enabled:
            super().start_pair(local, remote, task_factory)

    def _new_pair(self, local: str, remote: str) -> EventPair:
        cache = Cache(
            self.ctx.pool,
            EVENTS,
            remote,
            field_selector=REMOTE_EVENT_SELECTOR,
            name=f"pool/events@{remote}",
            inactivity_timeout=self.inactivity_timeout,
            # A real kubelet posts ~4 Events per pod, kept an hour: as dicts they outweigh the pod caches.
            compact=True,
        )
        pair = EventPair(local=local, remote=remote, cache=cache)
        cache.subscribe(lambda t, old, new: self._on_remote(pair, t, old, new))
        return pair

    def _forget_pair(self, pair: EventPair) -> None:
        """Local copies are left to expire with the Event TTL, as Liqo does."""
        prefix = pair.local + "/"
        for key in [k for k in self._failures if k.startswith(prefix)]:
            del self._failures[key]

    async def _prepare(self, pair: EventPair) -> None:
        await self._seed(pair)
        await pair.cache.wait_synced()
        pair.ready = True
        log.debug(
            "event reflection ready", namespace=pair.local, copies=len(pair.copies), remote=len(pair.cache)
        )
        names = set(pair.copies) | {key.split("/", 1)[1] for key in pair.cache.keys()}
        for name in names:
            self.queue.add(f"{pair.local}/{name}")

    async def _seed(self, pair: EventPair) -> None:
        """Our local copies from an earlier run (one paginated LIST; retried until it works)."""
        backoff = Backoff(RETRY_BASE, RETRY_CAP)
        while True:
            try:
                copies: dict[str, _Copy] = {}
                cont: str | None = None
                while True:
                    page = await self.ctx.home.list(
                        EVENTS,
                        pair.local,
                        label_selector=self._selector,
                        limit=SEED_PAGE,
                        continue_token=cont,
                    )
                    for item in page.get("items") or []:
                        copies[name_of(item)] = _Copy.of(uid_of(item), item)
                    cont = (page.get("metadata") or {}).get("continue") or None
                    if cont is None:
                        break
                pair.copies = copies
                return
            except Exception as err:  # never let the engine's TaskGroup fail because of Events
                delay = backoff.next()
                self._warn(
                    backoff.attempts == 1,
                    "listing reflected events failed; retrying",
                    namespace=pair.local,
                    error=str(err)[:200],
                    retry_in=f"{delay:.1f}s",
                )
                await asyncio.sleep(delay)

    # ------------------------------------------------------------------------------------------ triggers

    def _on_remote(self, pair: EventPair, _type: EventType, old: Any, new: Any) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        name = name_of(obj)
        pod = _involved_name(obj)
        names = pair.by_pod.get(pod, ())
        if new is None:
            if name in names:
                if len(names) > 1:
                    pair.by_pod[pod] = tuple(n for n in names if n != name)
                else:
                    del pair.by_pod[pod]
        elif pod and name not in names:
            pair.by_pod[pod] = (*names, name)
        self.queue.add(f"{pair.local}/{name}")

    def _on_local_pod(self, type_: EventType, _old: Any, new: Any) -> None:
        """A pod that appears (or is re-created) gets the remote Events that were waiting for it. A
        re-created pod is never a MODIFIED (the watch says DELETED then ADDED, and a relist's diff splits a
        changed UID the same way), so the old pod is not read: decoding it cost ~12 us per local change."""
        if new is None or type_ == "MODIFIED":
            return
        meta = new.get("metadata") or {}
        pair = self.pairs.get(str(meta.get("namespace", "")))
        if pair is None or not pair.ready:
            return
        for name in pair.by_pod.get(str(meta.get("name", "")), ()):
            self.queue.add(f"{pair.local}/{name}")

    # ------------------------------------------------------------------------------------------ handle

    async def _handle(self, key: str) -> RequeueAfter | None:
        """Never raises: failures are logged once, retried ``max_tries`` times with backoff, then dropped."""
        labels = self.ctx.metric_labels(key.split("/", 1)[0], c.REFLECTOR_EVENT)
        try:
            result = await self.handle(key)
        except asyncio.CancelledError:
            raise
        except Exception as err:
            self.ctx.metrics.reflection_errors.labels(**labels).inc()
            return self._failure(key, err)
        self.ctx.metrics.reflection_items.labels(**labels).inc()
        self._failures.pop(key, None)
        return result

    async def handle(self, key: str) -> RequeueAfter | None:
        ns, name = key.split("/", 1)
        pair = self.pairs.get(ns)
        if pair is None or not pair.ready:
            return None  # stopped, or queued again by _prepare
        remote = pair.cache.get(f"{pair.remote}/{name}")
        copy = pair.copies.get(name)
        if remote is None:
            pair.foreign.discard(name)
            pair.earlier.discard(name)
            if copy is not None:
                await self._delete(pair, name, copy)
            return None
        if name in pair.foreign or name in pair.earlier:
            return None
        pod = self.local_pods.get(f"{ns}/{_involved_name(remote)}")
        if pod is not None and self._about_earlier_pod(ns, remote, pod):
            pair.earlier.add(name)  # kept: its pool pod may be gone by the next look
            log.debug("remote event about an earlier pod of that name: not copied", event=key)
            return None
        desired = local_event(
            remote,
            pod,
            local_id=self.ctx.local_cluster_id,
            remote_id=self.ctx.remote_cluster_id,
            now=self._wall_clock(),
            node_name=self.ctx.node_name,
        )
        if desired is None or pod is None:
            return None  # not about a pod of ours (yet): _on_local_pod queues it when the pod appears
        if copy is None:
            return await self._create(pair, name, pod, desired)
        if copy.digest != aggregation_digest(desired):
            return await self._update(pair, name, pod, copy, desired)
        return None

    async def _create(
        self, pair: EventPair, name: str, pod: ReadObj, desired: KubeObj
    ) -> RequeueAfter | None:
        if not self._allow(pod, desired):
            return None
        try:
            created = await self.ctx.home.create(EVENTS, desired, pair.local)
        except ApiError as err:
            if err.not_found or _namespace_terminating(err):
                return None  # the namespace is going away: nothing to show the Event on
            if not err.already_exists:
                raise
            existing = await self.ctx.home.get(EVENTS, name, pair.local)
            if not is_reflected(existing, self.ctx.local_cluster_id, self.ctx.remote_cluster_id):
                pair.foreign.add(name)
                log.warning(
                    "a local Event of that name is not ours: left alone", event=f"{pair.local}/{name}"
                )
                return None
            pair.copies[name] = _Copy.of(uid_of(existing), existing)
            return RequeueAfter(0.0)  # ours from an earlier run: compare and update on the next pass
        pair.copies[name] = _Copy.of(uid_of(created), desired)
        log.debug("remote event reflected", event=f"{pair.local}/{name}", reason=desired.get("reason"))
        return None

    async def _update(
        self, pair: EventPair, name: str, pod: ReadObj, copy: _Copy, desired: KubeObj
    ) -> RequeueAfter | None:
        if not self._allow(pod, desired):
            return None
        try:
            await self.ctx.home.patch(EVENTS, name, event_patch(desired), pair.local)
        except ApiError as err:
            if not err.not_found:
                raise
            pair.copies.pop(name, None)  # expired (TTL) or deleted locally: create it again
            return RequeueAfter(0.0)
        pair.copies[name] = _Copy.of(copy.uid, desired)
        log.debug("remote event updated", event=f"{pair.local}/{name}", count=desired.get("count"))
        return None

    async def _delete(self, pair: EventPair, name: str, copy: _Copy) -> None:
        try:
            await self.ctx.home.delete(EVENTS, name, pair.local, preconditions_uid=copy.uid or None)
        except ApiError as err:
            if not (err.not_found or err.conflict):
                raise
        pair.copies.pop(name, None)
        log.debug("remote event gone: local copy deleted", event=f"{pair.local}/{name}")

    # ------------------------------------------------------------------------------------------ helpers

    def _about_earlier_pod(self, ns: str, remote: ReadObj, pod: ReadObj) -> bool:
        """Is the Event about a pool pod (or ShadowPod) made for another local pod of that name (StatefulSet
        ``web-0`` re-created while the earlier one still terminates on the pool)? Told by the local pod UID
        the pool object records; one we no longer hold, or one without that record, is copied as before."""
        involved = remote.get("involvedObject") or {}
        recorded = self._recorded_uid(ns, str(involved.get("name") or ""), str(involved.get("uid") or ""))
        return recorded is not None and recorded != uid_of(pod)

    def _allow(self, pod: ReadObj, desired: ReadObj) -> bool:
        if self._spam.allow(spam_key(pod)):
            return True
        self.dropped += 1
        log.debug(
            "event spam filter: remote event dropped",
            pod=f"{spam_key(pod)[0]}/{spam_key(pod)[1]}",
            reason=desired.get("reason"),
            dropped=self.dropped,
        )
        return False

    def _failure(self, key: str, err: Exception) -> RequeueAfter | None:
        if isinstance(err, ApiError) and err.status == 403 and "being terminated" in str(err):
            # The local namespace is going away: its events go with it; nothing to tell anyone.
            self._failures.pop(key, None)
            log.debug("remote event not reflected: namespace terminating", event=key)
            return None
        tries, backoff = self._failures.get(key) or (0, self._retry_backoff())
        tries += 1
        permanent = (
            isinstance(err, ApiError) and 400 <= err.status < 500 and err.status not in (409, 429)
        ) or not isinstance(err, ApiError)
        if permanent or tries >= self._max_tries:
            self._failures.pop(key, None)
            self.failed += 1
            self._warn(
                tries == 1,
                "reflecting a remote event failed: dropped",
                event=key,
                error=f"{type(err).__name__}: {str(err)[:200]}",
                tries=tries,
            )
            return None
        self._failures[key] = (tries, backoff)
        delay = backoff.next()
        self._warn(
            tries == 1,
            "reflecting a remote event failed; retrying",
            event=key,
            error=f"{type(err).__name__}: {str(err)[:200]}",
            retry_in=f"{delay:.1f}s",
            tries=tries,
        )
        return RequeueAfter(delay)

    def _warn(self, first: bool, msg: str, **kv: object) -> None:
        """The first failure of an item at warning, at most one per WARNING_INTERVAL; the rest at debug."""
        now = self._clock()
        if first and now - self._last_warning >= WARNING_INTERVAL:
            self._last_warning = now
            if self._suppressed:
                kv["suppressed"] = self._suppressed
                self._suppressed = 0
            log.warning(msg, **kv)
            return
        if first:
            self._suppressed += 1
        log.debug(msg, **kv)

    def _on_result(self, key: str, _ok: bool, _duration: float) -> None:
        if key in self._failures:
            self.queue.metrics.retry()  # a failure, retried by RequeueAfter: the queue cannot tell
