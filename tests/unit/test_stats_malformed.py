"""Issue 35 item 6 and a confirm-or-refute: one pod's malformed PodMetrics must not take the node's
``/stats/summary`` and ``/metrics/resource`` down, and scrapes must not queue behind a slow pool.
The pool's metrics API is in memory (as in test_kubelet_stats.py); no I/O."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.waiting import eventually
from vkbridge.kubeletapi import promtext
from vkbridge.kubeletapi.stats import METRICS_PREFIX, StatsProvider, go_duration

Obj = dict[str, Any]
STARTED = "2026-12-01T11:00:00Z"


def pod(name: str) -> Obj:
    return {
        "metadata": {"namespace": "team", "name": name, "uid": f"uid-{name}"},
        "status": {
            "phase": "Running",
            "startTime": STARTED,
            "containerStatuses": [{"name": "main", "state": {"running": {"startedAt": STARTED}}}],
        },
    }


def good(name: str) -> Obj:
    return {
        "metadata": {"name": name, "namespace": "team-remote"},
        "timestamp": "2026-12-01T12:00:00Z",
        "window": "30s",
        "containers": [{"name": "main", "usage": {"cpu": "250m", "memory": "64Mi"}}],
    }


class MetricsPool:
    """The pool's metrics API, in memory: discovery answers, the pod list is ``items``."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    async def request(self, method: str, path: str, **kw: Any) -> Obj:
        return {} if path == METRICS_PREFIX else {"items": self.items}


MALFORMED = {
    "a 400-digit window": {**good("bad"), "window": "1" * 400 + "s"},
    "a container entry that is not an object": {
        **good("bad"),
        "containers": ["main", {"name": "side", "usage": {"memory": "1Mi"}}],
    },
    "a usage list": {**good("bad"), "containers": [{"name": "main", "usage": ["cpu", "memory"]}]},
    "containers that are not a list": {**good("bad"), "containers": {"name": "main"}},
    "a PodMetrics whose metadata is not an object": {**good("bad"), "metadata": ["bad"]},
}


@pytest.mark.parametrize("case", list(MALFORMED))
async def test_one_malformed_pod_metrics_leaves_out_only_its_bad_part_and_is_logged_once(
    case: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="vkbridge.kubeletapi.stats")
    pool: Any = MetricsPool([MALFORMED[case], good("web")])
    stats = StatsProvider(pool, "vk", lambda ns: f"{ns}-remote", lambda: [pod("bad"), pod("web")])
    for _ in range(3):  # scraped every 15 s: the log says it once
        collected = await stats.collect()
        by_pod = {p["podRef"]["name"]: p for p in collected.summary["pods"]}
        assert by_pod["web"]["cpu"]["usageNanoCores"] == 250_000_000  # the other pod's stats stand
        assert by_pod["web"]["memory"]["usageBytes"] == 64 * 2**20
        body = promtext.resource_metrics(collected.summary, scrape_error=collected.error)
        names = {s.name for f in text_string_to_metric_families(body.decode()) for s in f.samples}
        assert "pod_cpu_usage_seconds_total" in names and "container_memory_working_set_bytes" in names
    told = [r for r in caplog.records if "unusable figure" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in caplog.records]


def test_a_go_duration_beyond_int64_nanoseconds_is_not_one() -> None:
    assert go_duration("1" * 400 + "s") is None  # was inf: int(rate * inf) raised OverflowError
    assert go_duration("2562047h") == 2562047 * 3600.0  # Go's largest whole-hour Duration
    assert go_duration("2562048h") is None


class SlowPool:
    """A metrics API whose every pod-list answer waits until the test gives it (one at a time)."""

    def __init__(self) -> None:
        self.waiting: list[asyncio.Future[Obj]] = []
        self.asked = 0

    async def request(self, method: str, path: str, **kw: Any) -> Obj:
        if path == METRICS_PREFIX:
            return {}
        self.asked += 1
        answer: asyncio.Future[Obj] = asyncio.get_running_loop().create_future()
        self.waiting.append(answer)
        return await answer

    def answer_one(self) -> None:
        """Answer the oldest request still waiting (one whose scrape gave up is skipped)."""
        while self.waiting:
            answer = self.waiting.pop(0)
            if not answer.done():
                answer.set_result({"items": [good("web")]})
                return


async def test_scrapes_during_a_slow_pool_answer_share_it_instead_of_queueing_behind_it() -> None:
    pool = SlowPool()
    stats = StatsProvider(pool, "vk", lambda ns: f"{ns}-remote", lambda: [pod("web")])  # type: ignore[arg-type]
    first = asyncio.create_task(stats.collect())
    await eventually(lambda: pool.waiting, 2.0, "the first scrape's pool request")
    later = [asyncio.create_task(stats.collect()) for _ in range(3)]  # metrics-server, Prometheus...
    await asyncio.sleep(0.05)
    pool.answer_one()  # the pool answers once: every scrape waiting for it is done
    done = await asyncio.wait_for(asyncio.gather(first, *later), 2.0)
    assert all(c.summary["pods"][0]["cpu"]["usageNanoCores"] == 250_000_000 for c in done)
    assert pool.asked == 1


async def test_a_scrape_that_gives_up_does_not_end_the_read_the_others_wait_for() -> None:
    pool = SlowPool()
    stats = StatsProvider(pool, "vk", lambda ns: f"{ns}-remote", lambda: [pod("web")])  # type: ignore[arg-type]
    gone = asyncio.create_task(stats.collect())
    await eventually(lambda: pool.waiting, 2.0, "the pool request")
    staying = asyncio.create_task(stats.collect())
    await asyncio.sleep(0)
    gone.cancel()  # its client hung up
    await asyncio.sleep(0.01)
    pool.answer_one()
    collected = await asyncio.wait_for(staying, 2.0)
    assert collected.summary["pods"][0]["cpu"]["usageNanoCores"] == 250_000_000 and pool.asked == 1
