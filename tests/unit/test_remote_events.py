"""Remote pod Events -> local pod Events (DESIGN §1; LIQO §5 "Event (remote→local)", §8 rate limits).

First the pure parts (reflectors.forge.events: body, patch, spam key), then the RemoteEventReflector driven
against a small in-memory API at the client seam (real Cache, real WorkQueue, fake clock). The real API
servers are exercised by tests/integration/test_remote_events.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest

from e2e.waiting import eventually
from reflectors.forge import constants as c
from reflectors.forge.events import event_patch, local_event, spam_key
from reflectors.remote_events import REMOTE_EVENT_SELECTOR, RemoteEventReflector
from tests.support.clock import FakeClock
from tests.support.fakeapi import FakeApi, selects
from tests.support.reflection import LOCAL_ID, REMOTE_ID, reflection_context
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import PODS, ApiError
from vkbridge.kube.reachability import Reachability

NS = "team"
RNS = f"team-{LOCAL_ID}"
NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
OURS = {c.ORIGIN_LABEL: LOCAL_ID, c.DESTINATION_LABEL: REMOTE_ID}


def pod(name: str = "web-0", uid: str = "local-uid", ns: str = NS) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": uid},
        "spec": {"nodeName": REMOTE_ID},
    }


def remote_event(name: str = "web-0.17f0a", pod_name: str = "web-0", **overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": RNS},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod_name,
            "namespace": RNS,
            "uid": "remote-pod-uid",
            "fieldPath": "spec.containers{app}",
        },
        "reason": "Pulled",
        "message": 'Container image "busybox:1.36" already present on machine',
        "type": "Normal",
        "source": {"component": "kubelet", "host": "pool-worker-1"},
        "reportingComponent": "kubelet",
        "reportingInstance": "pool-worker-1",
        "firstTimestamp": "2026-11-29T09:00:00Z",
        "lastTimestamp": "2026-11-29T09:00:00Z",
        "count": 1,
    }
    event.update(overrides)
    return event


# ================================================================================== pure parts


def test_local_event_keeps_the_remote_name_and_points_at_the_local_pod() -> None:
    event = local_event(remote_event(), pod(), local_id=LOCAL_ID, remote_id=REMOTE_ID, now=NOW)
    assert event is not None
    assert event["metadata"]["name"] == "web-0.17f0a"
    assert event["metadata"]["namespace"] == NS
    assert event["metadata"]["labels"] == OURS
    assert event["involvedObject"]["uid"] == "local-uid"
    assert event["involvedObject"]["namespace"] == NS
    assert event["source"]["component"] == "kubelet (remote)"
    assert event["reportingComponent"] == "kubelet (remote)"
    assert event["reportingInstance"] == "pool-worker-1"


def test_with_the_node_name_the_pool_kubelets_event_is_the_node_kubelets() -> None:
    event = local_event(
        remote_event(), pod(), local_id=LOCAL_ID, remote_id=REMOTE_ID, now=NOW, node_name="vn"
    )
    assert event is not None
    assert event["source"] == {"component": "kubelet", "host": "vn"}
    assert (event["reportingComponent"], event["reportingInstance"]) == ("kubelet", "vn")
    other = remote_event(source={"component": "pool-controller"}, reportingComponent="", reportingInstance="")
    event = local_event(other, pod(), local_id=LOCAL_ID, remote_id=REMOTE_ID, now=NOW, node_name="vn")
    assert event is not None and event["source"] == {"component": "pool-controller (remote)"}


def test_local_event_leaves_reporting_component_of_event_time_events_valid() -> None:
    """The API server requires a qualified name in reportingComponent when eventTime is set (422)."""
    scheduled = remote_event(
        reason="FailedScheduling",
        source={},
        firstTimestamp=None,
        lastTimestamp=None,
        count=None,
        eventTime="2026-11-29T09:00:00.000000Z",
        action="Binding",
        reportingComponent="default-scheduler",
        reportingInstance="default-scheduler-pool",
    )
    event = local_event(scheduled, pod(), local_id=LOCAL_ID, remote_id=REMOTE_ID, now=NOW)
    assert event is not None
    assert event["source"] == {"component": "default-scheduler (remote)"}
    assert event["reportingComponent"] == "default-scheduler"
    assert event["eventTime"] == "2026-11-29T09:00:00.000000Z"
    assert "firstTimestamp" not in event


def test_the_pool_schedulers_scheduled_event_is_not_copied_home() -> None:
    """It names a pool node; the local pod has its own Scheduled event (one write per pod saved)."""
    scheduled = remote_event(
        reason="Scheduled", source={}, eventTime="2026-11-29T09:00:00.000000Z",
        reportingComponent="default-scheduler",
    )  # fmt: skip
    assert local_event(scheduled, pod(), local_id=LOCAL_ID, remote_id=REMOTE_ID, now=NOW) is None


@pytest.mark.parametrize(
    ("event", "local"),
    [
        (remote_event(), None),
        (remote_event(pod_name="other"), pod()),
        (remote_event(involvedObject={"apiVersion": "v1", "kind": "Service", "name": "web-0"}), pod()),
    ],
    ids=["no-local-pod", "other-pod", "not-a-pod"],
)
def test_local_event_is_none_when_not_about_our_pod(
    event: dict[str, Any], local: dict[str, Any] | None
) -> None:
    assert local_event(event, local, local_id=LOCAL_ID, remote_id=REMOTE_ID, now=NOW) is None


def test_local_event_suffix_is_not_doubled() -> None:
    event = local_event(
        remote_event(reportingComponent="kubelet (remote)"),
        pod(),
        local_id=LOCAL_ID,
        remote_id=REMOTE_ID,
        now=NOW,
    )
    assert event is not None and event["reportingComponent"] == "kubelet (remote)"


def test_event_patch_sets_every_tracked_field_and_leaves_the_first_timestamp() -> None:
    new = remote_event(count=3, message="m3", lastTimestamp="2026-11-29T09:05:00Z", firstTimestamp="X")
    assert event_patch(new) == {
        "reason": new["reason"],
        "message": "m3",
        "type": new["type"],
        "count": 3,
        "series": None,
        "lastTimestamp": "2026-11-29T09:05:00Z",
        "eventTime": None,
    }


def test_event_patch_nulls_fields_that_went_away() -> None:
    series = {"count": 2, "lastObservedTime": "2026-11-29T09:01:00.000000Z"}
    assert event_patch(remote_event(series=series))["series"] == series
    assert event_patch(remote_event())["series"] is None


def test_spam_key_is_per_local_pod_incarnation() -> None:
    assert spam_key(pod()) == (NS, "web-0", "local-uid")
    assert spam_key(pod(uid="new")) != spam_key(pod())


# ================================================================================== the reflector


class World:
    def __init__(self, tg: asyncio.TaskGroup, refl: RemoteEventReflector, home: FakeApi, pool: FakeApi,
                 clock: FakeClock) -> None:  # fmt: skip
        self.tg, self.refl, self.home, self.pool, self.clock = tg, refl, home, pool, clock

    def start_pair(self) -> None:
        self.refl.start_pair(NS, RNS, self.tg.create_task)

    async def ready(self) -> None:
        await eventually(lambda: NS in self.refl.pairs and self.refl.pairs[NS].ready, 2.0, "pair ready")

    async def settle(self) -> None:
        """Until the caches caught up with both stores and the queue is idle."""
        pair = self.refl.pairs[NS]

        def rvs(objs: Any) -> dict[str, str]:
            return {o["metadata"]["name"]: o["metadata"]["resourceVersion"] for o in objs}

        want = rvs(o for (p, ns, _), o in self.pool.store.items()
                   if p == "events" and ns == RNS and selects(o, None, REMOTE_EVENT_SELECTOR))  # fmt: skip
        await eventually(lambda: rvs(pair.cache.list()) == want, 2.0, "the remote cache to catch up")
        await eventually(
            lambda: len(self.refl.queue) == 0 and self.refl.queue.in_flight == 0, 2.0, "queue idle"
        )

    def local(self, name: str = "web-0.17f0a") -> dict[str, Any] | None:
        return self.home.obj("events", NS, name)


@contextlib.asynccontextmanager
async def world(*, workers: int = 2, max_tries: int = 3, start: bool = True,
                pods: tuple[dict[str, Any], ...] = (pod(),)) -> AsyncIterator[World]:  # fmt: skip
    home, pool, clock = FakeApi("consumer"), FakeApi("pool"), FakeClock()
    for p in pods:
        home.put("pods", p)
    local_pods = Cache(cast(Any, home), PODS, field_selector=None, name="consumer/pods")
    ctx = reflection_context(home, pool, reach=Reachability(), vk_pod_ip="10.0.0.9")
    refl = RemoteEventReflector(
        ctx,
        local_pods,
        workers,
        clock=clock,
        wall_clock=lambda: NOW,
        max_tries=max_tries,
        retry_backoff=lambda: Backoff(0.001, 0.002, jitter=0.0),
    )
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(local_pods.run()), tg.create_task(refl.run())]
        await local_pods.wait_synced()
        w = World(tg, refl, home, pool, clock)
        if start:
            w.start_pair()
            await w.ready()
        try:
            yield w
        finally:
            refl.stop()
            for pair in list(refl.pairs):
                refl.stop_pair(pair)
            for t in tasks:
                t.cancel()


async def test_remote_event_is_copied_onto_the_local_pod() -> None:
    async with world() as w:
        w.pool.put("events", remote_event())
        event = await eventually(w.local, 2.0, "the local copy")
        assert event["involvedObject"] == {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web-0",
            "namespace": NS,
            "uid": "local-uid",
            "fieldPath": "spec.containers{app}",
        }
        # The pool kubelet's Event is the node's kubelet's: source kubelet on our node, never the pool worker.
        assert event["source"] == {"component": "kubelet", "host": w.refl.ctx.node_name}
        assert (event["reportingComponent"], event["reportingInstance"]) == ("kubelet", w.refl.ctx.node_name)
        assert event["metadata"]["labels"] == OURS
        assert (event["reason"], event["count"]) == ("Pulled", 1)


async def test_remote_cache_watches_pod_events_only() -> None:
    async with world() as w:
        assert (
            w.refl.pairs[NS].cache.field_selector
            == REMOTE_EVENT_SELECTOR
            == "involvedObject.kind=Pod,reason!=Scheduled"
        )
        w.pool.put("events", remote_event("svc.1", involvedObject={"apiVersion": "v1", "kind": "Service",
                                                                    "name": "web-0", "namespace": RNS}))  # fmt: skip
        w.pool.put("events", remote_event())
        await eventually(w.local, 2.0, "the pod event")
        await w.settle()
        assert w.home.names("events", NS) == {"web-0.17f0a"}


async def test_events_about_pods_that_are_not_ours_are_ignored() -> None:
    async with world() as w:
        w.pool.put("events", remote_event("other.1", pod_name="other"))
        await w.settle()
        assert w.home.writes() == []


async def test_aggregated_remote_event_updates_the_local_copy() -> None:
    async with world() as w:
        w.pool.put("events", remote_event(reason="BackOff", type="Warning", message="Back-off 10s"))
        await eventually(w.local, 2.0, "the local copy")
        w.pool.put("events", remote_event(reason="BackOff", type="Warning", message="Back-off 20s", count=2,
                                          lastTimestamp="2026-11-29T09:00:20Z"))  # fmt: skip
        await eventually(lambda: (w.local() or {}).get("count") == 2, 2.0, "count 2 locally")
        event = w.local()
        assert event is not None
        assert (event["message"], event["lastTimestamp"]) == ("Back-off 20s", "2026-11-29T09:00:20Z")
        assert event["firstTimestamp"] == "2026-11-29T09:00:00Z"
        assert [v for v, *_ in w.home.writes()] == ["create", "patch"]


async def test_unchanged_remote_event_costs_no_write() -> None:
    async with world() as w:
        w.pool.put("events", remote_event())
        await eventually(w.local, 2.0, "the local copy")
        w.refl.queue.add(f"{NS}/web-0.17f0a")
        w.pool.put("events", remote_event(metadata={"name": "web-0.17f0a", "namespace": RNS,
                                                    "annotations": {"touched": "1"}}))  # fmt: skip
        await w.settle()
        assert [v for v, *_ in w.home.writes()] == ["create"]


async def test_remote_event_gone_deletes_our_copy_with_a_uid_precondition() -> None:
    async with world() as w:
        w.pool.put("events", remote_event())
        created = await eventually(w.local, 2.0, "the local copy")
        w.pool.remove("events", RNS, "web-0.17f0a")
        await eventually(lambda: w.local() is None, 2.0, "the local copy deleted")
        assert w.home.deletes == [("events", "web-0.17f0a", created["metadata"]["uid"])]


async def test_foreign_local_event_with_the_same_name_is_never_touched(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with world() as w:
        foreign = w.home.put("events", {"metadata": {"name": "web-0.17f0a", "namespace": NS},
                                        "reason": "Mine", "count": 7})  # fmt: skip
        with caplog.at_level(logging.WARNING, logger="reflectors.remote_events"):
            w.pool.put("events", remote_event())
            await eventually(lambda: "web-0.17f0a" in w.refl.pairs[NS].foreign, 2.0, "foreign noted")
            w.pool.put("events", remote_event(count=2))
            await w.settle()
            w.pool.remove("events", RNS, "web-0.17f0a")
            await w.settle()
        assert w.local() == foreign
        assert [v for v, *_ in w.home.writes()] == ["create"]  # the refused attempt only
        assert sum("not ours" in r.getMessage() for r in caplog.records) == 1


async def test_restart_finds_its_copies_updates_changed_and_deletes_stale_ones() -> None:
    async with world(start=False) as w:
        # A previous run left two copies; meanwhile one remote event grew and the other disappeared.
        old = local_event(remote_event(), pod(), local_id=LOCAL_ID, remote_id=REMOTE_ID, now=NOW)
        stale = local_event(
            remote_event("web-0.gone"), pod(), local_id=LOCAL_ID, remote_id=REMOTE_ID, now=NOW
        )
        assert old is not None and stale is not None
        w.home.put("events", old)
        stale_uid = w.home.put("events", stale)["metadata"]["uid"]
        w.pool.put("events", remote_event(count=5))
        w.start_pair()
        await w.ready()
        await eventually(lambda: w.local("web-0.gone") is None, 2.0, "the stale copy deleted")
        await eventually(lambda: (w.local() or {}).get("count") == 5, 2.0, "the changed copy updated")
        await w.settle()
        assert sorted(v for v, *_ in w.home.writes()) == ["delete", "patch"]
        assert ("events", "web-0.gone", stale_uid) in w.home.deletes


async def test_event_waits_for_its_local_pod() -> None:
    async with world(pods=()) as w:
        w.pool.put("events", remote_event())
        await w.settle()
        assert w.local() is None
        w.home.put("pods", pod())
        event = await eventually(w.local, 2.0, "the copy once the pod exists")
        assert event["involvedObject"]["uid"] == "local-uid"


async def test_spam_filter_allows_a_burst_of_25_per_pod_then_one_per_300s() -> None:
    async with world(pods=(pod(), pod("db-0", uid="db-uid"))) as w:
        for i in range(30):
            w.pool.put("events", remote_event(f"web-0.{i:02d}"))
        await w.settle()
        assert len(w.home.names("events", NS)) == 25
        assert w.refl.dropped == 5
        # another pod has its own bucket
        w.pool.put("events", remote_event("db-0.1", pod_name="db-0"))
        await eventually(lambda: w.local("db-0.1"), 2.0, "db-0's event")
        # repeats consume tokens too (client-go): an aggregated update is dropped while the bucket is empty
        w.pool.put("events", remote_event("web-0.00", count=2))
        await w.settle()
        assert (w.local("web-0.00") or {}).get("count") == 1
        assert w.refl.dropped == 6
        # 300 s later one token is back: the next change goes through, the one after does not
        w.clock.now += 300
        w.pool.put("events", remote_event("web-0.00", count=3))
        await eventually(
            lambda: (w.local("web-0.00") or {}).get("count") == 3, 2.0, "the update after refill"
        )
        w.pool.put("events", remote_event("web-0.29", count=2))
        await w.settle()
        assert w.local("web-0.29") is None
        assert w.refl.dropped == 7


async def test_deletes_are_not_rate_limited() -> None:
    async with world() as w:
        for i in range(25):
            w.pool.put("events", remote_event(f"web-0.{i:02d}"))
        await w.settle()
        for i in range(25):
            w.pool.remove("events", RNS, f"web-0.{i:02d}")
        await eventually(lambda: not w.home.names("events", NS), 2.0, "every copy deleted")
        assert w.refl.dropped == 0


async def test_failures_are_retried_a_few_times_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    async with world(max_tries=3) as w:
        w.home.fail["create"] = [ApiError(503, "ServiceUnavailable", "try later") for _ in range(10)]
        with caplog.at_level(logging.DEBUG, logger="reflectors.remote_events"):
            w.pool.put("events", remote_event())
            await eventually(lambda: w.refl.failed == 1, 2.0, "given up")
            await w.settle()
        assert [v for v, *_ in w.home.writes()] == ["create"] * 3
        warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
        assert len(warnings) == 1 and "retrying" in warnings[0].getMessage()
        # a later change of the same remote event starts afresh and succeeds
        w.home.fail["create"] = []
        w.pool.put("events", remote_event(count=2))
        await eventually(lambda: (w.local() or {}).get("count") == 2, 2.0, "reflected after the outage")


async def test_transient_failure_then_success() -> None:
    async with world() as w:
        w.home.fail["create"] = [ApiError(0, "TransportError", "connection reset")]
        w.pool.put("events", remote_event())
        await eventually(w.local, 2.0, "created on the retry")
        assert w.refl.failed == 0


async def test_permanent_refusal_is_not_retried() -> None:
    async with world(max_tries=5) as w:
        w.home.fail["create"] = [ApiError(422, "Invalid", "bad event")]
        w.pool.put("events", remote_event())
        await eventually(lambda: w.refl.failed == 1, 2.0, "given up at once")
        await w.settle()
        assert [v for v, *_ in w.home.writes()] == ["create"]


async def test_local_copy_deleted_behind_our_back_is_recreated_on_the_next_change() -> None:
    async with world() as w:
        w.pool.put("events", remote_event())
        await eventually(w.local, 2.0, "the local copy")
        w.home.remove("events", NS, "web-0.17f0a")  # e.g. the Event TTL expired
        w.pool.put("events", remote_event(count=2))
        await eventually(lambda: (w.local() or {}).get("count") == 2, 2.0, "re-created")


async def test_stop_pair_stops_the_cache_and_leaves_copies() -> None:
    async with world() as w:
        w.pool.put("events", remote_event())
        await eventually(w.local, 2.0, "the local copy")
        tasks = list(w.refl.pairs[NS].tasks)
        w.refl.stop_pair(NS)
        await eventually(lambda: all(t.done() for t in tasks), 2.0, "pair tasks finished")
        assert NS not in w.refl.pairs
        assert w.local() is not None
        assert await w.refl.handle(f"{NS}/web-0.17f0a") is None


async def test_zero_workers_disables_the_reflector() -> None:
    async with world(workers=0, start=False) as w:
        w.start_pair()
        assert w.refl.pairs == {} and not w.refl.enabled
        await w.refl.run()  # returns at once
