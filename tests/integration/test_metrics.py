"""/metrics on --metrics-address exposes Liqo's counters and ours with sensible values after a burst."""

from __future__ import annotations

import re
import urllib.request

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import must, phase, pod_path, pool_pod, wait_until

pytestmark = pytest.mark.integration


def scrape(vkbridge: VkbridgeProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{vkbridge.opts.metrics_port}/metrics", timeout=5) as resp:
        return resp.read().decode()


def value(text: str, name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for line in text.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{(.*)\}})? (\S+)$", line)
        if not m:
            continue
        have = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2) or ""))
        if all(have.get(k) == v for k, v in labels.items()):
            total += float(m.group(3))
            found = True
    assert found, f"no sample of {name} {labels}"
    return total


def test_metrics_after_a_burst(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess, offloaded_ns: tuple[str, str]
) -> None:
    ns, _ = offloaded_ns
    names = [f"m{i}" for i in range(10)]
    for name in names:
        must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, name, cpu="10m", memory="8Mi"))
    wait_until(lambda: all(phase(consumer, ns, n) == "Running" for n in names), 60, "the burst Running")
    with urllib.request.urlopen(f"http://127.0.0.1:{vkbridge.opts.metrics_port}/healthz", timeout=5) as resp:
        assert resp.status == 200

    def gauges_refreshed() -> str | None:
        text = scrape(vkbridge)
        return text if value(text, "vkbridge_grant_used_resources", resource="pods") >= len(names) else None

    text = wait_until(gauges_refreshed, 15, "the grant gauges to count the burst")
    labels = {
        "namespace": ns,
        "reflector_resource": "Pod",
        "cluster_id": bundle.slug,
        "node_name": bundle.slug,
    }
    assert value(text, "liqo_virtual_kubelet_reflection_item_counter", **labels) >= len(names)
    assert value(text, "vkbridge_reflection_latency_seconds_count", direction="outbound") >= len(names)
    assert value(text, "vkbridge_reflection_latency_seconds_count", direction="inbound") >= len(names)
    assert value(text, "vkbridge_pool_reachable", state="Connected") == 1
    assert value(text, "vkbridge_pool_reachable", state="Lost") == 0
    assert value(text, "vkbridge_grant_resources", resource="cpu") > 0
    assert value(text, "vkbridge_workqueue_depth", queue="pods") >= 0
    days = value(text, "vkbridge_client_certificate_expiry_seconds") / 86400
    assert 300 < days < 366, f"certificate expiry {days:.0f} days"
    assert value(text, "vkbridge_reflected_pods") >= len(names)
