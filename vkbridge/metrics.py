"""Prometheus metrics, on an explicit registry so tests and several instances never collide.

Liqo's two counters keep their names and labels (dashboards built for Liqo keep working); the rest
are ours and carry the `vkbridge_` prefix, except what every Prometheus client library exports
(`process_*`, `python_info`, `python_gc_*`), which an explicit registry only has when asked.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import platform
from importlib.metadata import PackageNotFoundError, version

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
)
from prometheus_client.core import GaugeMetricFamily

_LIQO_LABELS = ("namespace", "reflector_resource", "cluster_id", "node_name")
_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
#: Set by the image (Dockerfile ARG REVISION): the commit the running build came from.
REVISION_ENV = "VKBRIDGE_REVISION"


def seconds_until(not_after: dt.datetime | None, now: dt.datetime | None = None) -> float:
    """Seconds from ``now`` to an aware ``not_after`` (negative once past); NaN without a certificate."""
    if not_after is None:
        return math.nan
    return (not_after - (now or dt.datetime.now(dt.UTC))).total_seconds()


def _version() -> str:
    try:
        return version("vkbridge")
    except PackageNotFoundError:
        from vkbridge import __version__

        return __version__


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
        self.build_info.labels(
            _version(), os.environ.get(REVISION_ENV) or "unknown", platform.python_version()
        ).set(1)
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
        self.queue_depth = Gauge(
            "vkbridge_workqueue_depth", "Keys waiting in a work queue.", ["queue"], registry=r
        )
        self.queue_retries = Counter(
            "vkbridge_workqueue_retries_total", "Keys re-queued after a failure.", ["queue"], registry=r
        )
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
        # Read at scrape time from the engine's wait list (`set_function`): a pod leaves it when admitted,
        # deleted, finished or its namespace is no longer paired.
        self.pods_waiting_for_grant = Gauge(
            "vkbridge_pods_waiting_for_grant",
            "Pods not sent (yet) because they do not fit the grant.",
            registry=r,
        )
        self.reflected_pods = Gauge(
            "vkbridge_reflected_pods", "Pods with a ShadowPod on the pool.", registry=r
        )
        self.api_requests = Counter(
            "vkbridge_api_requests_total",
            "API requests sent, by cluster and verb.",
            ["cluster", "verb"],
            registry=r,
        )


class CallbackGauge:
    """A gauge read from a callback at scrape time (queue depths and cache sizes need no bookkeeping)."""

    def __init__(self, registry: CollectorRegistry, name: str, doc: str, read: dict[str, object]) -> None:
        self._name, self._doc, self._read = name, doc, read
        registry.register(self)

    def collect(self) -> list[GaugeMetricFamily]:
        family = GaugeMetricFamily(self._name, self._doc, labels=["source"])
        for label, fn in self._read.items():
            if callable(fn):
                family.add_metric([label], float(fn()))
        return [family]
