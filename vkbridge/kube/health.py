"""Named health checks as Kubernetes components serve them (`/livez`, `/readyz`), and the two liveness
sources that mean something for an asyncio process: an event-loop lag watchdog and the long-lived tasks.

A check is a function answering None (ok) or the reason it fails. The rendering follows
k8s.io/apiserver/pkg/server/healthz: "ok" when everything passes; otherwise (or with `?verbose`) one
`[+]name ok` / `[-]name failed: reason` line per check and a last line saying whether the set passed.
Pure apart from `LoopWatchdog.run`: the clock is injected, nothing here does I/O.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

__all__ = ["Check", "HealthChecks", "LoopWatchdog", "Outcome", "TaskWatch"]

Check = Callable[[], str | None]


@dataclass(frozen=True, slots=True)
class Outcome:
    name: str
    reason: str | None  # None: the check passed

    @property
    def ok(self) -> bool:
        return self.reason is None

    def line(self) -> str:
        return f"[+]{self.name} ok" if self.ok else f"[-]{self.name} failed: {self.reason}"


class HealthChecks:
    """The ordered, named checks of one endpoint (`livez` or `readyz`)."""

    def __init__(self, endpoint: str, *, failure_status: int = 503) -> None:
        self.endpoint = endpoint
        self.failure_status = failure_status
        self._checks: dict[str, Check] = {}

    @property
    def names(self) -> list[str]:
        return list(self._checks)

    def add(self, name: str, check: Check) -> None:
        """Register (or replace) a check; names are path segments: `/readyz/<name>`."""
        if not name or "/" in name:
            raise ValueError(f"invalid check name {name!r}")
        self._checks[name] = check

    def run_one(self, name: str) -> Outcome | None:
        """The outcome of one check; None when no check has that name."""
        check = self._checks.get(name)
        return None if check is None else Outcome(name, _safely(check))

    def run(self, exclude: Iterable[str] = ()) -> list[Outcome]:
        skip = set(exclude)
        return [Outcome(n, _safely(c)) for n, c in self._checks.items() if n not in skip]

    def failing(self) -> list[str]:
        return [o.name for o in self.run() if not o.ok]

    def render(self, *, verbose: bool = False, exclude: Iterable[str] = ()) -> tuple[int, str]:
        """(HTTP status, body) for the whole set, as kube-apiserver answers `/livez` and `/readyz`."""
        skip = [n for n in exclude if n in self._checks]
        outcomes = self.run(skip)
        ok = all(o.ok for o in outcomes)
        if ok and not verbose:
            return 200, "ok"
        lines = [o.line() for o in outcomes] + [f"[+]{n} excluded: ok" for n in skip]
        lines.append(f"{self.endpoint} check {'passed' if ok else 'failed'}")
        return (200 if ok else self.failure_status), "\n".join(lines) + "\n"

    def render_one(self, name: str) -> tuple[int, str]:
        outcome = self.run_one(name)
        if outcome is None:
            return 404, f"no {self.endpoint} check named {name!r}; checks: {', '.join(self.names)}\n"
        if outcome.ok:
            return 200, "ok"
        return self.failure_status, outcome.line() + "\n"


def _safely(check: Check) -> str | None:
    try:
        return check()
    except Exception as exc:  # a broken check reads as failing, never as a crashed endpoint
        return f"check raised {type(exc).__name__}: {exc}"


class LoopWatchdog:
    """Ticks every `interval` on the event loop and remembers how late each tick came.

    A loop that is stalled cannot answer a probe at all (the probe's timeout fails it, which is right);
    what the watchdog adds is the stall seen from the moment the loop runs again, and lag that comes
    back: `check()` fails while the last tick is overdue by more than `max_lag`, and for `window`
    seconds after a tick that was that late. One hiccup therefore fails at most a probe or two, which
    the probe's failureThreshold absorbs; a loop that keeps stalling stays failed and is restarted.
    """

    def __init__(
        self,
        *,
        interval: float = 1.0,
        max_lag: float = 5.0,
        window: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.interval, self.max_lag, self.window = interval, max_lag, window
        self._clock = clock
        self._last = clock()  # creation counts as a tick: a new watchdog is healthy
        self._late: tuple[float, float] | None = None  # (when, lag) of the last tick over max_lag
        self.lag = 0.0  # how late the last tick was (seconds)

    def tick(self) -> None:
        now = self._clock()
        self.lag = max(0.0, now - self._last - self.interval)
        self._last = now
        if self.lag > self.max_lag:
            self._late = (now, self.lag)

    def check(self) -> str | None:
        now = self._clock()
        overdue = now - self._last - self.interval
        if overdue > self.max_lag:
            return f"event loop stalled: no tick for {now - self._last:.1f}s (limit {self.max_lag:g}s late)"
        if self._late is not None:
            when, lag = self._late
            if now - when <= self.window:
                return f"event loop was {lag:.1f}s late {now - when:.0f}s ago (limit {self.max_lag:g}s)"
            self._late = None
        return None

    async def run(self) -> None:
        """Tick until cancelled (run it as a task; if it dies, `check()` fails as a stall)."""
        while True:
            await asyncio.sleep(self.interval)
            self.tick()


class TaskWatch:
    """The long-lived tasks of the process: every one must still run; one that ended fails liveness.

    A task that raises inside a TaskGroup ends the process anyway; one that returns (a loop that exits
    by mistake) would otherwise go unnoticed while the process looks healthy.
    """

    def __init__(self) -> None:
        self._tasks: dict[str, asyncio.Task[object]] = {}

    def add(self, task: asyncio.Task[object], name: str | None = None) -> None:
        self._tasks[name or task.get_name()] = task

    def check(self) -> str | None:
        ended = [_ended(name, t) for name, t in self._tasks.items() if t.done()]
        return "; ".join(ended) if ended else None


def _ended(name: str, task: asyncio.Task[object]) -> str:
    if task.cancelled():
        return f"task {name} was cancelled"
    exc = task.exception()
    if exc is not None:
        return f"task {name} failed: {type(exc).__name__}: {str(exc)[:200]}"
    return f"task {name} returned"
