"""vkbridge's own registry carries what operators expect of any Kubernetes component's /metrics."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from prometheus_client import generate_latest

from vkbridge import __version__
from vkbridge.buildinfo import REVISION_ENV, revision
from vkbridge.metrics import Metrics, node_ready, seconds_until


def test_registry_has_process_and_platform_collectors() -> None:
    m = Metrics()
    rss = m.registry.get_sample_value("process_resident_memory_bytes")
    assert rss is not None and rss > 1_000_000
    assert m.registry.get_sample_value("process_start_time_seconds")
    assert m.registry.get_sample_value("process_open_fds")
    text = generate_latest(m.registry).decode()
    assert "python_info{" in text and "python_gc_objects_collected_total" in text


def test_two_instances_do_not_collide() -> None:
    a, b = Metrics(), Metrics()
    assert a.registry.get_sample_value("process_open_fds") is not None
    assert b.registry.get_sample_value("process_open_fds") is not None


def test_build_info_names_version_and_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REVISION_ENV, "abc123")
    m = Metrics()
    samples = [s for f in m.registry.collect() if f.name == "vkbridge_build_info" for s in f.samples]
    assert len(samples) == 1 and samples[0].value == 1
    assert samples[0].labels["version"] == __version__ and samples[0].labels["revision"] == "abc123"
    monkeypatch.delenv(REVISION_ENV)
    again = Metrics().registry.get_sample_value(
        "vkbridge_build_info",
        {
            "version": __version__,
            "revision": revision(),  # the checkout's HEAD, read from its files
            "python_version": samples[0].labels["python_version"],
        },
    )
    assert again == 1


def test_serving_certificate_expiry_gauge() -> None:
    m = Metrics()
    assert math.isnan(m.registry.get_sample_value("vkbridge_serving_certificate_expiry_seconds") or 0)
    not_after = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    m.serving_cert_expiry_seconds.set_function(lambda: seconds_until(not_after))
    left = m.registry.get_sample_value("vkbridge_serving_certificate_expiry_seconds")
    assert left is not None and 7190 < left <= 7200


def test_seconds_until() -> None:
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    assert seconds_until(now + dt.timedelta(minutes=1), now) == 60
    assert seconds_until(now - dt.timedelta(seconds=5), now) == -5
    assert math.isnan(seconds_until(None, now))


def test_workqueue_metrics_follow_client_go_with_the_pod_startup_buckets() -> None:
    m = Metrics()
    qm = m.workqueue("pods")
    qm.add("ns/a")
    qm.get("ns/a")
    qm.done("ns/a")
    qm.retry()
    g = m.registry.get_sample_value
    assert g("vkbridge_workqueue_adds_total", {"name": "pods"}) == 1
    assert g("vkbridge_workqueue_retries_total", {"name": "pods"}) == 1
    assert g("vkbridge_workqueue_depth", {"name": "pods"}) == 0
    assert g("vkbridge_workqueue_queue_duration_seconds_count", {"name": "pods"}) == 1
    assert g("vkbridge_workqueue_work_duration_seconds_count", {"name": "pods"}) == 1
    assert g("vkbridge_workqueue_longest_running_processor_seconds", {"name": "pods"}) == 0
    edges = {
        f.name: [s.labels["le"] for s in f.samples if s.name.endswith("_bucket")]
        for f in m.registry.collect()
        if f.name.startswith("vkbridge_workqueue_") and f.type == "histogram"
    }
    kubelet = ["0.5", "1.0", "2.0", "3.0", "4.0", "5.0", "6.0", "8.0", "10.0", "20.0", "30.0", "45.0", "60.0"]
    kubelet += ["120.0", "180.0", "240.0", "300.0", "360.0", "480.0", "600.0", "900.0", "1200.0", "1800.0"]
    kubelet += ["2700.0", "3600.0", "+Inf"]
    queued = edges["vkbridge_workqueue_queue_duration_seconds"]
    assert queued[-len(kubelet) :] == kubelet and float(queued[0]) < 0.5  # every SLI edge, finer below
    assert edges["vkbridge_workqueue_work_duration_seconds"][-2:] == ["60.0", "+Inf"]


def test_api_requests_are_labelled_by_server_verb_resource_and_code() -> None:
    m = Metrics()
    m.api_requests.labels("pool", "create", "shadowpods", "201").inc()
    assert (
        m.registry.get_sample_value(
            "vkbridge_api_requests_total",
            {"server": "pool", "verb": "create", "resource": "shadowpods", "code": "201"},
        )
        == 1
    )


def test_node_ready_reads_the_ready_condition() -> None:
    def node(status: str) -> dict[str, object]:
        return {
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "True"},
                    {"type": "Ready", "status": status},
                ]
            }
        }

    assert node_ready(node("True")) == 1
    assert node_ready(node("Unknown")) == 0 and node_ready(node("False")) == 0
    assert node_ready(None) == 0 and node_ready({"status": {"conditions": ["junk"]}}) == 0


def test_a_withdrawn_grant_resource_has_no_grant_or_used_sample() -> None:
    """Issue 35 item 9: a GPU grant withdrawn must not read 2 forever."""
    m = Metrics()
    gpu = "nvidia.com/gpu"
    m.show_grant({"cpu": 2, gpu: 2, "pods": 10}, {"cpu": 1, gpu: 2, "pods": 1})
    assert m.registry.get_sample_value("vkbridge_grant_resources", {"resource": gpu}) == 2
    assert m.registry.get_sample_value("vkbridge_grant_used_resources", {"resource": gpu}) == 2
    m.show_grant({"cpu": 2, "pods": 10}, {"cpu": 1, gpu: 1, "pods": 1})  # withdrawn; one pod still holds one
    assert m.registry.get_sample_value("vkbridge_grant_resources", {"resource": gpu}) is None
    assert m.registry.get_sample_value("vkbridge_grant_used_resources", {"resource": gpu}) == 1
    m.show_grant({"cpu": 2, "pods": 10}, {"cpu": 1, "pods": 1})  # that pod finished
    assert m.registry.get_sample_value("vkbridge_grant_used_resources", {"resource": gpu}) is None
    assert m.registry.get_sample_value("vkbridge_grant_used_resources", {"resource": "pods"}) == 1
    assert m.registry.get_sample_value("vkbridge_grant_resources", {"resource": "cpu"}) == 2
