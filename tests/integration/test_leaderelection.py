"""Lease leader election against a real API server: one leader, takeover on release or expiry."""

from __future__ import annotations

import asyncio

import pytest

from e2e.controlplane import ControlPlane
from vkbridge.kube.client import KubeClient
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
