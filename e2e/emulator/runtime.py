"""List+watch caches and level-based work queues: the controller-runtime shape, in a few lines.

Handlers never trust event payloads: they read the caches, so any key can be re-queued at any time and a
restarted emulator converges from whatever it finds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import Awaitable, Callable

from .kube import ApiError, Kube, Obj, WatchExpired

log = logging.getLogger(__name__)

_BACKOFF_BASE_S = 0.05
_BACKOFF_CAP_S = 5.0


def obj_key(obj: Obj) -> str:
    md = obj["metadata"]
    return f"{md['namespace']}/{md['name']}" if md.get("namespace") else md["name"]


def split_key(key: str) -> tuple[str | None, str]:
    ns, _, name = key.rpartition("/")
    return (ns or None), name


class Informer:
    """Keeps ``cache`` equal to the server's view of one collection and calls handlers on every change."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        name: str = "",
    ) -> None:
        self.kube = kube
        self.path = path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.name = name or path
        self.cache: dict[str, Obj] = {}
        self.synced = asyncio.Event()
        self._handlers: list[Callable[[Obj], None]] = []

    def on_change(self, handler: Callable[[Obj], None]) -> None:
        """handler(obj) on add, update and delete (with the last state seen); it should only enqueue keys."""
        self._handlers.append(handler)

    def get(self, key: str) -> Obj | None:
        return self.cache.get(key)

    def values(self) -> list[Obj]:
        return list(self.cache.values())

    def _emit(self, obj: Obj) -> None:
        for h in self._handlers:
            try:
                h(obj)
            except Exception:  # a broken handler must not kill the watch
                log.exception("%s: handler failed for %s", self.name, obj_key(obj))

    async def _list(self) -> str:
        params = {}
        if self.label_selector:
            params["labelSelector"] = self.label_selector
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        lst = await self.kube.request("GET", self.path, params=params or None)
        fresh = {obj_key(o): o for o in lst.get("items", [])}
        old = self.cache
        self.cache = fresh
        for k, o in fresh.items():
            prev = old.get(k)
            if prev is None or prev["metadata"].get("resourceVersion") != o["metadata"].get(
                "resourceVersion"
            ):
                self._emit(o)
        for k in old.keys() - fresh.keys():
            self._emit(old[k])
        return str(lst["metadata"]["resourceVersion"])

    async def run(self) -> None:
        failures = 0
        rv: str | None = None
        while True:
            try:
                if rv is None:
                    rv = await self._list()
                    self.synced.set()
                async for ev in self.kube.watch(
                    self.path, rv, label_selector=self.label_selector, field_selector=self.field_selector
                ):
                    failures = 0
                    obj = ev["object"]
                    rv = obj["metadata"].get("resourceVersion", rv)
                    if ev["type"] == "BOOKMARK":
                        continue
                    k = obj_key(obj)
                    if ev["type"] == "DELETED":
                        self.cache.pop(k, None)
                    else:
                        self.cache[k] = obj
                    self._emit(obj)
            except asyncio.CancelledError:
                raise
            except WatchExpired:
                rv = None
            except Exception as e:  # network blips, API restarts: relist with capped backoff
                failures += 1
                delay = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**failures) * (0.5 + random.random())
                level = logging.WARNING if failures >= 3 else logging.INFO  # one blip is normal
                log.log(level, "%s: watch failed (%s); relisting in %.2fs", self.name, e, delay)
                rv = None
                await asyncio.sleep(delay)


Reconcile = Callable[[str], Awaitable[float | None]]


class Controller:
    """A work queue of keys: deduplicated, one worker per key at a time, capped exponential retry.

    ``reconcile(key)`` returns None when done or a delay in seconds to look again (timed requeue).
    """

    def __init__(self, name: str, reconcile: Reconcile, *, workers: int = 1) -> None:
        self.name = name
        self._reconcile = reconcile
        self._workers = workers
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._queued: set[str] = set()
        self._active: set[str] = set()
        self._redo: set[str] = set()
        self._failures: dict[str, int] = {}
        self._timers: dict[str, asyncio.TimerHandle] = {}

    def enqueue(self, key: str) -> None:
        if key in self._active:
            self._redo.add(key)
        elif key not in self._queued:
            self._queued.add(key)
            self._queue.put_nowait(key)

    def follow(self, *informers: Informer) -> Controller:
        """Queue the key of every object these informers see change (the common wiring); returns self."""
        for inf in informers:
            inf.on_change(lambda o: self.enqueue(obj_key(o)))
        return self

    def enqueue_after(self, key: str, delay: float) -> None:
        old = self._timers.pop(key, None)
        if old is not None:
            # Keep the earlier of the two deadlines.
            if old.when() <= asyncio.get_running_loop().time() + delay:
                self._timers[key] = old
                return
            old.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(delay, self._fire, key)

    def _fire(self, key: str) -> None:
        self._timers.pop(key, None)
        self.enqueue(key)

    async def _worker(self) -> None:
        while True:
            key = await self._queue.get()
            self._queued.discard(key)
            self._active.add(key)
            try:
                again = await self._reconcile(key)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                n = self._failures.get(key, 0) + 1
                self._failures[key] = n
                delay = min(_BACKOFF_CAP_S, _BACKOFF_BASE_S * 2**n)
                level = logging.DEBUG if isinstance(e, ApiError) and e.conflict else logging.WARNING
                log.log(level, "%s: %s failed (attempt %d, retry in %.2fs): %s", self.name, key, n, delay, e)
                self.enqueue_after(key, delay)
            else:
                self._failures.pop(key, None)
                if again is not None:
                    self.enqueue_after(key, max(0.0, again))
            finally:
                self._active.discard(key)
                if key in self._redo:
                    self._redo.discard(key)
                    self.enqueue(key)

    async def run(self) -> None:
        try:
            async with asyncio.TaskGroup() as tg:
                for _ in range(self._workers):
                    tg.create_task(self._worker())
        finally:
            for t in self._timers.values():
                t.cancel()
            self._timers.clear()


class OneController:
    """A component run by one work queue, ``self.ctrl`` (what app.run starts is ``controllers``)."""

    ctrl: Controller

    @property
    def controllers(self) -> list[Controller]:
        return [self.ctrl]


async def wait_synced(*informers: Informer, timeout: float = 60.0) -> None:
    async with asyncio.timeout(timeout):
        for inf in informers:
            await inf.synced.wait()


async def forget_errors(coro: Awaitable[object]) -> object:
    """For fire-and-forget side effects (events): never let them fail the caller."""
    with contextlib.suppress(Exception):
        return await coro
    return None
