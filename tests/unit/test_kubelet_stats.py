"""``/stats/summary`` (vkbridge.kubeletapi.stats): bad figures from the pool, and the pods it reads
from the compact pod cache without decoding it (a fake client feeds the cache; no I/O)."""

from __future__ import annotations

import datetime as dt
import gc
import logging
import tracemalloc
from typing import Any

import orjson
import pytest

from e2e.waiting import eventually
from tests.support.scripted import DecodeCounter, FakeClient, ev, page, start, stop
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import PODS, WatchExpired
from vkbridge.kubeletapi import stats as kstats
from vkbridge.kubeletapi.stats import StatsProvider, build_summary

Obj = dict[str, Any]
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
HUGE = "1." + "1" * 5000  # a valid quantity for apimachinery; Python cannot read it as an int


def pod(ns: str, name: str, rv: str = "1", start_time: str | None = None) -> Obj:
    status: Obj = {"phase": "Running", "startTime": start_time} if start_time else {"phase": "Pending"}
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": rv,
                     "creationTimestamp": "2026-12-01T11:00:00Z", "labels": {"big": "x" * 500}},
        "spec": {"nodeName": "vk", "containers": [{"name": "main", "image": "busybox"}]},
        "status": status,
    }  # fmt: skip


def metrics(cpu: str, memory: str) -> dict[tuple[str, str], Obj]:
    usage = {"cpu": cpu, "memory": memory}
    return {
        ("team", "web"): {
            "timestamp": "2026-12-01T12:00:00Z",
            "containers": [{"name": "main", "usage": usage}],
        }
    }


def test_a_figure_with_thousands_of_digits_is_left_out_and_the_summary_stands() -> None:
    summary = build_summary("vk", NOW, [pod("team", "web")], metrics(HUGE, "64Mi"), NOW)
    (entry,) = summary["pods"]
    (container,) = entry["containers"]
    assert "cpu" not in container  # the bad figure is skipped...
    assert container["memory"]["usageBytes"] == 64 * 2**20  # ...the good one of the same container kept
    assert entry["memory"]["usageBytes"] == 64 * 2**20 and entry["cpu"]["usageNanoCores"] == 0


class MetricsPool:
    """The pool's metrics API, in memory."""

    def __init__(self, body: Obj) -> None:
        self.body = body

    async def request(self, method: str, path: str, **kw: Any) -> Obj:
        return self.body


async def test_a_bad_figure_is_logged_once_however_often_the_summary_is_scraped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="vkbridge.kubeletapi.stats")
    item = {"metadata": {"name": "web"}, **metrics(HUGE, "64Mi")[("team", "web")]}
    pool: Any = MetricsPool({"items": [item]})
    stats = StatsProvider(pool, "vk", lambda ns: f"{ns}-remote", lambda: [pod("team", "web")])
    for _ in range(3):
        summary = await stats.summary()
        assert summary["pods"][0]["containers"][0]["memory"]["usageBytes"] == 64 * 2**20
    told = [r for r in caplog.records if "unusable figure" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in caplog.records]


async def test_pod_refs_follow_the_compact_pod_cache_without_decoding_it() -> None:
    fake = FakeClient()
    client: Any = fake
    cache = Cache(client, PODS, name="consumer/pods", inactivity_timeout=5.0, backoff_base=0.01, compact=True)
    fake.list_results = [page("10", pod("a", "one")), page("30", pod("b", "three"))]
    refs = kstats.PodRefs(cache)
    task = await start(cache)
    fake.feed.put_nowait(ev("ADDED", pod("a", "two", "11")))
    fake.feed.put_nowait(ev("MODIFIED", pod("a", "one", "12", start_time="2026-12-01T11:30:00Z")))
    await eventually(
        lambda: len(refs.entries()) == 2 and "startTime" in refs.entries()[0]["status"],
        3.0,
        "both pods with a start time",
    )
    decoded = DecodeCounter(cache)
    summary = build_summary("vk", NOW, refs.entries(), {}, NOW)
    assert decoded.count == 0  # a scrape reads the refs, not the cache
    assert [(p["podRef"], p["startTime"]) for p in summary["pods"]] == [
        ({"name": "one", "namespace": "a", "uid": "uid-one"}, "2026-12-01T11:30:00Z"),
        ({"name": "two", "namespace": "a", "uid": "uid-two"}, "2026-12-01T11:00:00Z"),
    ]
    fake.feed.put_nowait(ev("DELETED", pod("a", "two", "13")))
    await eventually(lambda: len(refs.entries()) == 1, 3.0, "one pod left")
    fake.feed.put_nowait(WatchExpired("too old"))
    await eventually(lambda: cache.relists == 1, 3.0, "a re-list")  # a re-list's diff reaches the refs too
    assert [r["metadata"]["name"] for r in refs.entries()] == ["three"]
    await stop(task)


def running_pod(i: int) -> Obj:
    """A pod as the compact cache hands it to subscribers: freshly decoded, sharing no strings."""
    name = f"web-7d9f8c6b5-{i:05d}"
    body = {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"0b6f1f3a-5c1e-4b8e-9d77-{i:012d}",
                     "creationTimestamp": "2026-12-01T11:00:00Z", "resourceVersion": str(100 + i)},
        "spec": {"nodeName": "vk", "containers": [{"name": "main", "image": "busybox"}]},
        "status": {"phase": "Running", "startTime": "2026-12-01T11:00:02Z",
                   "containerStatuses": [{"name": "main", "state": {"running": {"startedAt": "2026-12-01T11:00:03Z"}}}]},
    }  # fmt: skip
    decoded: Obj = orjson.loads(orjson.dumps(body))
    return decoded


async def test_pod_refs_keep_a_few_hundred_bytes_per_pod() -> None:
    """At 10,000 pods every byte per pod is 10 KB of the VK's memory: kept as dicts a ref cost ~1.3 KB
    (with the strings of the decoded pod it held), as JSON ~0.5 KB with its key."""
    fake = FakeClient()
    client: Any = fake
    cache = Cache(client, PODS, name="consumer/pods", inactivity_timeout=5.0, backoff_base=0.01, compact=True)
    fake.list_results = [page("10")]
    refs = kstats.PodRefs(cache)
    task = await start(cache)
    await cache.wait_synced()
    pods = [running_pod(i) for i in range(1000)]
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for p in pods:
            refs._on_change(
                "ADDED", None, p
            )  # what the cache's change feed calls, without the cache's own copy
        del p
        pods.clear()  # the decoded pods go, as after a real change: only what the refs keep stays
        gc.collect()
        per_pod = (tracemalloc.get_traced_memory()[0] - before) / 1000
    finally:
        tracemalloc.stop()
    assert len(refs.entries()) == 1000 and len(refs.running_keys()) == 1000
    assert per_pod < 700, f"{per_pod:.0f} bytes per pod"
    assert refs.entries()[0]["status"]["containerStatuses"][0]["state"] == {
        "running": {"startedAt": "2026-12-01T11:00:03Z"}
    }
    await stop(task)
