"""``/stats/summary``: a kubelet Summary (stats/v1alpha1) for the pods on our node.

Usage numbers come from the pool's ``metrics.k8s.io/v1beta1`` PodMetrics in each remote namespace,
as Liqo does; without a metrics API the Summary is still well-formed, just without usage (and the
pool is asked again only after a minute, not on every scrape).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Iterable, Mapping
from fractions import Fraction
from typing import Any, Final

from vkbridge.kube.client import ApiError, KubeClient
from vkbridge.logs import get_logger
from vkbridge.quantity import QuantityError, parse_quantity

__all__ = ["StatsProvider", "build_summary"]

log = get_logger("vkbridge.kubeletapi.stats")

METRICS_PREFIX: Final = "/apis/metrics.k8s.io/v1beta1"
UNAVAILABLE_TTL: Final = 60.0
FETCH_TIMEOUT: Final = 10.0
_CONCURRENCY: Final = 8

Obj = dict[str, Any]


def _rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _usage(usage: Mapping[str, Any]) -> tuple[int | None, int | None]:
    """(nanocores, bytes) from a PodMetrics usage map; None where missing or unparsable."""
    cpu = mem = None
    try:
        if "cpu" in usage:
            cpu = int(parse_quantity(str(usage["cpu"])) * Fraction(10**9))
        if "memory" in usage:
            mem = int(parse_quantity(str(usage["memory"])))
    except QuantityError:
        return None, None
    return cpu, mem


def _cpu_mem(when: str, cpu: int | None, mem: int | None) -> Obj:
    out: Obj = {}
    if cpu is not None:
        out["cpu"] = {"time": when, "usageNanoCores": cpu}
    if mem is not None:
        out["memory"] = {"time": when, "usageBytes": mem, "workingSetBytes": mem}
    return out


def build_summary(
    node_name: str,
    start_time: dt.datetime,
    pods: Iterable[Obj],
    metrics: Mapping[tuple[str, str], Obj],
    now: dt.datetime,
) -> Obj:
    """Pure: a Summary with one entry per pod; usage only for pods that have PodMetrics."""
    node: Obj = {"nodeName": node_name, "startTime": _rfc3339(start_time)}
    out_pods: list[Obj] = []
    node_cpu = node_mem = 0
    have_usage = False
    for pod in pods:
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        entry: Obj = {"podRef": {"name": name, "namespace": ns, "uid": str(meta.get("uid", ""))}}
        started = (pod.get("status") or {}).get("startTime") or meta.get("creationTimestamp")
        if started:
            entry["startTime"] = started
        entry["containers"] = []
        pm = metrics.get((ns, name))
        if pm is not None:
            when = str(pm.get("timestamp") or _rfc3339(now))
            pod_cpu = pod_mem = 0
            for c in pm.get("containers") or []:
                cpu, mem = _usage(c.get("usage") or {})
                entry["containers"].append({"name": str(c.get("name", "")), **_cpu_mem(when, cpu, mem)})
                pod_cpu += cpu or 0
                pod_mem += mem or 0
            entry.update(_cpu_mem(when, pod_cpu, pod_mem))
            node_cpu += pod_cpu
            node_mem += pod_mem
            have_usage = True
        out_pods.append(entry)
    if have_usage:
        node.update(_cpu_mem(_rfc3339(now), node_cpu, node_mem))
    return {"node": node, "pods": out_pods}


class StatsProvider:
    def __init__(
        self,
        pool: KubeClient,
        node_name: str,
        remote_namespace: Callable[[str], str | None],
        local_pods: Callable[[], list[Obj]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pool = pool
        self._node_name = node_name
        self._remote_namespace = remote_namespace
        self._local_pods = local_pods
        self._clock = clock
        self._start = dt.datetime.now(dt.UTC)
        self._unavailable_until = 0.0

    async def summary(self) -> Obj:
        pods = self._local_pods()
        metrics = await self._pod_metrics({str((p.get("metadata") or {}).get("namespace", "")) for p in pods})
        return build_summary(self._node_name, self._start, pods, metrics, dt.datetime.now(dt.UTC))

    async def _pod_metrics(self, namespaces: set[str]) -> dict[tuple[str, str], Obj]:
        if self._clock() < self._unavailable_until:
            return {}
        pairs = [(ns, r) for ns in sorted(namespaces) if (r := self._remote_namespace(ns)) is not None]
        sem = asyncio.Semaphore(_CONCURRENCY)

        async def one(local: str, remote: str) -> list[tuple[tuple[str, str], Obj]]:
            async with sem:
                body = await self._pool.request(
                    "GET", f"{METRICS_PREFIX}/namespaces/{remote}/pods", timeout=FETCH_TIMEOUT
                )
            items = [i for i in body.get("items") or [] if isinstance(i, dict)]
            return [((local, str((i.get("metadata") or {}).get("name", ""))), i) for i in items]

        results = await asyncio.gather(*(one(ns, r) for ns, r in pairs), return_exceptions=True)
        out: dict[tuple[str, str], Obj] = {}
        for res in results:
            if isinstance(res, ApiError):
                if res.status in (403, 404, 503):  # no (usable) metrics API on the pool
                    self._unavailable_until = self._clock() + UNAVAILABLE_TTL
                    log.info("pool metrics API unavailable; stats without usage", status=res.status)
                    return {}
                log.warning("cannot read pod metrics from the pool", error=str(res))
            elif isinstance(res, BaseException):
                raise res
            else:
                out.update(res)
        return out
