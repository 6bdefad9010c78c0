"""Lease expiry as client-go judges it (by when we saw the record change, on our own monotonic clock), and
a leader that steps down before a standby can take its Lease, whatever its requests do."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import time
from typing import Any

import pytest

from tests.support.clock import FakeClock
from vkbridge.kube import leaderelection
from vkbridge.kube.errors import ApiError
from vkbridge.kube.leaderelection import LeaderElector, LeaseObserver

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


# --- Stepping down when renewals hang: two electors on one in-memory Lease, no API server. ---

LEASE_S, RENEW_S, RETRY_S = 1.0, 0.4, 0.1  # the margin (0.6 s) absorbs a loaded loop; ratios as 15/10/5


class LeaseStore:
    """The API server's copy of the one Lease: resourceVersion checks as the real one does."""

    def __init__(self) -> None:
        self.lease: dict[str, Any] | None = None
        self.rv = 0

    def put(self, body: dict[str, Any], create: bool) -> dict[str, Any]:
        if create and self.lease is not None:
            raise ApiError(409, "AlreadyExists", "leases exists")
        if not create:
            if self.lease is None:
                raise ApiError(404, "NotFound", "leases not found")
            if body["metadata"].get("resourceVersion") != self.lease["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "the object has been modified")
        self.rv += 1
        self.lease = copy.deepcopy(body)
        self.lease["metadata"]["resourceVersion"] = str(self.rv)
        return copy.deepcopy(self.lease)


class LeaseClient:
    """One replica's client. ``hang``: every call waits for ever; ``stored_then_hang``: a write is
    stored, then its answer never comes (the connection died after the server applied it)."""

    def __init__(self, store: LeaseStore) -> None:
        self.store = store
        self.hang = False
        self.stored_then_hang = False
        self.calls = 0
        self.called = asyncio.Event()

    async def _answer(self) -> None:
        self.calls += 1
        self.called.set()
        await asyncio.sleep(0)  # a real request suspends: the other replica runs meanwhile
        if self.hang:
            await asyncio.Event().wait()

    async def get(self, resource: object, name: str, namespace: str) -> dict[str, Any]:
        await self._answer()
        if self.store.lease is None:
            raise ApiError(404, "NotFound", "leases not found")
        return copy.deepcopy(self.store.lease)

    async def _write(self, body: dict[str, Any], create: bool) -> dict[str, Any]:
        await self._answer()
        stored = self.store.put(body, create)
        if self.stored_then_hang:
            await asyncio.Event().wait()
        return stored

    async def create(self, resource: object, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        return await self._write(body, True)

    async def replace(self, resource: object, body: dict[str, Any], namespace: str) -> dict[str, Any]:
        return await self._write(body, False)


def elector(client: LeaseClient, identity: str) -> LeaderElector:
    return LeaderElector(
        client,  # type: ignore[arg-type]
        namespace="liqo-tenant-a", name="node-a", identity=identity,
        lease_duration=LEASE_S, renew_deadline=RENEW_S, retry_period=RETRY_S,
    )  # fmt: skip


async def _cancel(*tasks: asyncio.Task[Any]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def test_a_leader_whose_renewal_hangs_steps_down_before_the_standby_takes_the_lease() -> None:
    """The leader's client hangs in a renewal (the real one would wait its 60 s timeout): the leader
    stops at the renew deadline, before the standby sees its Lease expire and takes it."""
    store = LeaseStore()
    a_client, b_client = LeaseClient(store), LeaseClient(store)
    a, b = elector(a_client, "vk-a"), elector(b_client, "vk-b")
    await a.acquire()
    order: list[str] = []

    async def lead() -> None:
        await a.hold()
        order.append(f"a stepped down (is_leader={a.is_leader})")

    async def stand_by() -> None:
        await b.acquire()
        order.append(f"b elected (a.is_leader={a.is_leader})")

    holding = asyncio.create_task(lead())
    await asyncio.sleep(RETRY_S * 2.5)  # a renewal or two went through
    a_client.hang = True
    standby = asyncio.create_task(stand_by())
    try:
        async with asyncio.timeout(LEASE_S * 6):
            await standby
        async with asyncio.timeout(LEASE_S * 2):
            await asyncio.shield(holding)
    except TimeoutError:
        pass
    finally:
        await _cancel(holding, standby)
    assert order == ["a stepped down (is_leader=False)", "b elected (a.is_leader=False)"], order


async def test_an_acquisition_answered_after_the_renew_deadline_is_not_leadership() -> None:
    """The create is stored but its answer never comes: the candidate must not lead on it (a standby may
    take that Lease once it expires); it gives the attempt up at the renew deadline and tries again."""
    store = LeaseStore()
    a_client = LeaseClient(store)
    a = elector(a_client, "vk-a")
    a_client.stored_then_hang = True
    acquiring = asyncio.create_task(a.acquire())
    try:
        async with asyncio.timeout(RENEW_S * 5):
            while a_client.calls < 4:  # the hung attempt was given up, and later ones made
                a_client.called.clear()
                await a_client.called.wait()
    except TimeoutError:
        pytest.fail(f"the hung acquisition attempt was never given up ({a_client.calls} calls)")
    finally:
        await _cancel(acquiring)
    assert store.lease is not None and store.lease["spec"]["holderIdentity"] == "vk-a"
    assert not a.is_leader


async def test_a_leader_that_finds_another_holder_steps_down_at_once() -> None:
    """Another replica holds the Lease (ours expired while we were cut off): stop now, not at the
    deadline; that one is leading already."""
    store = LeaseStore()
    client = LeaseClient(store)
    a = elector(client, "vk-a")
    await a.acquire()
    assert store.lease is not None
    store.lease["spec"]["holderIdentity"] = "vk-b"  # b's takeover, as the API server stored it
    store.lease["metadata"]["resourceVersion"] = "99"
    before = client.calls
    async with asyncio.timeout(LEASE_S * 4):
        await a.hold()
    assert not a.is_leader and a.holder == "vk-b"
    assert client.calls - before == 1, "kept trying to renew a Lease another replica holds"


async def test_release_on_shutdown_with_a_hung_api_server_gives_up_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    store = LeaseStore()
    client = LeaseClient(store)
    a = elector(client, "vk-a")
    await a.acquire()
    monkeypatch.setattr(leaderelection, "RELEASE_TIMEOUT", 0.2)
    client.hang = True
    async with asyncio.timeout(5):
        released = await a.release()
    assert not released and not a.is_leader


def freeze(seconds: float) -> None:
    """The process does not run for ``seconds``: the event loop is blocked, as under SIGSTOP."""
    time.sleep(seconds)


async def test_a_lone_leader_frozen_past_its_renew_deadline_renews_and_keeps_leading() -> None:
    """The process did not run for longer than the renew deadline (SIGSTOP, a starved CPU: the event loop
    blocked here): nobody took the Lease, so one conditional renewal keeps it, as client-go's next renew
    cycle would. Stepping down there restarted a lone leader for nothing, and in a test session its
    vkbridge for good (CI: `test_410_relists...`, which freezes vkbridge, lost it)."""
    store = LeaseStore()
    client = LeaseClient(store)
    a = elector(client, "vk-a")
    await a.acquire()
    holding = asyncio.create_task(a.hold())
    await asyncio.sleep(RETRY_S * 1.5)
    freeze(RENEW_S * 2)  # no task of this process runs
    await asyncio.sleep(RETRY_S * 3)
    try:
        assert not holding.done(), "the leader stepped down after a freeze nobody used"
        assert a.is_leader and store.lease is not None and store.lease["spec"]["holderIdentity"] == "vk-a"
    finally:
        await _cancel(holding)


async def test_a_leader_frozen_while_a_standby_took_the_lease_steps_down() -> None:
    store = LeaseStore()
    client = LeaseClient(store)
    a = elector(client, "vk-a")
    await a.acquire()
    holding = asyncio.create_task(a.hold())
    await asyncio.sleep(RETRY_S * 1.5)
    freeze(RENEW_S * 2)  # and meanwhile b took the expired Lease:
    assert store.lease is not None
    store.lease["spec"]["holderIdentity"] = "vk-b"
    store.lease["metadata"]["resourceVersion"] = "99"
    async with asyncio.timeout(LEASE_S * 2):
        await holding
    assert not a.is_leader and a.holder == "vk-b"
