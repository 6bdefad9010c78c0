"""What every reflector shares, as Liqo's `reflection/generic` does it once: the pool guard and its one
exception, the task factory, the per-namespace-pair lifecycle, the result metrics, one writer per key.

A resource reflector keeps only what is its own: the caches of a pair, its handle and its writes. The
engine drives every reflector through `Reflector`, never by name.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from reflectors.context import ReflectionContext
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import ApiError, TransportError
from vkbridge.kube.reachability import Reachability

__all__ = [
    "KeyLocks",
    "Pair",
    "PairReflector",
    "PoolUnavailable",
    "Reflector",
    "TaskFactory",
    "count_result",
    "outcome_unknown",
    "pool_failure",
    "require_pool",
]


class PoolUnavailable(Exception):
    """The pool is not Connected, or a request to it got no answer: the key is parked until it returns."""


class TaskFactory(Protocol):
    """Creates a task in the engine's TaskGroup (``asyncio.TaskGroup.create_task`` fits)."""

    def __call__(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]: ...


def require_pool(reach: Reachability) -> None:
    """Before a remote write: while the pool is away, park instead of trying."""
    if not reach.connected:
        raise PoolUnavailable(reach.state.value)


def pool_failure(reach: Reachability, err: ApiError, what: str | None = None) -> PoolUnavailable | None:
    """A request that got no answer means the pool may be gone: ask the pinger to look now, and return the
    `PoolUnavailable` to raise (the key is parked). None for an answer of the API server."""
    if not isinstance(err, TransportError):
        return None
    reach.report_failure()
    return PoolUnavailable(what if what is not None else str(err))


def outcome_unknown(err: ApiError) -> bool:
    """Did a write fail without saying whether it was stored? No answer (timeout, reset, a swap), or a
    5xx (a gateway's 502/504, the API server's "may still be processing" timeout, a storage error): the
    object may exist. A 4xx (invalid, forbidden, a webhook's denial, 429) is a refusal: nothing stored."""
    return isinstance(err, TransportError) or err.status >= 500


def count_result(ctx: ReflectionContext, namespace: str, resource: str, ok: bool) -> None:
    """The work queue's result hook: one reflected item, or one error (the queue counts the retry)."""
    labels = ctx.metric_labels(namespace, resource)
    if ok:
        ctx.metrics.reflection_items.labels(**labels).inc()
    else:
        ctx.metrics.reflection_errors.labels(**labels).inc()


@dataclass(kw_only=True)
class Pair:
    """One reflected namespace pair as one reflector sees it: the caches it watches, the tasks it runs."""

    local: str
    remote: str
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)

    def caches(self) -> list[Cache]:
        return []

    @property
    def synced(self) -> bool:
        return all(cache.synced for cache in self.caches())


P = TypeVar("P", bound=Pair)
K = TypeVar("K", bound=Hashable)


class Reflector(Protocol):
    """A reflector as the engine drives it: workers, and one pair per reflected namespace."""

    name: str
    gates_pods: bool  # pods of a pair wait until this reflector's pair has synced

    async def run(self) -> None: ...

    def stop(self) -> None: ...

    def start_pair(self, local: str, remote: str, task_factory: TaskFactory) -> None: ...

    def stop_pair(self, local: str) -> None: ...

    def synced(self, local: str) -> bool: ...

    async def wait_synced(self, local: str) -> bool: ...

    def caches_of(self, local: str) -> list[Cache]: ...


class PairReflector(Generic[P]):
    """Pair lifecycle for a reflector: start runs the pair's caches and its `_prepare`, stop cancels them.

    Subclasses give `_new_pair` (the caches, subscribed), `_prepare` (what to do once they run) and
    `_forget_pair` (the state to drop when the namespace is no longer reflected)."""

    name: str = "reflector"
    gates_pods: bool = False

    def __init__(self) -> None:
        self.pairs: dict[str, P] = {}

    def start_pair(self, local: str, remote: str, task_factory: TaskFactory) -> None:
        """Start reflecting ``remote`` for ``local``; a pair to another remote is stopped first."""
        current = self.pairs.get(local)
        if current is not None:
            if current.remote == remote:
                return
            self.stop_pair(local)
        pair = self._new_pair(local, remote)
        self.pairs[local] = pair
        for cache in pair.caches():
            pair.tasks.append(task_factory(cache.run(), name=f"cache-{cache.name}"))
        pair.tasks.append(task_factory(self._prepare(pair), name=f"{self.name}-sync-{local}"))

    def stop_pair(self, local: str) -> None:
        pair = self.pairs.pop(local, None)
        if pair is None:
            return
        for task in pair.tasks:
            task.cancel()
        self._forget_pair(pair)

    def synced(self, local: str) -> bool:
        pair = self.pairs.get(local)
        return pair is not None and pair.synced

    async def wait_synced(self, local: str) -> bool:
        """Wait for the pair's caches; False if the namespace is not (or no longer) reflected."""
        pair = self.pairs.get(local)
        if pair is None:
            return False
        for cache in pair.caches():
            await cache.wait_synced()
        return self.pairs.get(local) is pair

    def caches_of(self, local: str) -> list[Cache]:
        pair = self.pairs.get(local)
        return pair.caches() if pair is not None else []

    def _new_pair(self, local: str, remote: str) -> P:
        raise NotImplementedError

    async def _prepare(self, pair: P) -> None:
        raise NotImplementedError

    def _forget_pair(self, pair: P) -> None:
        """Drop what the reflector kept for the pair (nothing by default)."""


@dataclass
class _Lock:
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    users: int = 0


class KeyLocks(Generic[K]):
    """One writer per key at a time (several workers share an object); a lock lives while it is used."""

    def __init__(self) -> None:
        self._locks: dict[K, _Lock] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        entry = self._locks.setdefault(key, _Lock())
        entry.users += 1
        try:
            async with entry.lock:
                yield
        finally:
            entry.users -= 1
            if entry.users == 0:
                self._locks.pop(key, None)

    def __len__(self) -> int:
        return len(self._locks)
