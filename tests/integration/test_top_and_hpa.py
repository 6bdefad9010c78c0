"""``kubectl top`` and a HorizontalPodAutoscaler on offloaded pods, end to end (issue 17 item 3).

The chain: a busy container on the pool's real worker -> its kubelet's ``/metrics/resource`` -> the pool's
metrics-server (``metrics.k8s.io``) -> vkbridge's ``/metrics/resource`` (PodMetrics integrated into a
counter) -> the consumer's metrics-server -> ``kubectl top`` and the consumer's HPA controller (sync period
3 s, e2e/controlplane.py). Both metrics-servers are processes behind the aggregation layer
(e2e/metrics_server.py). Skipped, with the reason, where real workers cannot run (e2e/workers.why_not).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.binaries import BinariesNotFound, find_binaries
from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.fixtures_workers import steer_pool_pods_to
from e2e.metrics_server import MetricsServer, top_pods
from e2e.vkbridge_proc import VkbridgeProcess
from e2e.workers import why_not
from tests.integration.helpers import get, must, pod_path, pool_pod, wait_until
from tests.support.workloads import offloaded_namespace


def _why_not() -> str | None:
    reason = why_not()
    if reason:
        return reason
    try:
        find_binaries(("metrics-server",), build=False)
    except BinariesNotFound:
        return "no metrics-server binary: bash hack/build-metrics-server.sh builds it"
    return None


_WHY_NOT = _why_not()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]

# Busy until /tmp/stop exists ([ and : are shell builtins: one core's worth of spinning, capped by the limit).
BUSY = "while [ ! -e /tmp/stop ]; do :; done; echo load stopped; exec sleep 3600"
CPU_REQUEST, CPU_LIMIT = "50m", "100m"
MAX_REPLICAS = 3


@pytest.fixture(scope="module")
def metrics(
    consumer: ControlPlane, pool: ControlPlane, vkbridge: VkbridgeProcess, real_pool_worker: str
) -> Iterator[tuple[MetricsServer, MetricsServer]]:
    """metrics-server on both planes (pool first: the consumer's is fed through vkbridge from it)."""
    with MetricsServer(pool) as on_pool, MetricsServer(consumer) as on_consumer:
        yield on_pool, on_consumer


@pytest.fixture(scope="module")
def busy_ns(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, real_pool_worker: str,
    metrics: tuple[MetricsServer, MetricsServer],
) -> Iterator[tuple[str, str]]:  # fmt: skip
    """An offloaded namespace whose pool pods all go to the real worker while the module runs."""
    with offloaded_namespace(consumer, pool, "top") as offloaded, steer_pool_pods_to(pool, real_pool_worker):
        yield offloaded


def _busy_container(spec: dict[str, Any]) -> None:
    c = spec["containers"][0]
    c["imagePullPolicy"] = "Never"
    c["resources"]["limits"] = {"cpu": CPU_LIMIT, "memory": "64Mi"}


def _top_cpu(plane: ControlPlane, ns: str, name: str) -> int | None:
    return top_pods(plane, ns).get(name) or None


def test_kubectl_top_pod_on_the_consumer_shows_cpu_of_a_busy_offloaded_pod(
    busy_ns: tuple[str, str], consumer: ControlPlane, pool: ControlPlane, bundle: Bundle,
    metrics: tuple[MetricsServer, MetricsServer],
) -> None:  # fmt: skip
    ns, remote_ns = busy_ns
    pod = pool_pod(bundle.slug, "busy", command=BUSY, cpu=CPU_REQUEST)
    _busy_container(pod["spec"])
    must(consumer, "POST", pod_path(ns), pod)
    on_pool = wait_until(lambda: _top_cpu(pool, remote_ns, "busy"), 90, "kubectl top on the pool", 2.0)
    assert on_pool > 0
    on_consumer = wait_until(lambda: _top_cpu(consumer, ns, "busy"), 60, "kubectl top on the consumer", 2.0)
    assert on_consumer > 0, on_consumer
    consumer.api("DELETE", pod_path(ns, "busy"))


def _deployment(slug: str) -> dict[str, Any]:
    template = pool_pod(slug, "x", command=BUSY, cpu=CPU_REQUEST, labels={"app": "busy"})
    _busy_container(template["spec"])
    meta = {
        "labels": template["metadata"].get("labels", {}),
        "annotations": template["metadata"].get("annotations", {}),
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "busy"},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "busy"}},
            "template": {"metadata": meta, "spec": template["spec"]},
        },
    }


HPA = {
    "apiVersion": "autoscaling/v2",
    "kind": "HorizontalPodAutoscaler",
    "metadata": {"name": "busy"},
    "spec": {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "busy"},
        "minReplicas": 1,
        "maxReplicas": MAX_REPLICAS,
        "metrics": [
            {
                "type": "Resource",
                "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
            }
        ],
        "behavior": {
            "scaleUp": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Pods", "value": 4, "periodSeconds": 5}],
            },
            "scaleDown": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Percent", "value": 100, "periodSeconds": 5}],
            },
        },
    },
}


def _replicas(consumer: ControlPlane, ns: str) -> int:
    d = get(consumer, f"/apis/apps/v1/namespaces/{ns}/deployments/busy") or {}
    return int((d.get("spec") or {}).get("replicas") or 0)


def _stop_load(consumer: ControlPlane, ns: str) -> None:
    """touch /tmp/stop in every running replica (through vkbridge's exec); idempotent."""
    status, pods = consumer.api("GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dbusy")
    for p in pods.get("items", []) if status == 200 else []:
        if (p.get("status") or {}).get("phase") == "Running":
            consumer.kubectl("exec", "-n", ns, p["metadata"]["name"], "--", "touch", "/tmp/stop", check=False)


def test_hpa_scales_an_offloaded_deployment_up_under_cpu_load_and_back_down(
    busy_ns: tuple[str, str], consumer: ControlPlane, bundle: Bundle,
    metrics: tuple[MetricsServer, MetricsServer],
) -> None:  # fmt: skip
    ns, _ = busy_ns
    must(consumer, "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", _deployment(bundle.slug))
    must(consumer, "POST", f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers", HPA)
    wait_until(lambda: _replicas(consumer, ns) > 1, 120, "the HPA to scale busy up", 2.0)

    def down() -> bool:
        _stop_load(consumer, ns)
        return _replicas(consumer, ns) == 1

    wait_until(down, 90, "the HPA to scale busy back to 1 once the load stopped", 3.0)
