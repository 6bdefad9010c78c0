"""A list+watch cache of raw dicts (a small informer), in kopf's three layers.

``run()`` loops forever: list (paginated) -> replace the store and emit the diff -> watch from the
list's resourceVersion with bookmarks. A 410 re-lists and diffs, so deletes missed while away are
emitted; a transport error reconnects from the last resourceVersion after a jittered, capped backoff;
silence longer than ``inactivity_timeout`` (a tunnel cuts idle streams at ~100 s) re-watches.

Subscribers are called synchronously on the loop after the store is updated, so a handler that only
enqueues the key and later reads the cache always sees the new state. A compact cache hands them the
previous object of a MODIFIED as a ``StoredObject``, decoded only if one reads it.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Final, Literal

import orjson

from vkbridge.kube.backoff import Backoff
from vkbridge.kube.client import WATCH_OPENED, KubeClient
from vkbridge.kube.errors import ApiError, TransportError, WatchExpired
from vkbridge.kube.packing import JsonPacker
from vkbridge.kube.resources import Resource
from vkbridge.kube.waiting import wait_event
from vkbridge.logs import get_logger

__all__ = ["Cache", "EventType", "Handler", "StoredObject", "diff_stores", "object_key"]

log = get_logger(__name__)

EventType = Literal["ADDED", "MODIFIED", "DELETED"]
Obj = dict[str, Any]
Handler = Callable[[EventType, Mapping[str, Any] | None, Obj | None], None]
Change = tuple[EventType, Obj | None, Obj | None]
Objs = list[Obj]
Keys = list[str]
Blobs = list[bytes]

PAGE_SIZE: Final = 500
WATCH_TIMEOUT_SECONDS: Final = 290
BACKOFF_BASE: Final = 0.2
BACKOFF_CAP: Final = 30.0
MIN_HEALTHY_WATCH: Final = 1.0


def object_key(obj: Mapping[str, Any]) -> str:
    """client-go's MetaNamespaceKey: ``namespace/name``, or ``name`` when cluster-scoped."""
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    name = str(meta.get("name", ""))
    return f"{ns}/{name}" if ns else name


def _rv(obj: Obj | None) -> str | None:
    if obj is None:
        return None
    rv = (obj.get("metadata") or {}).get("resourceVersion")
    return str(rv) if rv is not None else None


def _uid(obj: Obj) -> str | None:
    uid = (obj.get("metadata") or {}).get("uid")
    return str(uid) if uid is not None else None


def diff_stores(old: dict[str, Obj], new: dict[str, Obj]) -> list[Change]:
    """The events that turn ``old`` into ``new``, judged by resourceVersion (opaque: equal or not).

    A key whose uid changed was deleted and re-created while we were away: DELETED then ADDED, as the
    watch would have said. Deletes come first so a handler never sees a stale object after its key's
    re-creation; order within each group follows the stores' own order.
    """
    changes: list[Change] = []
    adds: list[Change] = []
    for key, was in old.items():
        now = new.get(key)
        if now is None:
            changes.append(("DELETED", was, None))
        elif _uid(was) != _uid(now):
            changes.append(("DELETED", was, None))
            adds.append(("ADDED", None, now))
    for key, after in new.items():
        before = old.get(key)
        if before is None:
            adds.append(("ADDED", None, after))
        elif _uid(before) == _uid(after) and _rv(before) != _rv(after):
            adds.append(("MODIFIED", before, after))
    return changes + adds


class StoredObject(Mapping[str, Any]):
    """The previous version of an object in a compact cache, decoded on first read. Most subscribers only
    ask whether there was one (``old is None``) or read it on DELETED, where it is the event's own object;
    decoding every MODIFIED's old pod cost ~15 us for nobody. A read-only Mapping, not a dict: copy it with
    ``dict()`` or ``copy.deepcopy`` (which gives the decoded object's copy, never the cache's)."""

    __slots__ = ("_blob", "_decode", "_obj")

    def __init__(self, blob: bytes, decode: Callable[[bytes], Obj]) -> None:
        self._blob, self._decode = blob, decode
        self._obj: Obj | None = None

    def _load(self) -> Obj:
        if self._obj is None:
            self._obj = self._decode(self._blob)
        return self._obj

    def __getitem__(self, key: str) -> Any:
        return self._load()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._load())

    def __len__(self) -> int:
        return len(self._load())

    def __repr__(self) -> str:
        return f"StoredObject({self._load()!r})"

    def __deepcopy__(self, memo: dict[int, Any]) -> Obj:
        return copy.deepcopy(self._load(), memo)


def _slim(obj: Obj) -> Obj:
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
    return obj


class Cache:
    """One resource (optionally one namespace and selectors) mirrored in memory, kept fresh forever."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        name: str | None = None,
        inactivity_timeout: float = 60.0,
        watch_timeout_seconds: int = WATCH_TIMEOUT_SECONDS,
        backoff_base: float = BACKOFF_BASE,
        backoff_cap: float = BACKOFF_CAP,
        project: Callable[[Obj], Obj] | None = None,
        compact: bool = False,
    ) -> None:
        """``project`` keeps only what readers need of each object; ``compact`` keeps each one as deflated
        JSON (``kube.packing``), decoded on every read (a pod is ~20 KB as Python dicts, ~220 bytes packed:
        with thousands of pods the caches are most of the process; see bench/README.md). Reads then return
        a private copy."""
        self.client = client
        self._project = project
        self._packer = JsonPacker() if compact else None
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.name = name or f"{client.name}/{resource.plural}" + (f"@{namespace}" if namespace else "")
        self.inactivity_timeout = inactivity_timeout
        self.watch_timeout_seconds = watch_timeout_seconds
        self.backoff_base = backoff_base
        self.backoff_cap = backoff_cap
        self.last_sync_time: float | None = None
        self.resource_version: str | None = None
        self.relists = 0
        self.expirations = 0
        self._store: dict[str, Obj | bytes] = {}
        self._by_namespace: dict[str, dict[str, None]] = {}  # namespace -> its keys (ordered set)
        self._subscribers: list[Handler] = []
        self._synced = asyncio.Event()
        self._state = "idle"
        self.problem = ""  # why it is in backoff (the first error), for "not syncing" reports

    # -- read side

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    @property
    def state(self) -> str:
        """idle | listing | watching | backoff (for health checks and logs)."""
        return self._state

    def get(self, key: str) -> Obj | None:
        stored = self._store.get(key)
        return None if stored is None else self._unpack(stored)

    def list(self, namespace: str | None = None) -> Objs:
        """Every object, or one namespace's: a compact cache decodes each one it returns (~90 us)."""
        if namespace is None:
            return [self._unpack(v) for v in self._store.values()]
        return [self._unpack(self._store[k]) for k in self._by_namespace.get(namespace, ())]

    def list_json(self) -> Blobs:
        """Every object as JSON, without decoding a compact cache (a list body is these, joined)."""
        return [self._json(v) for v in self._store.values()]

    def get_json(self, key: str) -> bytes | None:
        """One object as JSON, without decoding a compact cache."""
        stored = self._store.get(key)
        if stored is None:
            return None
        return self._json(stored)

    def keys(self) -> Keys:
        return [*self._store]

    def __len__(self) -> int:
        return len(self._store)

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def __iter__(self) -> Iterator[Obj]:
        return iter(self.list())

    async def wait_synced(self, timeout: float | None = None) -> bool:
        """True once the first list is in the store; False if ``timeout`` passed first."""
        return await wait_event(self._synced, timeout)

    def subscribe(self, callback: Handler) -> Callable[[], None]:
        """Call ``callback(type, old, new)`` on every change; returns an unsubscribe function."""
        self._subscribers.append(callback)

        def unsubscribe() -> None:
            with contextlib.suppress(ValueError):
                self._subscribers.remove(callback)

        return unsubscribe

    # -- the loop

    async def run(self) -> None:
        """Run until cancelled. Never raises except CancelledError.

        The store and resourceVersion survive cancellation: running again resumes the watch where it
        stopped, and if that is too old the 410 re-list emits whatever changed in between.
        """
        backoff = Backoff(self.backoff_base, self.backoff_cap)
        need_list = self.resource_version is None  # a restarted run resumes the watch (410 -> re-list)
        try:
            while True:
                generation = self.client.generation
                try:
                    if need_list:
                        if self._state != "backoff":
                            self._set_state("listing")
                        await self._list()
                        need_list = False
                        backoff.reset()
                        self._set_state("watching")
                    if await self._watch_once():
                        backoff.reset()
                        continue
                    delay = backoff.next()
                    log.debug("watch ended at once; re-watching", cache=self.name, retry_in=f"{delay:.1f}s")
                    await self.client.pause(delay)
                except WatchExpired:
                    self.expirations += 1
                    if need_list:  # the list itself expired (stale continue token): don't spin
                        await self.client.pause(backoff.next())
                    else:
                        log.info(
                            "resourceVersion expired; re-listing", cache=self.name, rv=self.resource_version
                        )
                    need_list = True
                except ApiError as exc:
                    if isinstance(exc, TransportError) and self.client.generation != generation:
                        # swap_credentials closed the old sessions under us: expected, reconnect at once
                        log.info("credentials swapped; resuming", cache=self.name, rv=self.resource_version)
                        continue
                    if isinstance(exc, TransportError) and exc.abandoned:
                        # ended by the client as the server was lost or came back: try again at once (an
                        # attempt into a lost server fails on its own, and that one backs off)
                        log.debug("retrying at once", cache=self.name, error=exc)
                        continue
                    self._set_state("backoff", f"{exc}; retrying with backoff up to {self.backoff_cap:.0f} s")
                    await self.client.pause(backoff.next())
                except Exception:
                    # A bug (ours or a library's) must not take the whole node down with this one cache:
                    # say it loudly, with its traceback, then start over from a fresh list.
                    log.exception("unexpected error; re-listing with backoff", cache=self.name)
                    self._set_state("backoff", "unexpected error (traceback above)")
                    need_list = True
                    await self.client.pause(backoff.next())
        finally:
            self._set_state("idle")

    async def _list(self) -> None:
        new: dict[str, Obj] = {}
        cont: str | None = None
        rv: str | None = None
        while True:
            page = await self.client.list(
                self.resource,
                self.namespace,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                limit=PAGE_SIZE,
                continue_token=cont,
            )
            for item in page.get("items") or []:
                kept = self._keep(item)
                new[object_key(kept)] = kept
            meta = page.get("metadata") or {}
            cont = meta.get("continue") or None
            if cont is None:
                rv = meta.get("resourceVersion") or None
                break
        if not rv:
            raise ApiError(500, "BadList", f"{self.name}: list without resourceVersion")
        old = {k: self._unpack(v) for k, v in self._store.items()}
        self._store = {k: self._pack(v) for k, v in new.items()}
        self._by_namespace = {}
        for key in new:
            self._index(key)
        self.resource_version = str(rv)
        self.last_sync_time = time.time()
        if self.synced:
            self.relists += 1
        self._synced.set()
        changes = diff_stores(old, new)
        if changes:
            log.debug("listed", cache=self.name, rv=rv, objects=len(new), changes=len(changes))
        for etype, before, after in changes:
            self._emit(etype, before, after)

    async def _watch_once(self) -> bool:
        """Watch until the stream ends or goes silent; True if it was a healthy stream."""
        assert self.resource_version is not None
        started = time.monotonic()
        events = 0
        async with contextlib.aclosing(
            self.client.watch(
                self.resource,
                self.namespace,
                resource_version=self.resource_version,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
                timeout_seconds=self.watch_timeout_seconds,
                allow_bookmarks=True,
                announce_open=True,
            )
        ) as stream:
            it = aiter(stream)
            while True:
                try:
                    async with asyncio.timeout(self.inactivity_timeout):
                        ev = await anext(it)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    log.debug(
                        "no event; re-watching", cache=self.name, silent_for=f"{self.inactivity_timeout:.0f}s"
                    )
                    return True
                if ev.get("type") == WATCH_OPENED:
                    self._set_state("watching")  # a quiet resource must not read as "still in backoff"
                    continue
                events += 1
                self._apply(ev)
        return events > 0 or time.monotonic() - started >= MIN_HEALTHY_WATCH

    def _pack(self, obj: Obj) -> Obj | bytes:
        # Deflated against the cache's first object (kube.packing): a bench pod is 3.5 KB as JSON, ~20 KB
        # as dicts, ~220 bytes packed. (orjson's own bytes would also keep its grown write buffer.)
        return obj if self._packer is None else self._packer.pack(obj)

    def _unpack(self, stored: Obj | bytes) -> Obj:
        if isinstance(stored, bytes):
            assert self._packer is not None
            return self._packer.unpack(stored)
        return stored

    def _json(self, stored: Obj | bytes) -> bytes:
        if isinstance(stored, bytes):
            assert self._packer is not None
            return self._packer.unpack_json(stored)
        return orjson.dumps(stored)

    def _previous(self, stored: Obj | bytes) -> Mapping[str, Any]:
        return StoredObject(stored, self._unpack) if isinstance(stored, bytes) else stored

    def _index(self, key: str) -> None:
        ns, sep, _ = key.partition("/")
        if sep:
            self._by_namespace.setdefault(ns, {})[key] = None

    def _unindex(self, key: str) -> None:
        ns, sep, _ = key.partition("/")
        keys = self._by_namespace.get(ns) if sep else None
        if keys is not None:
            keys.pop(key, None)
            if not keys:
                del self._by_namespace[ns]

    def _keep(self, obj: Obj) -> Obj:
        obj = _slim(obj)
        return self._project(obj) if self._project is not None else obj

    def _apply(self, ev: Obj) -> None:
        etype = ev.get("type")
        obj: Obj = ev["object"]
        rv = _rv(obj)
        if etype == "BOOKMARK":
            if rv:
                self.resource_version = rv
            return
        obj = self._keep(obj)
        key = object_key(obj)
        if etype in ("ADDED", "MODIFIED"):
            stored = self._store.get(key)
            before = None if stored is None else self._previous(stored)
            self._store[key] = self._pack(obj)
            if before is None:
                self._index(key)
            self._emit("MODIFIED" if before is not None else "ADDED", before, obj)
        elif etype == "DELETED":
            if self._store.pop(key, None) is not None:
                self._unindex(key)
            self._emit("DELETED", obj, None)
        else:
            log.warning("ignoring watch event of unknown type", cache=self.name, type=repr(etype))
        if rv:
            self.resource_version = rv

    def _emit(self, etype: EventType, before: Mapping[str, Any] | None, after: Obj | None) -> None:
        for cb in [*self._subscribers]:
            try:
                cb(etype, before, after)
            except Exception:
                log.exception("subscriber failed", cache=self.name, subscriber=repr(cb), event=etype)

    def _set_state(self, state: str, detail: str = "") -> None:
        """One log line per state change, not per retry."""
        if state == self._state:
            return
        previous, self._state = self._state, state
        self.problem = detail if state == "backoff" else ""
        if state == "backoff":
            log.warning("list/watch failing", cache=self.name, detail=detail)
        elif state == "watching" and previous == "backoff":
            log.info("reconnected", cache=self.name, rv=self.resource_version)
        elif state == "listing" and not self.synced:
            log.info("initial list", cache=self.name)
        else:
            log.debug("state changed", cache=self.name, previous=previous, state=state)
