"""Prometheus metrics, on an explicit registry so tests and several instances never collide.

Liqo's two counters keep their names and labels (dashboards built for Liqo keep working); the rest
are ours and carry the `vkbridge_` prefix, except what every Prometheus client library exports
(`process_*`, `python_info`, `python_gc_*`), which an explicit registry only has when asked.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)

from vkbridge.buildinfo import build_info
from vkbridge.kube.queuemetrics import QueueMetrics, QueueSinks

_LIQO_LABELS = ("namespace", "reflector_resource", "cluster_id", "node_name")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: The kubelet's pod-startup buckets (``podStartupDurationBuckets`` in pkg/kubelet/metrics/metrics.go, used
#: by ``kubelet_pod_start_sli_duration_seconds``): round numbers, so an SLO threshold is a bucket edge.
POD_START_SLI_BUCKETS = (
    0.5, 1, 2, 3, 4, 5, 6, 8, 10, 20, 30, 45, 60, 120, 180, 240, 300, 360, 480, 600, 900, 1200, 1800, 2700,
    3600,
)  # fmt: skip
#: Time in a queue is part of a pod's start: every SLI edge, plus sub-second edges for the usual case.
QUEUE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, *POD_START_SLI_BUCKETS)
#: One handle is a few API calls, each bounded by the client timeout (60 s): finer, and no hours.
WORK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Set by the image (Dockerfile ARG REVISION): the commit the running build came from.


def seconds_until(not_after: dt.datetime | None, now: dt.datetime | None = None) -> float:
    """Seconds from ``now`` to an aware ``not_after`` (negative once past); NaN without a certificate."""
    if not_after is None:
        return math.nan
    return (not_after - (now or dt.datetime.now(dt.UTC))).total_seconds()


def node_ready(node: Mapping[str, Any] | None) -> float:
    """1 when the Node's Ready condition is True as the API server has it (our cache of it), else 0:
    also 0 while the node lifecycle controller says Unknown, or when there is no Node."""
    conditions = ((node or {}).get("status") or {}).get("conditions") or ()
    ready = (
        isinstance(c, Mapping) and c.get("type") == "Ready" and c.get("status") == "True" for c in conditions
    )
    return float(any(ready))


# client-go's request-latency buckets (k8s.io/client-go/tools/metrics, as kube components export them).
CLIENT_BUCKETS: tuple[float, ...] = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0)
KUBELET_API_PATHS: frozenset[str] = frozenset(
    {"containerLogs", "exec", "attach", "portForward", "pods", "runningpods", "stats", "metrics", "healthz"}
)


def kubelet_api_path(path: str) -> str:
    """The bounded ``path`` label of a kubelet API request: its first segment, or ``other``."""
    first = path.lstrip("/").split("/", 1)[0].split("?", 1)[0]
    return first if first in KUBELET_API_PATHS else "other"


class Metrics:
    """Every metric vkbridge exports, bound to one registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        # The standard process and runtime metrics (resident memory, CPU seconds, open fds, start time,
        # Python version, GC): the global registry has them by default, ours only when registered.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.build_info = Gauge(
            "vkbridge_build_info",
            "Always 1; the labels say which build is running.",
            ["version", "revision", "python_version"],
            registry=r,
        )
        info = build_info()
        self.build_info.labels(info.version, info.revision, info.python).set(1)
        # Liqo's Go client exposes these two without a `_total` suffix; prometheus_client would add one
        # to a Counter, so they are gauges that only ever go up: dashboards built for Liqo keep working.
        self.reflection_items = Gauge(
            "liqo_virtual_kubelet_reflection_item_counter",
            "Items reflected successfully (one per successful handle).",
            _LIQO_LABELS,
            registry=r,
        )
        self.reflection_errors = Gauge(
            "liqo_virtual_kubelet_reflection_error_counter",
            "Reflection handles that failed and were retried.",
            _LIQO_LABELS,
            registry=r,
        )
        self._queue_metrics(r)
        self.reflection_latency = Histogram(
            "vkbridge_reflection_latency_seconds",
            "Latency vkbridge adds: 'outbound' = pod bound -> ShadowPod created; "
            "'inbound' = remote pod Running -> local pod Running.",
            ["direction"],
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.pool_state = Gauge(
            "vkbridge_pool_reachable",
            "1 for the current pool reachability state (Connected, Lost, Unauthorized), 0 for the others.",
            ["state"],
            registry=r,
        )
        self.pool_outage_seconds = Counter(
            "vkbridge_pool_outage_seconds_total", "Time the pool was not reachable.", registry=r
        )
        self.cert_expiry_seconds = Gauge(
            "vkbridge_client_certificate_expiry_seconds",
            "Seconds until the pool client certificate expires.",
            registry=r,
        )
        # Read at scrape time from the serving-certificate manager (app wires it with `seconds_until`):
        # NaN until a certificate is loaded.
        self.serving_cert_expiry_seconds = Gauge(
            "vkbridge_serving_certificate_expiry_seconds",
            "Seconds until the kubelet serving certificate (--listen-port) expires; negative once expired.",
            registry=r,
        )
        self.serving_cert_expiry_seconds.set(math.nan)
        self.cert_renewal_failures = Counter(
            "vkbridge_certificate_renewal_failures_total",
            "Renew requests the pool did not answer in time.",
            registry=r,
        )
        self.grant = Gauge(
            "vkbridge_grant_resources", "Resources granted by the ResourceSlice.", ["resource"], registry=r
        )
        self.grant_used = Gauge(
            "vkbridge_grant_used_resources",
            "Resources used by admitted, non-terminal pods.",
            ["resource"],
            registry=r,
        )
        self._granted_shown: set[str] = set()  # the resources of the two gauges above (show_grant)
        self._used_shown: set[str] = set()
        # Read at scrape time from the engine's wait list (`set_function`): a pod leaves it when admitted,
        # deleted, finished or its namespace is no longer paired.
        self.pods_waiting_for_grant = Gauge(
            "vkbridge_pods_waiting_for_grant",
            "Pods not sent (yet) because they do not fit the grant.",
            registry=r,
        )
        # Read at scrape time from the consumer's Node cache (app wires it with `node_ready`).
        self.node_ready = Gauge(
            "vkbridge_node_ready", "1 while the virtual Node's Ready condition is True, else 0.", registry=r
        )
        self.reflected_pods = Gauge(
            "vkbridge_reflected_pods", "Pods with a ShadowPod on the pool.", registry=r
        )
        self.api_requests = Counter(
            "vkbridge_api_requests_total",
            "API requests by client (consumer, pool), verb, resource[/subresource] and HTTP status "
            "('error': no HTTP answer). A watch counts once, when opened.",
            ["server", "verb", "resource", "code"],
            registry=r,
        )
        self.api_request_duration = Histogram(
            "vkbridge_api_request_duration_seconds",
            "API request duration by client and verb, until the body is read (a watch or a stream: until "
            "its headers); client-go's rest_client_request_duration_seconds.",
            ["server", "verb"],
            buckets=CLIENT_BUCKETS,
            registry=r,
        )
        self.api_throttle_wait = Histogram(
            "vkbridge_api_rate_limiter_wait_seconds",
            "Time a request waited for the client-side rate limiter (--client-qps, --client-max-burst); "
            "client-go's rest_client_rate_limiter_duration_seconds.",
            ["server"],
            buckets=CLIENT_BUCKETS,
            registry=r,
        )
        self.leader = Gauge(
            "vkbridge_leader",
            "1 while this replica holds the leader Lease (always, with --vk-lease-enabled=false), else 0.",
            registry=r,
        )
        self.kubelet_api_requests = Counter(
            "vkbridge_kubelet_api_requests_total",
            "Requests to the kubelet API (--listen-port) by path (its first segment: containerLogs, exec, "
            "attach, portForward, pods, runningpods, stats, metrics, healthz; 'other') and HTTP status.",
            ["path", "code"],
            registry=r,
        )

    def _queue_metrics(self, r: CollectorRegistry) -> None:
        """client-go's workqueue metrics (label ``name``: pods, configuration, events)."""
        name = ["name"]
        self.queue_depth = Gauge(
            "vkbridge_workqueue_depth", "Keys added and not yet taken by a worker.", name, registry=r
        )
        self.queue_adds = Counter(
            "vkbridge_workqueue_adds_total", "Keys added (not counting duplicates).", name, registry=r
        )
        self.queue_retries = Counter(
            "vkbridge_workqueue_retries_total",
            "Keys re-queued rate-limited after a failure.",
            name,
            registry=r,
        )
        self.queue_duration = Histogram(
            "vkbridge_workqueue_queue_duration_seconds",
            "Time a key waited in the queue before a worker took it.",
            name,
            buckets=QUEUE_BUCKETS,
            registry=r,
        )
        self.work_duration = Histogram(
            "vkbridge_workqueue_work_duration_seconds",
            "Time a worker took to handle a key.",
            name,
            buckets=WORK_BUCKETS,
            registry=r,
        )
        self.queue_unfinished = Gauge(
            "vkbridge_workqueue_unfinished_work_seconds",
            "Seconds of work in progress (summed over the keys being handled); read at scrape time.",
            name,
            registry=r,
        )
        self.queue_longest = Gauge(
            "vkbridge_workqueue_longest_running_processor_seconds",
            "How long the longest-running handle has been running; read at scrape time.",
            name,
            registry=r,
        )

    def show_grant(self, granted: Mapping[str, Any], used: Mapping[str, Any]) -> None:
        """``vkbridge_grant_resources`` for exactly the resources granted, ``_used_`` for those granted
        or in use: a resource the grant no longer lists has no sample (a withdrawn GPU grant read 2)."""
        in_use = {**dict.fromkeys(granted, 0), **used}
        for gauge, values, shown in (
            (self.grant, granted, self._granted_shown),
            (self.grant_used, in_use, self._used_shown),
        ):
            for resource in shown - values.keys():
                gauge.remove(resource)
            shown.clear()
            for resource, value in values.items():
                gauge.labels(resource=resource).set(float(value))
                shown.add(resource)

    def workqueue(self, name: str) -> QueueMetrics:
        """The metrics for a ``WorkQueue(name, metrics=...)``."""
        sinks = QueueSinks(
            depth=self.queue_depth.labels(name),
            adds=self.queue_adds.labels(name),
            queue_duration=self.queue_duration.labels(name),
            work_duration=self.work_duration.labels(name),
            retries=self.queue_retries.labels(name),
        )
        qm = QueueMetrics(sinks)
        self.queue_unfinished.labels(name).set_function(qm.unfinished_work_seconds)
        self.queue_longest.labels(name).set_function(qm.longest_running_processor_seconds)
        return qm
