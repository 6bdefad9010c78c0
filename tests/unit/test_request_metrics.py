"""What a request is, for ``vkbridge_api_requests_total`` (vkbridge.kube.requestmetrics): pure."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram

from vkbridge.kube.client import PODS, SHADOWPODS, classify
from vkbridge.kube.requestmetrics import APPLY_PATCH, ERROR_CODE, Params, RequestMetrics, code_label
from vkbridge.metrics import kubelet_api_path


@pytest.mark.parametrize(
    ("method", "path", "params", "content_type", "expected"),
    [
        ("GET", "/api/v1/namespaces/team-a/pods", None, None, ("list", "pods")),
        ("GET", "/api/v1/namespaces/team-a/pods/web-0", None, None, ("get", "pods")),
        ("GET", "/api/v1/namespaces/team-a/pods", {"watch": True}, None, ("watch", "pods")),
        ("GET", "/api/v1/pods", {"watch": "true"}, None, ("watch", "pods")),
        ("PATCH", "/api/v1/namespaces/team-a/pods/web-0/status", None, None, ("patch", "pods/status")),
        ("GET", "/api/v1/namespaces/team-a/pods/web-0/log", None, None, ("get", "pods/log")),
        ("POST", "/api/v1/namespaces/team-a/pods/web-0/eviction", None, None, ("create", "pods/eviction")),
        (
            "POST",
            "/apis/offloading.liqo.io/v1beta1/namespaces/team-a-c1/shadowpods",
            None,
            None,
            ("create", "shadowpods"),
        ),
        (
            "PATCH",
            "/apis/offloading.liqo.io/v1beta1/namespaces/ns/shadowpods/web-0",
            None,
            APPLY_PATCH,
            ("apply", "shadowpods"),
        ),
        ("PUT", "/apis/coordination.k8s.io/v1/namespaces/t/leases/c0123", None, None, ("update", "leases")),
        ("PATCH", "/api/v1/nodes/c0123/status", None, None, ("patch", "nodes/status")),
        ("DELETE", "/api/v1/namespaces/t/events", None, None, ("deletecollection", "events")),
        ("DELETE", "/api/v1/namespaces/t/events/e.1", None, None, ("delete", "events")),
        ("GET", "/api/v1/namespaces/team-a", None, None, ("get", "namespaces")),
        ("PUT", "/api/v1/namespaces/team-a/finalize", None, None, ("update", "namespaces/finalize")),
        ("GET", "/livez", None, None, ("get", "livez")),
        ("GET", "/version?timeout=5s", None, None, ("get", "version")),
        ("GET", "/apis/metrics.k8s.io/v1beta1", None, None, ("list", "")),
    ],
)
def test_classify(
    method: str, path: str, params: Params | None, content_type: str | None, expected: tuple[str, str]
) -> None:
    assert classify(method, path, params, content_type) == expected


def test_no_name_or_namespace_ever_becomes_a_label() -> None:
    """Bounded cardinality: thousands of pods in hundreds of namespaces give the same few label sets."""
    seen = set()
    for i in range(50):
        ns, name = f"ns-{i}", f"pod-{i}"
        for res, sub in ((PODS, None), (PODS, "status"), (SHADOWPODS, None)):
            for method in ("GET", "PATCH", "DELETE"):
                verb, resource = classify(method, res.path(ns, name, sub))
                assert ns not in resource and name not in resource
                seen.add((verb, resource))
    assert len(seen) == 9


def test_code_label() -> None:
    assert code_label(200) == "200" and code_label(404) == "404"
    assert code_label(None) == ERROR_CODE == "error"
    assert code_label(0) == ERROR_CODE  # TransportError's status


def test_request_metrics_counts_by_server_verb_resource_and_code() -> None:
    reg = CollectorRegistry()
    counter = Counter("t_requests", "t", ["server", "verb", "resource", "code"], registry=reg)
    pool = RequestMetrics(counter, "pool")
    pool.observe(("create", "shadowpods"), 201)
    pool.observe(("create", "shadowpods"), 201)
    pool.observe(("watch", "pods"), None)
    RequestMetrics(counter, "consumer").observe(("patch", "pods/status"), 200)
    RequestMetrics(None, "off").observe(("get", "pods"), 200)  # a client nobody meters: a no-op

    def value(**labels: str) -> float | None:
        return reg.get_sample_value("t_requests_total", labels)

    assert value(server="pool", verb="create", resource="shadowpods", code="201") == 2
    assert value(server="pool", verb="watch", resource="pods", code="error") == 1
    assert value(server="consumer", verb="patch", resource="pods/status", code="200") == 1
    assert value(server="off", verb="get", resource="pods", code="200") is None


def test_each_label_set_is_looked_up_once_and_counts_every_request() -> None:
    """``labels()`` validates and locks on each call: the child of a label set is kept, and still counts."""
    reg = CollectorRegistry()
    counter = Counter("t_requests", "t", ["server", "verb", "resource", "code"], registry=reg)
    looked_up: list[tuple[str, ...]] = []

    class Watched:
        def labels(self, *values: str) -> Any:
            looked_up.append(values)
            return counter.labels(*values)

    pool = RequestMetrics(Watched(), "pool")
    for _ in range(3):
        pool.observe(("create", "shadowpods"), 201)
        pool.observe(("patch", "pods/status"), 200)
        pool.observe(("watch", "pods"), None)
    pool.observe(("create", "shadowpods"), 409)
    assert looked_up == [
        ("pool", "create", "shadowpods", "201"),
        ("pool", "patch", "pods/status", "200"),
        ("pool", "watch", "pods", "error"),
        ("pool", "create", "shadowpods", "409"),
    ]
    labels = {"server": "pool", "verb": "create", "resource": "shadowpods"}
    assert reg.get_sample_value("t_requests_total", {**labels, "code": "201"}) == 3
    assert reg.get_sample_value("t_requests_total", {**labels, "code": "409"}) == 1
    assert reg.get_sample_value("t_requests_total", {**labels, "verb": "watch", "resource": "pods",
                                                     "code": "error"}) == 3  # fmt: skip


def test_durations_by_verb_and_rate_limiter_waits_by_server() -> None:
    """Issue 36 point 8: client-go's request-duration and rate-limiter histograms, under our names."""
    reg = CollectorRegistry()
    counter = Counter("t_requests", "t", ["server", "verb", "resource", "code"], registry=reg)
    latency = Histogram("t_duration_seconds", "t", ["server", "verb"], registry=reg, buckets=(0.1, 1.0))
    waits = Histogram("t_wait_seconds", "t", ["server"], registry=reg, buckets=(0.1, 1.0))
    pool = RequestMetrics(counter, "pool", latency, waits)
    pool.observe(("create", "shadowpods"), 201, 0.05)
    pool.observe(("create", "pods"), 201, 0.5)
    pool.observe(("watch", "pods"), None, 2.0)
    pool.observe(("get", "pods"), 200)  # no duration given: counted, not timed
    pool.waited(0.0)
    pool.waited(0.3)
    RequestMetrics(counter, "off").waited(1.0)  # no histogram: a no-op

    def sample(name: str, **labels: str) -> float | None:
        return reg.get_sample_value(name, labels)

    assert sample("t_duration_seconds_count", server="pool", verb="create") == 2
    assert sample("t_duration_seconds_bucket", server="pool", verb="create", le="0.1") == 1
    assert sample("t_duration_seconds_sum", server="pool", verb="create") == pytest.approx(0.55)
    assert sample("t_duration_seconds_count", server="pool", verb="watch") == 1
    assert sample("t_duration_seconds_count", server="pool", verb="get") is None
    assert sample("t_wait_seconds_count", server="pool") == 2
    assert sample("t_wait_seconds_bucket", server="pool", le="0.1") == 1
    assert sample("t_requests_total", server="pool", verb="get", resource="pods", code="200") == 1


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/containerLogs/ns/pod/c", "containerLogs"),
        ("/exec/ns/pod/c?command=sh", "exec"),
        ("/portForward/ns/pod", "portForward"),
        ("/stats/summary", "stats"),
        ("/metrics/resource", "metrics"),
        ("/runningpods/", "runningpods"),
        ("/healthz", "healthz"),
        ("/configz", "other"),
        ("/ns-name-that-is-not-a-path/x", "other"),
        ("", "other"),
    ],
)
def test_kubelet_api_path_label_is_bounded(path: str, label: str) -> None:
    assert kubelet_api_path(path) == label
