"""The reflection engine's routing and parking (DESIGN §2), the whole engine on the shared in-memory API.

Which reflector a pod key goes to follows the NamespaceMap: a paired namespace to the pod reflector, a
namespace asked for but not paired yet to none (it waits: nothing sent, nothing aborted), a namespace not
offloaded at all to the fallback. While the pool is away keys are parked, and all come back with it.
Behaviour against the API servers is tests/integration/test_pods.py and tests/resilience.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from e2e.waiting import eventually
from reflectors.engine import ReflectionEngine
from reflectors.forge import constants as c
from tests.support.fakeapi import FakeApi, FakeRecorder
from tests.support.reflection import LOCAL_ID, REMOTE_ID, TENANT_NS, local_pod, reflection_context
from vkbridge.grant import Admission, Grant
from vkbridge.kube.reachability import PoolState

NS, OTHER = "team", "later"
GRANT = {"cpu": "2", "memory": "2Gi", "pods": "10"}


def remote_ns(ns: str) -> str:
    return f"{ns}-{LOCAL_ID}"


def namespace_map(accepted: tuple[str, ...], desired: tuple[str, ...] = ()) -> dict[str, Any]:
    """Our NamespaceMap: ``desired`` asked for, ``accepted`` mapped by the pool."""
    return {
        "apiVersion": "virtualkubelet.liqo.io/v1beta1",
        "kind": "NamespaceMap",
        "metadata": {
            "name": REMOTE_ID,
            "namespace": TENANT_NS,
            "labels": {c.REMOTE_CLUSTER_ID_LABEL: REMOTE_ID},
        },
        "spec": {"desiredMapping": {ns: remote_ns(ns) for ns in (*desired, *accepted)}},
        "status": {
            "currentMapping": {ns: {"remoteNamespace": remote_ns(ns), "phase": "Accepted"} for ns in accepted}
        },
    }


class World:
    def __init__(self) -> None:
        self.home, self.pool, self.recorder = FakeApi("consumer"), FakeApi("pool"), FakeRecorder()
        self.ctx = reflection_context(self.home, self.pool, recorder=self.recorder)
        self.engine = ReflectionEngine(self.ctx, Admission(Grant.from_resource_list(GRANT)))

    def shadows(self, ns: str = NS) -> set[str]:
        return self.pool.names("shadowpods", remote_ns(ns))

    async def idle(self) -> None:
        """Until every queued key was handled (nothing in the queue, no worker busy)."""
        q = self.engine.queue
        await eventually(lambda: len(q) == 0 and q.in_flight == 0, 2.0, "the pod queue idle")


@contextlib.asynccontextmanager
async def world(accepted: tuple[str, ...] = (NS,), desired: tuple[str, ...] = ()) -> AsyncIterator[World]:
    w = World()
    w.home.put("namespacemaps", namespace_map(accepted, desired))
    task = asyncio.create_task(w.engine.run())
    try:
        await eventually(lambda: len(w.engine.pairs) == len(accepted) and w.engine.all_pairs_synced(), 2.0,
                         "the pairs synced")  # fmt: skip
        yield w
    finally:
        w.engine.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_pod_in_a_paired_namespace_goes_to_the_pod_reflector() -> None:
    async with world() as w:
        w.home.put("pods", local_pod("web", NS))
        await eventually(w.shadows, 2.0, "the ShadowPod")
        assert w.shadows() == {"web"}
        assert w.engine.admission.is_admitted(w.home.obj("pods", NS, "web")["metadata"]["uid"])  # type: ignore[index]


async def test_a_pod_in_a_namespace_not_paired_yet_waits_and_is_reflected_once_paired() -> None:
    async with world(accepted=(NS,), desired=(OTHER,)) as w:
        w.home.put("pods", local_pod("web", OTHER))
        await eventually(lambda: f"{OTHER}/web" in w.engine.local_pods, 2.0, "the pod in the engine's cache")
        await w.idle()
        assert w.pool.writes() == [], "nothing sent for a namespace the pool has not mapped"
        assert w.home.writes("pods") == [], "nor is the pod aborted or backed off (never the fallback)"
        w.home.put("namespacemaps", namespace_map((NS, OTHER)))
        await eventually(lambda: w.shadows(OTHER), 2.0, "the ShadowPod once the namespace is paired")


async def test_a_pod_in_a_namespace_not_offloaded_goes_to_the_fallback() -> None:
    async with world() as w:
        w.home.put("pods", local_pod("web", "elsewhere"))
        status = await eventually(
            lambda: (w.home.obj("pods", "elsewhere", "web") or {}).get("status", {}).get("reason"),
            2.0,
            "the fallback's verdict",
        )
        assert status == c.REASON_OFFLOADING_BACKOFF  # never started: it may still be offloaded later
        assert w.pool.writes() == []


async def test_keys_are_parked_while_the_pool_is_away_and_all_come_back_with_it() -> None:
    async with world() as w:
        w.ctx.reach.set(PoolState.LOST)
        w.home.put("pods", local_pod("a", NS))
        w.home.put("pods", local_pod("b", NS))
        await eventually(lambda: w.engine.parked == {f"{NS}/a", f"{NS}/b"}, 2.0, "both keys parked")
        await w.idle()
        assert w.pool.writes() == [], "nothing sent while the pool is away"
        w.ctx.reach.set(PoolState.CONNECTED)
        await eventually(lambda: w.shadows() == {"a", "b"}, 2.0, "both ShadowPods once the pool is back")
        assert w.engine.parked == set()
        assert w.engine.admission.used()["pods"] == 2


async def test_a_shadowpod_event_frees_the_share_of_a_pod_that_finished_on_the_pool() -> None:
    """The grant follows ShadowPod events even where no handle runs (a namespace the pool is removing: its
    pods are left alone): the remote pod's finish, known from its own feed without decoding it, frees the
    share at the next event of its ShadowPod, as reading the remote pod there did."""
    async with world() as w:
        w.home.put("pods", local_pod("web", NS))
        await eventually(w.shadows, 2.0, "the ShadowPod")
        key, uid = f"{NS}/web", w.home.obj("pods", NS, "web")["metadata"]["uid"]  # type: ignore[index]
        await eventually(lambda: w.engine.pods.charged == {key: uid}, 2.0, "the pod charged")
        removing = namespace_map((NS,))
        removing["status"]["currentMapping"][NS]["phase"] = "Terminating"
        w.home.put("namespacemaps", removing)
        pair = w.engine.pairs[NS]
        await eventually(lambda: pair.phase == "Terminating", 2.0, "the pair Terminating")
        shadow = w.pool.obj("shadowpods", remote_ns(NS), "web")
        assert shadow is not None
        owner = {"apiVersion": "offloading.liqo.io/v1beta1", "kind": "ShadowPod", "name": "web",
                 "uid": shadow["metadata"]["uid"], "controller": True}  # fmt: skip
        meta = {"name": "web", "namespace": remote_ns(NS), "labels": shadow["metadata"]["labels"]}
        w.pool.put(
            "pods", {"metadata": {**meta, "ownerReferences": [owner]}, "status": {"phase": "Succeeded"}}
        )
        await eventually(lambda: f"{remote_ns(NS)}/web" in pair.remote_pods, 2.0, "the remote pod cached")
        await w.idle()
        assert w.engine.pods.charged == {key: uid}  # no handle frees it while the namespace goes
        w.pool.put("shadowpods", {**shadow, "status": {"phase": "Running"}})  # the provider mirrors status
        await eventually(lambda: w.engine.pods.charged == {}, 2.0, "the share freed by the ShadowPod event")
        assert w.engine.admission.used() == {}
