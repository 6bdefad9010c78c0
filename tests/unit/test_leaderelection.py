"""Lease expiry as client-go judges it: by when we saw the record change, on our own monotonic clock."""

from __future__ import annotations

import datetime as dt
from typing import Any

from tests.support.clock import FakeClock
from vkbridge.kube.leaderelection import LeaseObserver

OUR_WALL = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def lease(holder: str, renew: dt.datetime, duration: int = 4, transitions: int = 0) -> dict[str, Any]:
    stamp = renew.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {
        "metadata": {"name": "node-a", "resourceVersion": "1"},
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": duration, "acquireTime": stamp,
                 "renewTime": stamp, "leaseTransitions": transitions},
    }  # fmt: skip


def test_a_live_leader_whose_clock_is_an_hour_behind_is_not_taken_over() -> None:
    """Its renewTime is an hour old by our wall clock, but it changes at every renewal: the lease holds."""
    mono = FakeClock()
    obs = LeaseObserver(mono)
    holder_wall = OUR_WALL - dt.timedelta(hours=1)
    for i in range(20):
        seen = lease("vk-a", holder_wall + dt.timedelta(seconds=i))
        obs.observe(seen)
        assert obs.held_by_other(seen, "vk-b"), f"a renewing leader looked expired at renewal {i}"
        mono.now += 1.0


def test_a_dead_leader_whose_clock_is_an_hour_ahead_expires_after_one_duration() -> None:
    """Its last renewTime lies an hour in our future; it stopped renewing: ours after its 4 s, not 1 h."""
    mono = FakeClock()
    obs = LeaseObserver(mono)
    last = lease("vk-a", OUR_WALL + dt.timedelta(hours=1))
    obs.observe(last)
    mono.now += 3.9
    obs.observe(last)  # unchanged: the observed time stays at the first sight
    assert obs.held_by_other(last, "vk-b")
    mono.now += 0.2
    obs.observe(last)
    assert not obs.held_by_other(last, "vk-b")


def test_a_record_first_seen_waits_a_full_duration_and_a_released_one_is_free() -> None:
    mono = FakeClock()
    obs = LeaseObserver(mono)
    stale = lease("vk-a", OUR_WALL - dt.timedelta(days=3))  # long dead, but we just met it
    obs.observe(stale)
    assert obs.held_by_other(stale, "vk-b")
    mono.now += 4.0
    assert not obs.held_by_other(stale, "vk-b")
    released = lease("", OUR_WALL)
    obs.observe(released)
    assert not obs.held_by_other(released, "vk-b")
    assert not obs.held_by_other(lease("vk-b", OUR_WALL), "vk-b"), "our own record is never 'other'"
