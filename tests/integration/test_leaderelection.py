"""Lease leader election against a real API server: one leader, takeover on release or expiry."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from e2e.controlplane import ControlPlane
from vkbridge.kube.client import LEASES, KubeClient
from vkbridge.kube.kubeconfig import load_kubeconfig_file
from vkbridge.kube.leaderelection import LeaderElector

pytestmark = pytest.mark.integration


async def test_one_leader_then_takeover_on_release_and_on_expiry(consumer: ControlPlane, fresh_ns) -> None:  # type: ignore[no-untyped-def]
    ns = fresh_ns(consumer, wait_sa=False)
    async with KubeClient(load_kubeconfig_file(consumer.admin_kubeconfig)) as client:

        def elector(identity: str) -> LeaderElector:
            return LeaderElector(client, namespace=ns, name="node-a", identity=identity,
                                 lease_duration=2, renew_deadline=1.5, retry_period=0.3)  # fmt: skip

        a, b, c = elector("a"), elector("b"), elector("c")
        await asyncio.wait_for(a.acquire(), 5)
        assert a.is_leader
        assert not await b.try_acquire_or_renew(), "a second candidate must not take a held lease"
        b_task = asyncio.create_task(b.acquire())
        await asyncio.sleep(1.0)
        assert not b_task.done()
        await a.release()
        await asyncio.wait_for(b_task, 5)
        assert b.is_leader
        # b stops renewing (crash): c takes over once the lease expires, not before
        c_task = asyncio.create_task(c.acquire())
        await asyncio.sleep(1.0)
        assert not c_task.done()
        await asyncio.wait_for(c_task, 6)
        assert c.is_leader


async def test_skewed_clocks_neither_steal_a_live_lease_nor_keep_a_dead_one(  # type: ignore[no-untyped-def]
    consumer: ControlPlane, fresh_ns
) -> None:
    """Expiry is judged by when the candidate saw the record change (client-go's observedTime), so a
    leader whose clock is an hour behind keeps its lease while it renews, and one whose clock is an
    hour ahead loses it one lease duration after it stops."""
    ns = fresh_ns(consumer, wait_sa=False)
    async with KubeClient(load_kubeconfig_file(consumer.admin_kubeconfig)) as client:

        def elector(identity: str, skew: dt.timedelta) -> LeaderElector:
            return LeaderElector(client, namespace=ns, name="node-a", identity=identity,
                                 lease_duration=2, renew_deadline=1.5, retry_period=0.3,
                                 clock=lambda: dt.datetime.now(dt.UTC) + skew)  # fmt: skip

        behind, ahead = elector("behind", -dt.timedelta(hours=1)), elector("ahead", dt.timedelta(hours=1))
        candidate = elector("candidate", dt.timedelta(0))
        await asyncio.wait_for(behind.acquire(), 5)
        holding = asyncio.create_task(behind.hold())
        taking = asyncio.create_task(candidate.acquire())
        await asyncio.sleep(4.0)  # two lease durations with renewals stamped an hour ago
        assert not taking.done(), "a live leader with a slow clock lost its lease"
        holding.cancel()
        await behind.release()
        await asyncio.wait_for(taking, 5)
        await candidate.release()

        await asyncio.wait_for(ahead.acquire(), 5)  # renews once, stamped an hour ahead, then "dies"
        late = elector("late", dt.timedelta(0))
        t0 = asyncio.get_running_loop().time()
        await asyncio.wait_for(late.acquire(), 10)
        waited = asyncio.get_running_loop().time() - t0
        assert 1.5 <= waited <= 5.0, f"took over a dead leader's lease after {waited:.1f}s"


async def test_release_after_a_renewal_whose_answer_was_lost_still_hands_the_lease_over(  # type: ignore[no-untyped-def]
    consumer: ControlPlane, fresh_ns
) -> None:
    """A shutdown that cancels a renewal the API server already applied leaves us holding a stale
    resourceVersion; the release must still free the Lease (it was refused with a conflict, logged at
    debug, and the successor waited the whole lease duration)."""
    ns = fresh_ns(consumer, wait_sa=False)
    async with KubeClient(load_kubeconfig_file(consumer.admin_kubeconfig)) as client:

        def elector(identity: str) -> LeaderElector:
            return LeaderElector(client, namespace=ns, name="node-a", identity=identity,
                                 lease_duration=30, renew_deadline=20, retry_period=10)  # fmt: skip

        ours, unseen_renewal = elector("vk-0"), elector("vk-0")
        await asyncio.wait_for(ours.acquire(), 5)
        assert await unseen_renewal.try_acquire_or_renew()  # applied; `ours` never saw the answer
        released = await ours.release()
        lease = await client.get(LEASES, "node-a", ns)
        assert not lease["spec"].get("holderIdentity"), lease["spec"]
        assert released
        successor = elector("vk-1")
        await asyncio.wait_for(successor.acquire(), 3)  # at once, not after the 30 s duration
