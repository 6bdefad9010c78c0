"""The node Lease heartbeat against a real API server when another writer changes the Lease under it."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from e2e.controlplane import ControlPlane
from vkbridge.kube.client import KubeClient
from vkbridge.kube.kubeconfig import load_kubeconfig_file
from vkbridge.kube.reachability import Reachability
from vkbridge.node.lease import CONFLICT_TRIES, LeaseConflict, LeaseHeartbeat

pytestmark = pytest.mark.integration


class InterferingClient(KubeClient):
    """A real client; while `interfering`, another writer updates the Lease just before each of our
    PUTs of `path`, so the PUT carries a stale resourceVersion and the API server answers a real 409."""

    path = ""
    interfering = False
    puts = 0

    async def request(self, method: str, path: str, **kw: Any) -> Any:
        if method == "PUT" and path == self.path:
            self.puts += 1
            if self.interfering:
                other = await super().request("GET", path)
                other["metadata"].setdefault("annotations", {})["other-writer"] = str(self.puts)
                await super().request("PUT", path, body=other)
        return await super().request(method, path, **kw)


@pytest.fixture
def node(consumer: ControlPlane) -> Any:
    name = f"lease-conflict-{uuid.uuid4().hex[:6]}"
    status, body = consumer.api("POST", "/api/v1/nodes", {"metadata": {"name": name}})
    assert status == 201, body
    yield name, body["metadata"]["uid"]
    consumer.api("DELETE", f"/api/v1/nodes/{name}")
    consumer.api("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}")


async def test_lease_renewal_under_endless_conflicts_gives_up_after_bounded_backed_off_tries(
    consumer: ControlPlane, node: tuple[str, str]
) -> None:
    name, uid = node
    client = InterferingClient(load_kubeconfig_file(consumer.admin_kubeconfig))
    async with client:
        reach = Reachability()
        hb = LeaseHeartbeat(client, name, reach, duration=40, node_uid=lambda: uid)
        client.path = hb.path
        assert await hb.renew_once()  # creates the Lease

        assert await hb.renew_once()  # a plain renewal: one PUT, no conflict
        assert (client.puts, hb.conflicts) == (1, 0)

        client.interfering, client.puts = True, 0
        t0 = time.monotonic()
        with pytest.raises(LeaseConflict, match="changed under each of"):
            await asyncio.wait_for(hb.renew_once(), 20)  # the old code recursed here without end
        took = time.monotonic() - t0
        assert client.puts == CONFLICT_TRIES and hb.conflicts == CONFLICT_TRIES
        assert took >= 0.3, f"retried without backing off ({took:.2f}s for {CONFLICT_TRIES} tries)"

        client.interfering = False
        renewals = hb.renewals
        assert await hb.renew_once()  # the other writer stopped: the next renewal goes through
        assert hb.renewals == renewals + 1
