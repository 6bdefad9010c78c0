"""A rate-limited work queue with client-go semantics, for asyncio.

Reflection is level-based, so a queue only has to guarantee three things (``client-go/util/workqueue``):
a key waits in the queue at most once (dirty set); a key is never handed to two workers at once
(processing set); and a key added while it is being processed runs once more after ``done``.
Retries go through a rate limiter (default: client-go's ``DefaultControllerRateLimiter``).

One deliberate difference: ``shutdown()`` is immediate. client-go lets ``Get`` drain the queued keys;
here ``get()`` raises ``QueueShutDown`` at once, because every handler is idempotent and a restarted
process re-lists everything anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

from vkbridge.kube.queuemetrics import QueueMetrics
from vkbridge.kube.ratelimit import RateLimiter, default_controller_rate_limiter
from vkbridge.logs import get_logger

__all__ = ["QueueShutDown", "RequeueAfter", "ResultHook", "WorkQueue", "run_workers"]

log = get_logger("vkbridge.workqueue")

K = TypeVar("K", bound=Hashable)


def _item(queue: str, key: Hashable) -> dict[str, object]:
    """The key's log context: `pod=<ns>/<name>` on the pods queue, as in the pod reflector's own lines."""
    return {"pod" if queue == "pods" else "key": key}


class QueueShutDown(Exception):
    """Raised by ``WorkQueue.get()`` once the queue is shut down: the worker should return."""


@dataclass(frozen=True, slots=True)
class RequeueAfter:
    """A handler's way to say "fine for now, look again in ``delay`` seconds" (not a failure)."""

    delay: float


ResultHook = Callable[[K, bool, float], None]
"""``on_result(key, ok, duration_seconds)``, called after every handle (metrics)."""


class WorkQueue(Generic[K]):
    """FIFO of unique keys; at most one worker per key; delayed and rate-limited re-adds.

    Must be used from one event loop. Not thread-safe (there are no threads). ``metrics`` (optional) is
    told of every add, get, done and retry (``vkbridge.kube.queuemetrics``); it changes nothing here.
    """

    def __init__(
        self, name: str = "", rate_limiter: RateLimiter | None = None, metrics: QueueMetrics | None = None
    ) -> None:
        self.name = name
        self.metrics = metrics if metrics is not None else QueueMetrics()
        self._limiter: RateLimiter = (
            rate_limiter if rate_limiter is not None else default_controller_rate_limiter()
        )
        self._queue: deque[K] = deque()
        self._dirty: set[K] = set()
        self._processing: set[K] = set()
        self._waiting: dict[K, tuple[float, asyncio.TimerHandle]] = {}
        self._failed: set[K] = set()  # keys the limiter holds history for, so reset_backoff can forget them
        self._getters: deque[asyncio.Future[None]] = deque()
        self._idle = asyncio.Event()  # set while nothing is being processed (for shutdown_with_drain)
        self._idle.set()
        self._shutting_down = False

    # -- introspection (metrics) ------------------------------------------------------------------------

    def __len__(self) -> int:
        """Keys queued and ready (not the ones being processed or waiting on a timer); the depth metric
        also counts a key re-added while it is processed, as client-go's does."""
        return len(self._queue)

    @property
    def in_flight(self) -> int:
        """Keys handed out by ``get()`` and not yet ``done()``."""
        return len(self._processing)

    @property
    def waiting(self) -> int:
        """Keys waiting on an ``add_after`` / ``add_rate_limited`` timer."""
        return len(self._waiting)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    # -- core queue --------------------------------------------------------------------------------------

    def add(self, key: K) -> None:
        """Queue ``key`` unless it is already queued; if it is being processed, queue it after ``done``."""
        if self._shutting_down or key in self._dirty:
            return
        self.metrics.add(key)
        self._dirty.add(key)
        if key in self._processing:
            return
        self._queue.append(key)
        self._wakeup_next()

    async def get(self) -> K:
        """Wait for the oldest ready key and mark it as processing; the caller must call ``done(key)``."""
        while not self._queue and not self._shutting_down:
            getter = asyncio.get_running_loop().create_future()
            self._getters.append(getter)
            try:
                await getter
            except BaseException:
                getter.cancel()
                with contextlib.suppress(ValueError):
                    self._getters.remove(getter)
                # We may have been woken and cancelled at once: pass the wakeup on.
                if self._queue and not getter.cancelled():
                    self._wakeup_next()
                raise
        if self._shutting_down:
            raise QueueShutDown(self.name)
        key = self._queue.popleft()
        self.metrics.get(key)
        self._processing.add(key)
        self._dirty.discard(key)
        self._idle.clear()
        return key

    def done(self, key: K) -> None:
        """Finish processing ``key``; if it was added meanwhile, queue it again (once)."""
        self.metrics.done(key)
        self._processing.discard(key)
        if key in self._dirty:
            self._queue.append(key)
            self._wakeup_next()
        if not self._processing:
            self._idle.set()

    def _wakeup_next(self) -> None:
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)
                break

    # -- delays and rate limiting ------------------------------------------------------------------------

    def add_after(self, key: K, delay: float) -> None:
        """Add ``key`` after ``delay`` seconds; if it is already waiting, the earlier deadline wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(key)
            return
        loop = asyncio.get_running_loop()
        deadline = loop.time() + delay
        existing = self._waiting.get(key)
        if existing is not None:
            if existing[0] <= deadline:
                return
            existing[1].cancel()
        self._waiting[key] = (deadline, loop.call_later(delay, self._fire, key))

    def _fire(self, key: K) -> None:
        self._waiting.pop(key, None)
        self.add(key)

    def add_rate_limited(self, key: K) -> float:
        """Add ``key`` after the delay the rate limiter gives it; returns that delay (for the log)."""
        if self._shutting_down:
            return 0.0
        self.metrics.retry()
        delay = self._limiter.when(key)
        self._failed.add(key)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        """Clear the failure history of ``key`` (it succeeded); pending timers are left alone."""
        self._limiter.forget(key)
        self._failed.discard(key)

    def num_requeues(self, key: K) -> int:
        return self._limiter.num_requeues(key)

    def reset_backoff(self) -> None:
        """Forget every key's failures and fire every pending timer now (the pool came back)."""
        for key in self._failed:
            self._limiter.forget(key)
        self._failed.clear()
        waiting, self._waiting = self._waiting, {}
        for key, (_, handle) in waiting.items():
            handle.cancel()
            self.add(key)

    # -- shutdown ----------------------------------------------------------------------------------------

    def shutdown(self) -> None:
        """Stop: ``get()`` raises ``QueueShutDown``, adds are ignored, queued keys and timers are dropped."""
        self._shutting_down = True
        for _, handle in self._waiting.values():
            handle.cancel()
        self._waiting.clear()
        self._queue.clear()
        self._dirty.clear()
        self.metrics.shutdown()
        while self._getters:
            getter = self._getters.popleft()
            if not getter.done():
                getter.set_result(None)

    async def shutdown_with_drain(self) -> None:
        """``shutdown()``, then wait until every key handed out has been ``done()``."""
        self.shutdown()
        await self._idle.wait()


async def run_workers(
    queue: WorkQueue[K],
    handler: Callable[[K], Awaitable[RequeueAfter | None]],
    n: int,
    name: str,
    *,
    on_result: ResultHook[K] | None = None,
    slow_threshold: float = 1.0,
) -> None:
    """Run ``n`` workers on ``queue`` until it shuts down (or this coroutine is cancelled).

    Per key, like Liqo's ``processNextWorkItem``: success forgets the backoff; ``RequeueAfter(d)`` forgets
    it and re-adds after ``d``; an exception re-adds rate-limited and logs one line. A worker cancelled
    mid-handle re-adds its key so a queue that outlives its workers loses nothing.
    """
    if n < 1:
        raise ValueError(f"need at least one worker, got {n}")
    async with asyncio.TaskGroup() as tg:
        for i in range(n):
            tg.create_task(
                _worker(queue, handler, name, on_result, slow_threshold), name=f"{name}-worker-{i}"
            )


async def _worker(
    queue: WorkQueue[K],
    handler: Callable[[K], Awaitable[RequeueAfter | None]],
    name: str,
    on_result: ResultHook[K] | None,
    slow_threshold: float,
) -> None:
    loop = asyncio.get_running_loop()
    while True:
        try:
            key = await queue.get()
        except QueueShutDown:
            return
        start = loop.time()
        ok = False
        try:
            result = await handler(key)
            ok = True
        except asyncio.CancelledError:
            queue.add(key)  # runs again after done() if the queue lives on
            raise
        except Exception as err:
            delay = queue.add_rate_limited(key)
            warn = log.warning_exc if log.enabled(logging.DEBUG) else log.warning  # traceback at -v 4
            warn(
                "handler failed; retrying",
                queue=name,
                **_item(name, key),
                retry=queue.num_requeues(key),
                retry_in=f"{delay:.3f}s",
                error=f"{type(err).__name__}: {err}",
            )
        else:
            queue.forget(key)
            if isinstance(result, RequeueAfter):
                queue.add_after(key, result.delay)
        finally:
            queue.done(key)
        duration = loop.time() - start
        if duration >= slow_threshold:
            log.info(
                "slow handler",
                queue=name,
                **_item(name, key),
                took=f"{duration:.3f}s",
            )
        if on_result is not None:
            try:
                on_result(key, ok, duration)
            except Exception:
                log.exception("on_result hook failed", queue=name, **_item(name, key))
