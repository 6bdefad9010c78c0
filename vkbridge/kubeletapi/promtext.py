"""Prometheus text for the kubelet's ``/metrics*`` paths (pure: Summary or pod refs in, bytes out).

Names, types, help and labels are the real kubelet's (``pkg/kubelet/metrics/metrics.go`` and
``collectors/resource_metrics.go``, Kubernetes 1.36), so kube-prometheus-stack rules and metrics-server
read them unchanged. Nothing here is invented: what a virtual node cannot know is left out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Iterator
from typing import Any, Final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from vkbridge.kubeletapi.stats import is_running

__all__ = ["CONTENT_TYPE", "comment_only", "kubelet_gauges", "render", "resource_metrics"]

# What a kubelet answers (client_golang's text format 0.0.4); every Prometheus-format reader accepts it.
CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"

Obj = dict[str, Any]
_CONTAINER_LABELS: Final = ("container", "pod", "namespace")
_POD_LABELS: Final = ("pod", "namespace")


class _Families:
    """A one-shot collector: the families of one scrape."""

    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        return iter(self._families)


def render(families: Iterable[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Families(list(families)))
    return generate_latest(registry)


def comment_only(why: str) -> bytes:
    """A valid exposition with no samples: a comment line says why (Prometheus ignores comments)."""
    return "".join(f"# {line}\n" for line in why.splitlines()).encode()


def _epoch(text: Any) -> float | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def _cpu_sample(stats: Obj) -> tuple[float, float | None] | None:
    """(core-seconds, sample time) of a Summary ``cpu`` block that has the cumulative figure."""
    cpu = stats.get("cpu") or {}
    if "usageCoreNanoSeconds" not in cpu:
        return None
    return cpu["usageCoreNanoSeconds"] / 1e9, _epoch(cpu.get("time"))


def _mem_sample(stats: Obj) -> tuple[float, float | None] | None:
    mem = stats.get("memory") or {}
    if "workingSetBytes" not in mem:
        return None
    return float(mem["workingSetBytes"]), _epoch(mem.get("time"))


def resource_metrics(summary: Obj, *, scrape_error: bool) -> bytes:
    """``/metrics/resource`` from a Summary, as the kubelet's resource collector writes it.

    CPU and memory samples carry the time of their measurement (metrics-server computes rates with
    it); a container without a known start time gets no ``container_start_time_seconds``.
    """
    node_cpu = CounterMetricFamily(
        "node_cpu_usage_seconds_total", "Cumulative cpu time consumed by the node in core-seconds"
    )
    node_mem = GaugeMetricFamily("node_memory_working_set_bytes", "Current working set of the node in bytes")
    c_start = GaugeMetricFamily(
        "container_start_time_seconds",
        "Start time of the container since unix epoch in seconds",
        labels=_CONTAINER_LABELS,
    )
    c_cpu = CounterMetricFamily(
        "container_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the container in core-seconds",
        labels=_CONTAINER_LABELS,
    )
    c_mem = GaugeMetricFamily(
        "container_memory_working_set_bytes",
        "Current working set of the container in bytes",
        labels=_CONTAINER_LABELS,
    )
    p_cpu = CounterMetricFamily(
        "pod_cpu_usage_seconds_total",
        "Cumulative cpu time consumed by the pod in core-seconds",
        labels=_POD_LABELS,
    )
    p_mem = GaugeMetricFamily(
        "pod_memory_working_set_bytes", "Current working set of the pod in bytes", labels=_POD_LABELS
    )
    node = summary.get("node") or {}
    if (s := _cpu_sample(node)) is not None:
        node_cpu.add_metric([], s[0], timestamp=s[1])
    if (s := _mem_sample(node)) is not None:
        node_mem.add_metric([], s[0], timestamp=s[1])
    for pod in summary.get("pods") or []:
        ref = pod.get("podRef") or {}
        pod_labels = [str(ref.get("name", "")), str(ref.get("namespace", ""))]
        for c in pod.get("containers") or []:
            labels = [str(c.get("name", "")), *pod_labels]
            if (started := _epoch(c.get("startTime"))) is not None and started > 0:
                c_start.add_metric(labels, started)
            if (s := _cpu_sample(c)) is not None:
                c_cpu.add_metric(labels, s[0], timestamp=s[1])
            if (s := _mem_sample(c)) is not None:
                c_mem.add_metric(labels, s[0], timestamp=s[1])
        if (s := _cpu_sample(pod)) is not None:
            p_cpu.add_metric(pod_labels, s[0], timestamp=s[1])
        if (s := _mem_sample(pod)) is not None:
            p_mem.add_metric(pod_labels, s[0], timestamp=s[1])
    help_error = "1 if there was an error while getting container metrics, 0 otherwise"
    errors = [GaugeMetricFamily(name, help_error, value=1.0 if scrape_error else 0.0)
              for name in ("scrape_error", "resource_scrape_error")]  # fmt: skip
    return render([node_cpu, node_mem, c_start, c_cpu, c_mem, p_cpu, p_mem, *errors])


def kubelet_gauges(node_name: str, pods: Iterable[Obj]) -> list[Metric]:
    """The kubelet's own gauges that mean something on a virtual node, from the pods bound to it.

    ``pods`` are ``stats.summary_ref``s: their status is the remote pod's, reflected back, so a pod held
    back (never sent to the pool) is not running and a pod running on the pool is.
    """
    name = GaugeMetricFamily("kubelet_node_name", "The node's name. The count is always 1.", labels=["node"])
    name.add_metric([node_name], 1.0)
    running_pods = desired = 0
    states = {"running": 0, "exited": 0}
    for pod in pods:
        status = pod.get("status") or {}
        phase = status.get("phase")
        if phase not in ("Succeeded", "Failed"):
            desired += 1
        for cs in status.get("containerStatuses") or []:
            state = cs.get("state") or {}
            if "running" in state:
                states["running"] += 1
            elif "terminated" in state:
                states["exited"] += 1
        if is_running(pod):
            running_pods += 1
    pods_g = GaugeMetricFamily(
        "kubelet_running_pods", "Number of pods that have a running pod sandbox", value=float(running_pods)
    )
    containers = GaugeMetricFamily(
        "kubelet_running_containers", "Number of containers currently running", labels=["container_state"]
    )
    for state, count in states.items():
        containers.add_metric([state], float(count))
    desired_g = GaugeMetricFamily(
        "kubelet_desired_pods",
        "The number of pods the kubelet is being instructed to run. static is true if the pod is not from "
        "the apiserver.",
        labels=["static"],
    )
    desired_g.add_metric(["false"], float(desired))
    return [name, pods_g, containers, desired_g]
