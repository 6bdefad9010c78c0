"""Work queue metrics as client-go keeps them (``k8s.io/client-go/util/workqueue/metrics.go``).

``WorkQueue`` calls ``add`` when a key becomes dirty, ``get`` when a worker takes it, ``done`` when the
worker is finished and ``retry`` when a failed key is re-added rate-limited. From that: depth (keys added
and not yet taken, so a key re-added while it is processed counts, as in client-go), the time a key
waited (add -> get), the time a worker held it (get -> done), adds, retries, and at scrape time the
seconds of work in progress and the longest-running one (a stuck handler shows there first).

One difference from client-go: ``retries`` counts failures only (``add_rate_limited``); client-go counts
every ``AddAfter``, which here would also count a handler's deliberate ``RequeueAfter``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Protocol

__all__ = ["QueueMetrics", "QueueSinks"]


class _Gauge(Protocol):
    def set(self, value: float) -> None: ...


class _Counter(Protocol):
    def inc(self, amount: float = 1) -> None: ...


class _Histogram(Protocol):
    def observe(self, amount: float) -> None: ...


@dataclass(frozen=True, slots=True)
class QueueSinks:
    """Where one queue's figures go (prometheus_client children labelled with the queue's name)."""

    depth: _Gauge
    adds: _Counter
    queue_duration: _Histogram
    work_duration: _Histogram
    retries: _Counter


class QueueMetrics:
    """One queue's bookkeeping; without sinks every call is a no-op (a queue nobody watches)."""

    def __init__(self, sinks: QueueSinks | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._sinks = sinks
        self._clock = clock
        self._added: dict[Hashable, float] = {}  # key -> when it became dirty (not yet taken)
        self._started: dict[Hashable, float] = {}  # key -> when a worker took it

    def add(self, key: Hashable) -> None:
        if self._sinks is None:
            return
        self._sinks.adds.inc()
        self._added.setdefault(key, self._clock())
        self._sinks.depth.set(len(self._added))

    def get(self, key: Hashable) -> None:
        if self._sinks is None:
            return
        now = self._clock()
        self._started[key] = now
        added = self._added.pop(key, None)
        self._sinks.depth.set(len(self._added))
        if added is not None:
            self._sinks.queue_duration.observe(now - added)

    def done(self, key: Hashable) -> None:
        started = self._started.pop(key, None)
        if self._sinks is not None and started is not None:
            self._sinks.work_duration.observe(self._clock() - started)

    def retry(self) -> None:
        if self._sinks is not None:
            self._sinks.retries.inc()

    def shutdown(self) -> None:
        """The queue dropped its keys: none is waiting any more."""
        self._added.clear()
        if self._sinks is not None:
            self._sinks.depth.set(0)

    def unfinished_work_seconds(self) -> float:
        """Seconds of work in progress, summed over the keys being processed (client-go's gauge)."""
        now = self._clock()
        return sum(now - t for t in self._started.values())

    def longest_running_processor_seconds(self) -> float:
        now = self._clock()
        return max((now - t for t in self._started.values()), default=0.0)
