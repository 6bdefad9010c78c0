"""WorkQueue invariants (client-go semantics) and the worker loop."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable

import pytest

from vkbridge.kube.queuemetrics import QueueMetrics, QueueSinks
from vkbridge.kube.ratelimit import ItemExponentialLimiter
from vkbridge.kube.workqueue import QueueShutDown, RequeueAfter, WorkQueue, run_workers
from vkbridge.logs import TextFormatter


class RecordingLimiter:
    """Fixed delays, recording the calls: lets tests see what the queue asked for."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.failures: dict[Hashable, int] = {}
        self.forgotten: list[Hashable] = []

    def when(self, item: Hashable) -> float:
        self.failures[item] = self.failures.get(item, 0) + 1
        return self.delay

    def forget(self, item: Hashable) -> None:
        self.failures.pop(item, None)
        self.forgotten.append(item)

    def num_requeues(self, item: Hashable) -> int:
        return self.failures.get(item, 0)


async def get_now(q: WorkQueue[str]) -> str:
    """get() that must not block: the key is expected to be ready already."""
    async with asyncio.timeout(1.0):
        return await q.get()


async def assert_empty_for(q: WorkQueue[str], seconds: float) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(seconds):
            await q.get()


# -- core queue ----------------------------------------------------------------------------------------


async def test_fifo_order() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    for key in ["a", "b", "c"]:
        q.add(key)
    assert [await get_now(q) for _ in range(3)] == ["a", "b", "c"]


async def test_dedup_while_queued() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    for key in ["a", "b", "a", "a", "b", "c"]:
        q.add(key)
    assert len(q) == 3
    assert [await get_now(q) for _ in range(3)] == ["a", "b", "c"]
    assert len(q) == 0


async def test_key_in_processing_is_not_handed_out_again() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add("a")
    assert await get_now(q) == "a"
    q.add("a")
    assert len(q) == 0  # parked until done()
    assert q.in_flight == 1
    await assert_empty_for(q, 0.05)


async def test_readd_during_processing_runs_exactly_once_more() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add("a")
    q.add("b")
    assert await get_now(q) == "a"
    q.add("a")
    q.add("a")
    q.done("a")
    assert len(q) == 2
    assert [await get_now(q) for _ in range(2)] == ["b", "a"]  # the re-added key goes to the back
    q.done("a")
    q.done("b")
    assert len(q) == 0
    assert q.in_flight == 0


async def test_done_without_readd_does_not_requeue() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add("a")
    key = await get_now(q)
    q.done(key)
    assert len(q) == 0
    q.add("a")  # a new add after done is a fresh item
    assert await get_now(q) == "a"


async def test_waiting_getters_are_served_in_order() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    got: list[tuple[int, str]] = []

    async def getter(i: int) -> None:
        got.append((i, await q.get()))

    tasks = [asyncio.create_task(getter(i)) for i in range(3)]
    await asyncio.sleep(0)
    for key in ["x", "y", "z"]:
        q.add(key)
    await asyncio.gather(*tasks)
    assert got == [(0, "x"), (1, "y"), (2, "z")]


async def test_cancelled_getter_does_not_swallow_a_key() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    first = asyncio.create_task(q.get())
    second = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add("a")  # wakes `first`...
    first.cancel()  # ...which is cancelled before it runs
    assert await asyncio.wait_for(second, 1.0) == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


# -- add_after -------------------------------------------------------------------------------------------


async def test_add_after_orders_by_deadline() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add_after("late", 0.15)
    q.add_after("soon", 0.01)
    q.add_after("now", 0)
    assert q.waiting == 2
    assert await get_now(q) == "now"
    assert await get_now(q) == "soon"
    assert await get_now(q) == "late"
    assert q.waiting == 0


async def test_add_after_earliest_deadline_wins() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add_after("a", 30.0)
    q.add_after("a", 0.01)  # shorter: replaces the 30 s timer
    q.add_after("a", 60.0)  # longer: ignored
    assert q.waiting == 1
    assert await get_now(q) == "a"
    assert q.waiting == 0  # the 30 s and 60 s timers are gone
    q.done("a")
    await assert_empty_for(q, 0.05)


async def test_add_after_is_deduped_with_a_queued_key() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add("a")
    q.add_after("a", 0.01)
    await asyncio.sleep(0.03)
    assert len(q) == 1
    assert await get_now(q) == "a"


# -- rate limiting ---------------------------------------------------------------------------------------


async def test_rate_limited_backoff_doubles_and_caps() -> None:
    limiter = ItemExponentialLimiter(base=0.001, cap=0.004)
    q: WorkQueue[str] = WorkQueue("t", rate_limiter=limiter)
    delays = []
    for _ in range(5):
        delays.append(q.add_rate_limited("a"))
        assert await get_now(q) == "a"
        q.done("a")
    assert delays == pytest.approx([0.001, 0.002, 0.004, 0.004, 0.004])
    assert q.num_requeues("a") == 5
    q.forget("a")
    assert q.num_requeues("a") == 0
    assert q.add_rate_limited("a") == pytest.approx(0.001)


async def test_rate_limited_uses_the_limiter_delay() -> None:
    limiter = RecordingLimiter(delay=30.0)
    q: WorkQueue[str] = WorkQueue("t", rate_limiter=limiter)
    assert q.add_rate_limited("a") == 30.0
    assert limiter.failures == {"a": 1}
    assert len(q) == 0
    assert q.waiting == 1
    q.shutdown()


async def test_default_limiter_is_client_go_default() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    assert q.add_rate_limited("a") == pytest.approx(0.005)
    assert q.add_rate_limited("a") == pytest.approx(0.010)
    assert q.num_requeues("a") == 2


async def test_reset_backoff_forgets_and_fires_pending_timers() -> None:
    limiter = ItemExponentialLimiter(base=100.0, cap=1000.0)
    q: WorkQueue[str] = WorkQueue("t", rate_limiter=limiter)
    for key in ["a", "b"]:
        q.add_rate_limited(key)
        q.add_rate_limited(key)
    q.add_after("c", 0.05)
    assert q.waiting == 3
    q.reset_backoff()
    assert q.waiting == 0
    assert q.num_requeues("a") == q.num_requeues("b") == 0
    keys = [await get_now(q) for _ in range(3)]
    assert sorted(keys) == ["a", "b", "c"]
    for key in keys:
        q.done(key)
    await assert_empty_for(q, 0.1)  # the old timers were cancelled, not left to fire again
    assert q.add_rate_limited("a") == 100.0  # back to base
    q.shutdown()


# -- shutdown --------------------------------------------------------------------------------------------


async def test_shutdown_wakes_getters_and_cancels_timers() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    waiter = asyncio.create_task(q.get())
    await asyncio.sleep(0)
    q.add_after("a", 0.01)
    q.shutdown()
    with pytest.raises(QueueShutDown):
        await asyncio.wait_for(waiter, 1.0)
    assert q.waiting == 0
    await asyncio.sleep(0.03)
    q.add("b")
    q.add_after("c", 0)
    assert len(q) == 0
    assert q.shutting_down
    with pytest.raises(QueueShutDown):
        await get_now(q)


async def test_shutdown_with_drain_waits_for_in_flight_keys() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    q.add("a")
    key = await get_now(q)
    drain = asyncio.create_task(q.shutdown_with_drain())
    await asyncio.sleep(0.01)
    assert not drain.done()
    q.done(key)
    await asyncio.wait_for(drain, 1.0)


# -- run_workers -----------------------------------------------------------------------------------------


async def test_workers_never_process_one_key_concurrently() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    active: dict[str, int] = {}
    max_active: dict[str, int] = {}
    runs: dict[str, int] = {}
    all_ran = asyncio.Event()

    async def handler(key: str) -> None:
        active[key] = active.get(key, 0) + 1
        max_active[key] = max(max_active.get(key, 0), active[key])
        runs[key] = runs.get(key, 0) + 1
        if runs[key] < 5:
            q.add(key)  # re-add while processing: must wait for done()
        await asyncio.sleep(0.001)
        active[key] -= 1
        if sum(runs.values()) == 15 and not any(active.values()):
            all_ran.set()

    async def stop() -> None:
        await all_ran.wait()
        await q.shutdown_with_drain()

    for key in ["a", "b", "c"]:
        q.add(key)
    async with asyncio.timeout(5):
        await asyncio.gather(run_workers(q, handler, 4, "t"), stop())
    assert runs == {"a": 5, "b": 5, "c": 5}
    assert max_active == {"a": 1, "b": 1, "c": 1}


async def test_worker_success_forgets_and_failure_retries_with_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limiter = RecordingLimiter(delay=0.0)
    q: WorkQueue[str] = WorkQueue("t", rate_limiter=limiter)
    results: list[tuple[str, bool]] = []
    attempts = 0

    async def handler(key: str) -> None:
        nonlocal attempts
        attempts += 1
        if attempts < 3:
            raise RuntimeError(f"boom {attempts}")

    def on_result(key: str, ok: bool, duration: float) -> None:
        assert duration >= 0
        results.append((key, ok))
        if ok:
            q.shutdown()

    q.add("ns/pod")
    with caplog.at_level(logging.WARNING, logger="vkbridge.workqueue"):
        await asyncio.wait_for(run_workers(q, handler, 2, "pods", on_result=on_result), 5)
    assert results == [("ns/pod", False), ("ns/pod", False), ("ns/pod", True)]
    assert limiter.forgotten == ["ns/pod"]
    assert limiter.failures == {}
    lines = [TextFormatter().format(r) for r in caplog.records if r.name == "vkbridge.workqueue"]
    assert len(lines) == 2
    assert "ns/pod" in lines[0]
    assert "RuntimeError: boom 1" in lines[0]
    assert "0.000s" in lines[0]
    assert all("\n" not in line for line in lines)
    assert q.in_flight == 0


async def test_worker_requeue_after_is_not_a_failure() -> None:
    limiter = RecordingLimiter(delay=99.0)
    q: WorkQueue[str] = WorkQueue("t", rate_limiter=limiter)
    calls = 0

    async def handler(key: str) -> RequeueAfter | None:
        nonlocal calls
        calls += 1
        if calls == 1:
            return RequeueAfter(0.01)
        q.shutdown()
        return None

    q.add("a")
    await asyncio.wait_for(run_workers(q, handler, 1, "t"), 5)
    assert calls == 2
    assert limiter.failures == {}  # when() never asked
    assert limiter.forgotten == ["a", "a"]


async def test_cancelled_worker_requeues_its_key() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    started = asyncio.Event()

    async def handler(key: str) -> None:
        started.set()
        await asyncio.sleep(60)

    q.add("a")
    workers = asyncio.create_task(run_workers(q, handler, 1, "t"))
    await asyncio.wait_for(started.wait(), 1)
    workers.cancel()
    with pytest.raises(asyncio.CancelledError):
        await workers
    assert q.in_flight == 0
    assert await get_now(q) == "a"


async def test_on_result_hook_errors_do_not_kill_workers() -> None:
    q: WorkQueue[str] = WorkQueue("t")
    seen: list[str] = []

    async def handler(key: str) -> None:
        seen.append(key)
        if key == "b":
            q.shutdown()

    def on_result(key: str, ok: bool, duration: float) -> None:
        raise ValueError("metrics broke")

    q.add("a")
    q.add("b")
    await asyncio.wait_for(run_workers(q, handler, 1, "t", on_result=on_result), 5)
    assert seen == ["a", "b"]


async def test_run_workers_needs_a_worker() -> None:
    with pytest.raises(ValueError):
        await run_workers(WorkQueue[str]("t"), lambda key: asyncio.sleep(0), 0, "t")


# -- metrics (vkbridge.kube.queuemetrics): client-go's bookkeeping, on a fake clock ------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """Stands for every prometheus child a QueueSinks needs: set, inc and observe are recorded."""

    def __init__(self) -> None:
        self.value = 0.0
        self.observed: list[float] = []

    def set(self, value: float) -> None:
        self.value = value

    def inc(self, amount: float = 1) -> None:
        self.value += amount

    def observe(self, amount: float) -> None:
        self.observed.append(amount)


def metered(clock: FakeClock, limiter: RecordingLimiter | None = None) -> tuple[WorkQueue[str], QueueSinks]:
    sinks = QueueSinks(Recorder(), Recorder(), Recorder(), Recorder(), Recorder())
    return WorkQueue("t", limiter, metrics=QueueMetrics(sinks, clock=clock)), sinks


def rec(sink: object) -> Recorder:
    assert isinstance(sink, Recorder)
    return sink


async def test_metrics_time_the_wait_and_the_work() -> None:
    clock = FakeClock()
    q, sinks = metered(clock)
    q.add("a")
    clock.now += 2.0
    q.add("b")
    assert rec(sinks.depth).value == 2 and rec(sinks.adds).value == 2
    clock.now += 0.5
    assert await get_now(q) == "a"
    assert rec(sinks.queue_duration).observed == [2.5] and rec(sinks.depth).value == 1
    clock.now += 0.25
    assert q.metrics.longest_running_processor_seconds() == 0.25
    q.done("a")
    assert rec(sinks.work_duration).observed == [0.25]
    assert q.metrics.unfinished_work_seconds() == 0 and q.metrics.longest_running_processor_seconds() == 0


async def test_metrics_do_not_count_a_duplicate_add() -> None:
    clock = FakeClock()
    q, sinks = metered(clock)
    for key in ["a", "a", "b", "a"]:
        q.add(key)
    assert rec(sinks.adds).value == 2 and rec(sinks.depth).value == 2


async def test_metrics_count_a_readd_while_processing_as_waiting_from_the_readd() -> None:
    """client-go's depth counts a key re-added while it is processed; its wait starts at that add."""
    clock = FakeClock()
    q, sinks = metered(clock)
    q.add("a")
    await get_now(q)
    clock.now += 1.0
    q.add("a")
    assert len(q) == 0 and rec(sinks.depth).value == 1  # parked behind the worker, yet waiting
    clock.now += 3.0
    q.done("a")
    assert await get_now(q) == "a"
    assert rec(sinks.queue_duration).observed == [0.0, 3.0]
    assert rec(sinks.work_duration).observed == [4.0]


async def test_metrics_retries_count_failures_not_deliberate_delays() -> None:
    clock = FakeClock()
    q, sinks = metered(clock, RecordingLimiter(delay=0.0))
    q.add_after("a", 0.01)
    q.add_rate_limited("b")
    q.add_rate_limited("c")
    assert rec(sinks.retries).value == 2
    q.shutdown()
    q.add_rate_limited("d")
    assert rec(sinks.retries).value == 2


async def test_metrics_unfinished_work_sums_the_keys_in_flight() -> None:
    clock = FakeClock()
    q, _ = metered(clock)
    q.add("a")
    q.add("b")
    await get_now(q)
    clock.now += 2.0
    await get_now(q)
    clock.now += 1.0
    assert q.metrics.unfinished_work_seconds() == 4.0
    assert q.metrics.longest_running_processor_seconds() == 3.0


async def test_metrics_shutdown_empties_the_depth() -> None:
    clock = FakeClock()
    q, sinks = metered(clock)
    q.add("a")
    q.add("b")
    q.shutdown()
    assert rec(sinks.depth).value == 0
    q.add("c")
    assert rec(sinks.adds).value == 2


async def test_metrics_change_nothing_the_queue_does() -> None:
    """The same script on a queue with and without metrics hands out the same keys in the same order."""

    async def script(q: WorkQueue[str]) -> list[object]:
        out: list[object] = []
        for key in ["a", "b", "a", "c"]:
            q.add(key)
        first = await get_now(q)
        q.add(first)
        q.add_rate_limited("d")
        out += [first, len(q), q.in_flight, q.waiting]
        q.done(first)
        out += [await get_now(q) for _ in range(4)]
        out += [len(q), q.in_flight, q.num_requeues("d")]
        return out

    plain = await script(WorkQueue("t", RecordingLimiter(delay=0.0)))
    clock = FakeClock()
    with_metrics = await script(metered(clock, RecordingLimiter(delay=0.0))[0])
    assert plain == with_metrics == ["a", 3, 1, 0, "b", "c", "d", "a", 0, 4, 1]
