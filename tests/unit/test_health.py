"""Named health checks (Kubernetes' /livez, /readyz conventions), the loop-lag watchdog, the task watch."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from tests.support.clock import FakeClock
from vkbridge.kube.health import HealthChecks, LoopWatchdog, TaskWatch


def checks(**states: str | None) -> HealthChecks:
    hc = HealthChecks("readyz")
    for name, reason in states.items():
        hc.add(name, _fixed(reason))
    return hc


def _fixed(reason: str | None) -> Callable[[], str | None]:
    return lambda: reason


def test_all_passing_answers_ok_and_verbose_lists_every_check() -> None:
    hc = checks(ping=None, leader=None)
    assert hc.render() == (200, "ok")
    assert hc.render(verbose=True) == (200, "[+]ping ok\n[+]leader ok\nreadyz check passed\n")


def test_a_failing_check_is_named_with_its_reason_and_the_failure_status() -> None:
    hc = checks(ping=None, leader="standby: lease t/n held by vk-b")
    status, body = hc.render()
    assert status == 503
    assert body == "[+]ping ok\n[-]leader failed: standby: lease t/n held by vk-b\nreadyz check failed\n"
    assert hc.failing() == ["leader"]
    live = HealthChecks("livez", failure_status=500)
    live.add("tasks", lambda: "task pinger returned")
    assert live.render()[0] == 500


def test_exclude_leaves_a_check_out_and_says_so() -> None:
    hc = checks(ping=None, leader="standby")
    assert hc.render(exclude=["leader"]) == (200, "ok")
    assert hc.render(verbose=True, exclude=["leader", "nonexistent"]) == (
        200,
        "[+]ping ok\n[+]leader excluded: ok\nreadyz check passed\n",
    )


def test_one_check_by_name_and_an_unknown_name() -> None:
    hc = checks(ping=None, caches="not synced: consumer/pods (listing)")
    assert hc.render_one("ping") == (200, "ok")
    assert hc.render_one("caches") == (503, "[-]caches failed: not synced: consumer/pods (listing)\n")
    status, body = hc.render_one("nope")
    assert status == 404 and "ping, caches" in body


def test_a_check_that_raises_fails_instead_of_breaking_the_endpoint() -> None:
    hc = HealthChecks("livez", failure_status=500)

    def broken() -> str | None:
        raise KeyError("x")

    hc.add("broken", broken)
    status, body = hc.render()
    assert status == 500 and "[-]broken failed: check raised KeyError" in body


def test_check_names_are_path_segments() -> None:
    with pytest.raises(ValueError):
        HealthChecks("livez").add("a/b", lambda: None)


# ------------------------------------------------------------------------------------- loop watchdog


def test_watchdog_is_healthy_while_ticks_come_on_time() -> None:
    clock = FakeClock()
    wd = LoopWatchdog(interval=1.0, max_lag=5.0, window=15.0, clock=clock)
    assert wd.check() is None
    for _ in range(30):
        clock.now += 1.2
        wd.tick()
        assert wd.check() is None
    assert wd.lag == pytest.approx(0.2)


def test_watchdog_fails_while_the_next_tick_is_overdue() -> None:
    """What a probe handled first when a stalled loop resumes sees: the watchdog has not ticked."""
    clock = FakeClock()
    wd = LoopWatchdog(interval=1.0, max_lag=5.0, window=15.0, clock=clock)
    clock.now += 5.9
    assert wd.check() is None  # 4.9 s overdue: within the limit
    clock.now += 0.2
    reason = wd.check()
    assert reason is not None and "stalled: no tick for 6.1s" in reason


def test_watchdog_remembers_a_late_tick_for_the_window_then_forgets_it() -> None:
    clock = FakeClock()
    wd = LoopWatchdog(interval=1.0, max_lag=5.0, window=15.0, clock=clock)
    clock.now += 9.0  # the loop was blocked for 8 s
    wd.tick()
    reason = wd.check()
    assert reason is not None and "8.0s late" in reason
    for _ in range(14):
        clock.now += 1.0
        wd.tick()
        assert wd.check() is not None, "a recent stall still fails"
    clock.now += 1.5
    wd.tick()
    assert wd.check() is None


def test_watchdog_with_a_dead_ticker_reads_as_a_stall() -> None:
    clock = FakeClock()
    wd = LoopWatchdog(interval=1.0, max_lag=5.0, clock=clock)
    wd.tick()
    clock.now += 60
    assert "stalled" in (wd.check() or "")


async def test_watchdog_run_ticks_on_the_loop() -> None:
    wd = LoopWatchdog(interval=0.01, max_lag=5.0)
    task = asyncio.create_task(wd.run())
    try:
        await asyncio.sleep(0.1)
        assert wd.check() is None and wd.lag < 1.0
    finally:
        task.cancel()


# ----------------------------------------------------------------------------------------- task watch


async def test_task_watch_names_a_task_that_returned_or_failed() -> None:
    watch = TaskWatch()

    async def forever() -> None:
        await asyncio.Event().wait()

    async def returns() -> None:
        return None

    async def fails() -> None:
        raise RuntimeError("boom")

    alive = asyncio.create_task(forever(), name="node-lease")
    watch.add(alive)
    assert watch.check() is None
    gone = asyncio.create_task(returns(), name="pinger")
    broken = asyncio.create_task(fails(), name="reflection")
    watch.add(gone)
    watch.add(broken)
    await asyncio.gather(gone, broken, return_exceptions=True)
    assert watch.check() == "task pinger returned; task reflection failed: RuntimeError: boom"
    alive.cancel()
    await asyncio.gather(alive, return_exceptions=True)
    assert "task node-lease was cancelled" in (watch.check() or "")
