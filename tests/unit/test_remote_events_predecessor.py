"""Issue 35 item 7, its Events side: the Events of an earlier same-name pod's pool pod, still terminating
there (StatefulSet ``web-0`` after a force delete), are never copied onto the re-created local pod. The
whole engine on the shared in-memory API (tests/unit/test_engine.py's world)."""

from __future__ import annotations

from typing import Any

from e2e.waiting import eventually
from reflectors.forge import constants as c
from tests.support.reflection import LOCAL_ID, REMOTE_ID, local_pod
from tests.unit.test_engine import NS, World, remote_ns, world


def pool_pod(recorded_uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": remote_ns(NS),
            "labels": {c.ORIGIN_LABEL: LOCAL_ID, c.DESTINATION_LABEL: REMOTE_ID, c.NODENAME_LABEL: REMOTE_ID},
            "annotations": {c.LOCAL_POD_UID_ANNOTATION: recorded_uid},
        },
        "status": {"phase": "Running"},
    }


def killing_event(pool_pod_uid: str, name: str = "web-0.18a1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": remote_ns(NS)},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web-0",
            "namespace": remote_ns(NS),
            "uid": pool_pod_uid,
        },
        "reason": "Killing",
        "message": "Stopping container app",
        "type": "Normal",
        "source": {"component": "kubelet", "host": "pool-worker-1"},
        "firstTimestamp": "2026-12-01T12:00:00Z",
        "lastTimestamp": "2026-12-01T12:00:00Z",
        "count": 1,
    }


async def settled(w: World) -> None:
    await w.idle()
    q = w.engine.events.queue
    await eventually(lambda: len(q) == 0 and q.in_flight == 0, 2.0, "the event queue idle")


async def test_events_of_the_earlier_pool_pod_are_not_copied_onto_the_recreated_pod() -> None:
    async with world() as w:
        earlier = w.pool.put("pods", pool_pod("uid-of-the-earlier-web-0"))
        await eventually(lambda: len(w.engine.pairs[NS].remote_pods) == 1, 2.0, "the pool pod cached")
        w.home.put("pods", local_pod("web-0", NS))  # the re-created pod, another UID
        w.pool.put("events", killing_event(earlier["metadata"]["uid"]))
        # and one about a pool pod we no longer hold (its own, before a pool eviction): copied as before
        w.pool.put("events", killing_event("uid-of-a-pool-pod-long-gone", name="web-0.17f0"))
        await eventually(lambda: w.home.obj("events", NS, "web-0.17f0"), 2.0, "the other event's copy")
        await settled(w)
        copied = w.home.obj("events", NS, "web-0.18a1")
        assert copied is None, "the earlier pod's Killing event is shown on its successor"


async def test_events_of_the_pool_pod_made_for_this_pod_are_copied() -> None:
    async with world() as w:
        local = w.home.put("pods", local_pod("web-0", NS))
        ours = w.pool.put("pods", pool_pod(local["metadata"]["uid"]))
        await eventually(lambda: len(w.engine.pairs[NS].remote_pods) == 1, 2.0, "the pool pod cached")
        w.pool.put("events", killing_event(ours["metadata"]["uid"]))
        copied = await eventually(lambda: w.home.obj("events", NS, "web-0.18a1"), 2.0, "the local copy")
        assert copied["involvedObject"]["uid"] == local["metadata"]["uid"]
