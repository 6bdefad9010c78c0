"""A SIGTERM that lands while a loop is being woken up must still stop it.

CI saw vkbridge ignore SIGTERM for 31 s: the Node controller's loop was cancelled in the same loop
iteration as its "dirty" event was set, Python 3.11's ``asyncio.wait_for`` returned the event's result
instead of raising, and the loop went back to waiting with nobody left to cancel it. Each test wakes a
real loop and cancels it in one synchronous step, the exact interleaving, and requires the task to end
cancelled. On the old code (``wait_for``) each of them times out.
"""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any, cast

import pytest

from vkbridge.kube.cache import Cache
from vkbridge.kube.client import KubeClient
from vkbridge.kube.reachability import PoolState, Reachability
from vkbridge.kube.waiting import wait_event
from vkbridge.node import model
from vkbridge.node.controller import NodeController
from vkbridge.node.lease import LeaseHeartbeat

ROOT = Path(__file__).resolve().parents[2]


async def _ends_cancelled(task: asyncio.Task[Any]) -> None:
    """The task must finish, cancelled, promptly; a swallowed cancel leaves it waiting for seconds."""
    done, _ = await asyncio.wait({task}, timeout=2.0)
    if not done:
        task.cancel()
        pytest.fail("the cancel was swallowed: the loop went back to waiting")
    assert task.cancelled()


class _Subscribable:
    """Just what NodeController asks of a cache at construction: a listener list."""

    def __init__(self) -> None:
        self.listeners: list[Any] = []

    def subscribe(self, listener: Any) -> None:
        self.listeners.append(listener)


class _IdleNodeController(NodeController):
    async def reconcile(self) -> None:  # the loop under test, without any API call
        return None


class _IdleLease(LeaseHeartbeat):
    async def renew_once(self) -> bool:
        return True


async def test_wait_event_lets_a_cancel_win_over_a_simultaneous_set() -> None:
    event = asyncio.Event()
    task = asyncio.create_task(wait_event(event, 30))
    await asyncio.sleep(0)
    event.set()
    task.cancel()
    await _ends_cancelled(task)


async def test_wait_event_reports_set_and_timeout() -> None:
    event = asyncio.Event()
    assert await wait_event(event, 0.01) is False
    event.set()
    assert await wait_event(event, 0.01) is True


async def test_node_controller_stops_when_sigterm_meets_a_cache_change() -> None:
    cache = _Subscribable()
    ctrl = _IdleNodeController(
        cast(KubeClient, object()),
        Reachability(),
        node_cache=cast(Cache, cache),
        virtual_node_cache=cast(Cache, _Subscribable()),
        resource_slice_cache=cast(Cache, _Subscribable()),
        base_inputs=lambda: cast(model.NodeInputs, None),
        virtual_node_key="vn",
        status_interval=60.0,
    )
    task = asyncio.create_task(ctrl.run())
    await asyncio.sleep(0.05)  # reconciled once, now waiting for a change or the status tick
    assert not task.done()
    cache.listeners[0]("MODIFIED", None, {})  # the Node changed ...
    task.cancel()  # ... in the same iteration as the shutdown
    await _ends_cancelled(task)


async def test_lease_heartbeat_stops_when_sigterm_meets_a_pool_transition() -> None:
    reach = Reachability()
    reach.set(PoolState.CONNECTED)
    beat = _IdleLease(cast(KubeClient, object()), "node", reach, duration=40)
    task = asyncio.create_task(beat.run())
    await asyncio.sleep(0.05)  # renewed once, waiting for the next renewal
    reach.set(PoolState.LOST)
    reach.set(PoolState.CONNECTED)  # the pool is back: the listener wakes the heartbeat ...
    task.cancel()  # ... as SIGTERM arrives
    await _ends_cancelled(task)


async def test_pinger_wait_stops_when_sigterm_meets_a_failure_report() -> None:
    reach = Reachability()
    task = asyncio.create_task(reach.wait_check_request(30))
    await asyncio.sleep(0)
    reach.report_failure()
    task.cancel()
    await _ends_cancelled(task)


def test_product_code_never_uses_asyncio_wait_for() -> None:
    """Python 3.11's wait_for can swallow a cancel; the product waits with asyncio.timeout or wait_event."""
    offenders = [
        f"{path.relative_to(ROOT)}:{n}"
        for pkg in ("vkbridge", "reflectors")
        for path in sorted((ROOT / pkg).rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bwait_for\(", line) and not line.lstrip().startswith("#")
    ]
    assert not offenders, offenders
