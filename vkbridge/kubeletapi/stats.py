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

from vkbridge.kube.cache import Cache, EventType, object_key
from vkbridge.kube.client import ApiError, KubeClient
from vkbridge.logs import get_logger
from vkbridge.quantity import QuantityError, parse_quantity

__all__ = ["PodRefs", "StatsProvider", "build_summary", "summary_ref"]

log = get_logger("vkbridge.kubeletapi.stats")

METRICS_PREFIX: Final = "/apis/metrics.k8s.io/v1beta1"
UNAVAILABLE_TTL: Final = 60.0
FETCH_TIMEOUT: Final = 10.0
_CONCURRENCY: Final = 8
_TOLD_MAX: Final = 1024  # bad figures remembered as already logged (then forgotten, and logged again)

Obj = dict[str, Any]


def _rfc3339(t: dt.datetime) -> str:
    return t.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


BadFigure = Callable[[str, str, str], None]  # (pod "ns/name", container, what was wrong)


def _figure(
    usage: Mapping[str, Any], resource: str, scale: int, where: tuple[str, str], bad: BadFigure
) -> int | None:
    if resource not in usage:
        return None
    try:
        return int(parse_quantity(str(usage[resource])) * Fraction(scale))
    except QuantityError as exc:
        bad(*where, f"{resource}: {exc}")
        return None


def _usage(usage: Mapping[str, Any], where: tuple[str, str], bad: BadFigure) -> tuple[int | None, int | None]:
    """(nanocores, bytes) from a PodMetrics usage map; None where missing or unparsable (told to ``bad``)."""
    return _figure(usage, "cpu", 10**9, where, bad), _figure(usage, "memory", 1, where, bad)


def _ignore(_pod: str, _container: str, _what: str) -> None:
    return None


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
    bad_figure: BadFigure = _ignore,
) -> Obj:
    """Pure: a Summary with one entry per pod; usage only for pods that have PodMetrics.

    A figure that does not parse is left out (the rest of the Summary stands) and told to ``bad_figure``.
    """
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
                cname = str(c.get("name", ""))
                cpu, mem = _usage(c.get("usage") or {}, (f"{ns}/{name}", cname), bad_figure)
                entry["containers"].append({"name": cname, **_cpu_mem(when, cpu, mem)})
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


def summary_ref(pod: Obj) -> Obj:
    """The little of a pod that a Summary reads (``build_summary`` takes these as pods)."""
    meta = pod.get("metadata") or {}
    kept = {k: meta[k] for k in ("namespace", "name", "uid", "creationTimestamp") if k in meta}
    start = (pod.get("status") or {}).get("startTime")
    return {"metadata": kept, "status": {"startTime": start} if start else {}}


class PodRefs:
    """``summary_ref`` of every pod of a cache, kept from its change feed.

    The pod cache is compact (JSON bytes): listing it decodes every pod on the event loop, ~0.9 s
    per 10,000 pods, on each scrape. Subscribers get the decoded objects anyway, so this costs nothing
    per change and a scrape reads a few small dicts per pod.
    """

    def __init__(self, pods: Cache) -> None:
        self._refs: dict[str, Obj] = {}
        self._unsubscribe = pods.subscribe(self._on_change)
        for pod in pods.list():  # once; usually empty (the server is built before the caches sync)
            self._refs[object_key(pod)] = summary_ref(pod)

    def _on_change(self, _type: EventType, old: Obj | None, new: Obj | None) -> None:
        if new is not None:
            self._refs[object_key(new)] = summary_ref(new)
        elif old is not None:
            self._refs.pop(object_key(old), None)

    def entries(self) -> list[Obj]:
        return [*self._refs.values()]

    def close(self) -> None:
        self._unsubscribe()


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
        self._told: set[tuple[str, str, str]] = set()

    async def summary(self) -> Obj:
        pods = self._local_pods()
        metrics = await self._pod_metrics({str((p.get("metadata") or {}).get("namespace", "")) for p in pods})
        now = dt.datetime.now(dt.UTC)
        return build_summary(self._node_name, self._start, pods, metrics, now, self._bad_figure)

    def _bad_figure(self, pod: str, container: str, what: str) -> None:
        """Logged once per pod, container and resource: a scrape every 15 s must not flood the log."""
        key = (pod, container, what.partition(":")[0])
        if key in self._told:
            return
        if len(self._told) >= _TOLD_MAX:
            self._told.clear()
        self._told.add(key)
        log.warning("pool metrics: unusable figure left out of the stats summary",
                    pod=pod, container=container, error=what[:200])  # fmt: skip

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
