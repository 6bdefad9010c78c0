"""The kubelet's Prometheus paths (vkbridge.kubeletapi.promtext) and the CPU counters behind
``/metrics/resource`` (vkbridge.kubeletapi.stats): pure, parsed with prometheus_client's parser."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vkbridge.kube.client import ApiError, TransportError
from vkbridge.kubeletapi import promtext
from vkbridge.kubeletapi.stats import CpuCounters, StatsProvider, build_summary, go_duration, summary_ref

Obj = dict[str, Any]
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
STARTED = "2026-12-01T11:00:00Z"


def families(body: bytes) -> dict[str, Any]:
    return {f.name: f for f in text_string_to_metric_families(body.decode())}


def samples(body: bytes, name: str) -> dict[tuple[tuple[str, str], ...], tuple[float, float | None]]:
    return {
        tuple(sorted(s.labels.items())): (s.value, s.timestamp)
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
        if s.name == name
    }


def pod(name: str, phase: str = "Running", running: bool = True, started: str = STARTED) -> Obj:
    state: Obj = (
        {"running": {"startedAt": started}} if running else {"waiting": {"reason": "ContainerCreating"}}
    )
    return {
        "metadata": {"namespace": "team", "name": name, "uid": f"uid-{name}"},
        "spec": {"nodeName": "vk"},
        "status": {
            "phase": phase,
            "startTime": STARTED,
            "containerStatuses": [{"name": "main", "state": state}],
        },
    }


def pod_metrics(cpu: str, at: str, window: str = "30s") -> Obj:
    return {
        "metadata": {"name": "web", "namespace": "team-remote"},
        "timestamp": at,
        "window": window,
        "containers": [{"name": "main", "usage": {"cpu": cpu, "memory": "64Mi"}}],
    }


def labels(**kw: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(kw.items()))


WEB = labels(container="main", namespace="team", pod="web")


def test_go_durations_of_pod_metrics_windows() -> None:
    assert go_duration("30s") == 30.0
    assert go_duration("1m0.5s") == 60.5
    assert go_duration("250ms") == 0.25
    assert go_duration("") is None and go_duration("30") is None and go_duration("s30s") is None


def test_resource_metrics_have_the_kubelet_names_types_labels_and_sample_times() -> None:
    counters = CpuCounters()
    refs = [summary_ref(pod("web"))]
    summary = build_summary("vk", NOW, refs, {("team", "web"): pod_metrics("250m", "2026-12-01T11:59:45Z")},
                            NOW, counters=counters)  # fmt: skip
    body = promtext.resource_metrics(summary, scrape_error=False)
    fams = families(body)
    types = {name: fams[name].type for name in fams}
    assert types == {
        "node_cpu_usage_seconds": "counter",  # the parser names a counter family without "_total"
        "node_memory_working_set_bytes": "gauge",
        "container_start_time_seconds": "gauge",
        "container_cpu_usage_seconds": "counter",
        "container_memory_working_set_bytes": "gauge",
        "pod_cpu_usage_seconds": "counter",
        "pod_memory_working_set_bytes": "gauge",
        "scrape_error": "gauge",
        "resource_scrape_error": "gauge",
    }
    sample_at = dt.datetime(2026, 12, 1, 11, 59, 45, tzinfo=dt.UTC).timestamp()
    # the first sample counts the pool's rate over its window: 0.25 cores x 30 s
    assert samples(body, "container_cpu_usage_seconds_total") == {WEB: (7.5, sample_at)}
    assert samples(body, "container_memory_working_set_bytes") == {WEB: (64 * 2**20, sample_at)}
    started = dt.datetime(2026, 12, 1, 11, 0, tzinfo=dt.UTC).timestamp()
    assert samples(body, "container_start_time_seconds") == {WEB: (started, None)}
    assert samples(body, "pod_cpu_usage_seconds_total") == {
        labels(namespace="team", pod="web"): (7.5, sample_at)
    }
    assert samples(body, "node_cpu_usage_seconds_total") == {(): (7.5, NOW.timestamp())}
    assert samples(body, "node_memory_working_set_bytes") == {(): (64 * 2**20, NOW.timestamp())}
    assert samples(body, "scrape_error") == {(): (0.0, None)}
    assert b"text/plain; version=0.0.4" in promtext.CONTENT_TYPE.encode()


def test_cpu_counters_integrate_the_pool_rate_so_metrics_server_reads_that_rate_back() -> None:
    """metrics-server 0.6+ computes (c2 - c1) / (t2 - t1) from two scrapes of container_cpu_usage_seconds_total
    with their sample times: integrating PodMetrics' rate over their timestamps gives it the pool's rate."""
    c = CpuCounters()
    key = ("team", "web", "main")
    first = c.observe(key, STARTED, 1000.0, 30.0, 250_000_000)
    assert first == 7_500_000_000
    assert c.observe(key, STARTED, 1000.0, 30.0, 250_000_000) == first  # same sample scraped again: no change
    second = c.observe(key, STARTED, 1015.0, 30.0, 500_000_000)
    assert (second - first) / 15.0 == 500_000_000  # the rate metrics-server derives is the pool's latest
    restarted = c.observe(key, "2026-12-01T11:30:00Z", 1030.0, 30.0, 100_000_000)
    assert restarted == 3_000_000_000  # a restart (new start time) is a new counter, as on a kubelet
    c.retain({("team", "web")})  # still on the node (PodMetrics may miss a scrape): the counter stays
    assert c.observe(key, "2026-12-01T11:30:00Z", 1045.0, 30.0, 100_000_000) == 4_500_000_000
    node_before = c.node_total
    c.retain(set())  # the pod went away
    assert c.node_total == node_before  # the node's counter never goes down
    assert c.observe(key, "2026-12-01T11:30:00Z", 1060.0, 30.0, 100_000_000) == 3_000_000_000  # forgotten


def test_stats_summary_lists_containers_with_their_start_time_and_usage() -> None:
    refs = [
        summary_ref(pod("web")),
        summary_ref(pod("idle")),
        summary_ref(pod("held", "Pending", running=False)),
    ]
    summary = build_summary("vk", NOW, refs, {("team", "web"): pod_metrics("250m", "2026-12-01T11:59:45Z")},
                            NOW, counters=CpuCounters())  # fmt: skip
    by_name = {p["podRef"]["name"]: p for p in summary["pods"]}
    (web,) = by_name["web"]["containers"]
    assert web["startTime"] == STARTED
    assert web["cpu"] == {"time": "2026-12-01T11:59:45Z", "usageNanoCores": 250_000_000,
                          "usageCoreNanoSeconds": 7_500_000_000}  # fmt: skip
    assert web["memory"]["workingSetBytes"] == 64 * 2**20
    assert by_name["idle"]["containers"] == [
        {"name": "main", "startTime": STARTED}
    ]  # no PodMetrics: no usage
    assert by_name["held"]["containers"] == []  # nothing runs: no container figures at all


class Pool:
    """The pool's API in memory: discovery and PodMetrics answers, or errors."""

    def __init__(self, discovery: Exception | None = None, pods: Exception | Obj | None = None) -> None:
        self.discovery, self.pods = discovery, pods
        self.calls: list[str] = []

    async def request(self, method: str, path: str, **kw: Any) -> Obj:
        self.calls.append(path)
        if path.endswith("/v1beta1"):
            if self.discovery is not None:
                raise self.discovery
            return {"kind": "APIResourceList"}
        if isinstance(self.pods, Exception):
            raise self.pods
        return self.pods or {"items": []}


async def test_without_a_metrics_api_resource_metrics_give_start_times_scrape_error_0_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="vkbridge.kubeletapi.stats")
    now = [0.0]
    pool: Any = Pool(discovery=ApiError(404, "NotFound", "the server could not find the requested resource"))
    stats = StatsProvider(pool, "vk", lambda ns: f"{ns}-remote", lambda: [summary_ref(pod("web"))],
                          clock=lambda: now[0])  # fmt: skip
    for _ in range(5):
        collected = await stats.collect()
        body = promtext.resource_metrics(collected.summary, scrape_error=collected.error)
        assert samples(body, "scrape_error") == {(): (0.0, None)}
        assert WEB in samples(body, "container_start_time_seconds")
        assert samples(body, "container_cpu_usage_seconds_total") == {}
    assert pool.calls == ["/apis/metrics.k8s.io/v1beta1"]  # discovery once, the answer cached
    now[0] = 61.0
    await stats.collect()
    now[0] = 62.0
    await stats.collect()
    assert len(pool.calls) == 2  # re-checked after the first backoff, not on every scrape
    now[0] = 61.0 + 119.0  # the next backoff is doubled
    await stats.collect()
    assert len(pool.calls) == 2
    told = [r for r in caplog.records if "no usable metrics.k8s.io" in r.getMessage()]
    assert len(told) == 1, [r.getMessage() for r in caplog.records]
    pool.discovery, pool.pods = None, {"items": [pod_metrics("250m", "2026-12-01T11:59:45Z")]}
    now[0] = 61.0 + 121.0
    collected = await stats.collect()  # the pool got a metrics API: usage from now on
    assert collected.summary["pods"][0]["containers"][0]["cpu"]["usageNanoCores"] == 250_000_000


async def test_a_pool_that_cannot_be_read_gives_scrape_error_1_and_what_is_known() -> None:
    pool: Any = Pool(pods=TransportError("GET pods: connection refused"))
    stats = StatsProvider(pool, "vk", lambda ns: f"{ns}-remote", lambda: [summary_ref(pod("web"))])
    collected = await stats.collect()
    assert collected.error
    body = promtext.resource_metrics(collected.summary, scrape_error=collected.error)
    assert samples(body, "scrape_error") == {(): (1.0, None)}
    assert samples(body, "resource_scrape_error") == {(): (1.0, None)}
    assert WEB in samples(body, "container_start_time_seconds")


def test_kubelet_gauges_count_only_what_runs_on_the_pool() -> None:
    refs = [summary_ref(p) for p in (pod("web"), pod("held", "Pending", running=False))]
    done = pod("done", "Succeeded", running=False)
    done["status"]["containerStatuses"][0]["state"] = {"terminated": {"exitCode": 0}}
    refs.append(summary_ref(done))
    body = promtext.render(promtext.kubelet_gauges("vk", refs))
    fams = families(body)
    assert {n: f.type for n, f in fams.items()} == {
        "kubelet_node_name": "gauge",
        "kubelet_running_pods": "gauge",
        "kubelet_running_containers": "gauge",
        "kubelet_desired_pods": "gauge",
    }
    assert samples(body, "kubelet_node_name") == {labels(node="vk"): (1.0, None)}
    assert samples(body, "kubelet_running_pods") == {(): (1.0, None)}  # the held-back pod does not run
    assert samples(body, "kubelet_running_containers") == {
        labels(container_state="running"): (1.0, None),
        labels(container_state="exited"): (1.0, None),
    }
    assert samples(body, "kubelet_desired_pods") == {labels(static="false"): (2.0, None)}


def test_cadvisor_and_probes_bodies_are_valid_and_say_why_they_are_empty() -> None:
    body = promtext.comment_only("no cAdvisor here\nsecond line")
    assert body == b"# no cAdvisor here\n# second line\n"
    assert list(text_string_to_metric_families(body.decode())) == []
