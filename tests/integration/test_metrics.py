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


def value(text: str, name: str, /, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels` (a label may be called `name`)."""
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

    labels = {
        "namespace": ns,
        "reflector_resource": "Pod",
        "cluster_id": bundle.slug,
        "node_name": bundle.slug,
    }
    counts = {  # each counts the burst once it is reflected; some are refreshed by a periodic loop
        "reflected items": lambda t: value(t, "liqo_virtual_kubelet_reflection_item_counter", **labels),
        "outbound latencies": lambda t: value(
            t, "vkbridge_reflection_latency_seconds_count", direction="outbound"
        ),
        "inbound latencies": lambda t: value(
            t, "vkbridge_reflection_latency_seconds_count", direction="inbound"
        ),
        "grant pods used": lambda t: value(t, "vkbridge_grant_used_resources", resource="pods"),
        "reflected pods": lambda t: value(t, "vkbridge_reflected_pods"),
    }
    last: dict[str, float] = {}

    def all_counted() -> str | None:
        text = scrape(vkbridge)
        last.update({what: count(text) for what, count in counts.items()})
        return text if all(v >= len(names) for v in last.values()) else None

    try:
        text = wait_until(all_counted, 30, "every metric to count the burst")
    except TimeoutError as exc:
        raise AssertionError(f"metrics short of {len(names)} pods: {last}") from exc
    assert value(text, "vkbridge_pool_reachable", state="Connected") == 1
    assert value(text, "vkbridge_pool_reachable", state="Lost") == 0
    assert value(text, "vkbridge_node_ready") == 1
    assert value(text, "vkbridge_grant_resources", resource="cpu") > 0
    assert value(text, "vkbridge_workqueue_depth", name="pods") >= 0
    # every pod of the burst went through the pods queue: waited, handled (client-go's workqueue metrics)
    for series in ("adds_total", "queue_duration_seconds_count", "work_duration_seconds_count"):
        assert value(text, f"vkbridge_workqueue_{series}", name="pods") >= len(names), series
    # the API requests behind it, counted where they are sent (vkbridge.kube.client)
    requests = "vkbridge_api_requests_total"
    created = value(text, requests, server="pool", verb="create", resource="shadowpods", code="201")
    assert created >= len(names), f"ShadowPods created: {created}"
    assert value(text, requests, server="consumer", verb="patch", resource="pods/status", code="200") >= len(
        names
    )
    assert value(text, requests, server="consumer", verb="watch", resource="pods", code="200") >= 1
    assert value(text, requests, server="pool", verb="list", resource="shadowpods", code="200") >= 1
    samples = [ln for ln in text.splitlines() if ln.startswith(requests + "{")]
    assert not [ln for ln in samples if any(x in ln for x in (*offloaded_ns, *names))], "names in labels"
    days = value(text, "vkbridge_client_certificate_expiry_seconds") / 86400
    assert 300 < days < 366, f"certificate expiry {days:.0f} days"
    # Issue 36 point 8: what operators chart beside the counts (client-go's names in brackets).
    duration = "vkbridge_api_request_duration_seconds"  # rest_client_request_duration_seconds
    assert value(text, f"{duration}_count", server="pool", verb="create") >= len(names)
    assert value(text, f"{duration}_sum", server="pool", verb="create") > 0
    waits = "vkbridge_api_rate_limiter_wait_seconds"  # rest_client_rate_limiter_duration_seconds
    assert value(text, f"{waits}_count", server="consumer") >= created
    assert value(text, "vkbridge_leader") == 1
    # kubectl logs: kube-apiserver -> this node's kubelet API, counted by path and status
    wait_until(
        lambda: consumer.api("GET", f"{pod_path(ns, names[0])}/log")[0] == 200, 30, "a burst pod's logs"
    )
    after = scrape(vkbridge)
    assert value(after, "vkbridge_kubelet_api_requests_total", path="containerLogs", code="200") >= 1
