"""``/stats/summary``: a kubelet Summary (stats/v1alpha1) for the pods on our node.

Usage numbers come from the pool's ``metrics.k8s.io/v1beta1`` PodMetrics in each remote namespace,
as Liqo does. Whether the pool serves that API is asked once (discovery) and remembered; a pool
without it is asked again with a capped backoff, and said so once in the log. Without usage the
Summary is still well-formed: pods, containers and their start times (from the reflected status).

PodMetrics CPU is a rate (usage over a window); ``/metrics/resource`` needs the kubelet's cumulative
``usageCoreNanoSeconds``. ``CpuCounters`` integrates the rate over the PodMetrics timestamps, so the
rate metrics-server derives from two of our samples is the pool's own latest rate
(docs/architecture.md, "Resource metrics").
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final

import orjson

from reflectors.forge.timefmt import rfc3339
from vkbridge.kube.cache import Cache, EventType, object_key
from vkbridge.kube.client import ApiError, KubeClient, is_transport_failure
from vkbridge.kube.packing import json_bytes
from vkbridge.logs import get_logger
from vkbridge.quantity import QuantityError, parse_quantity

__all__ = [
    "CpuCounters",
    "PodRefs",
    "StatsProvider",
    "build_summary",
    "go_duration",
    "is_running",
    "summary_ref",
]

log = get_logger("vkbridge.kubeletapi.stats")

METRICS_PREFIX: Final = "/apis/metrics.k8s.io/v1beta1"
UNAVAILABLE_TTL: Final = 60.0  # first re-check of a pool without a metrics API; doubles up to the cap
UNAVAILABLE_TTL_MAX: Final = 600.0
FETCH_TIMEOUT: Final = 10.0
_CONCURRENCY: Final = 8
_TOLD_MAX: Final = 1024  # bad figures remembered as already logged (then forgotten, and logged again)

Obj = dict[str, Any]


BadFigure = Callable[[str, str, str], None]  # (pod "ns/name", container, what was wrong)


def _figure(
    usage: Mapping[str, Any], resource: str, scale: int, where: tuple[str, str], bad: BadFigure
) -> int | None:
    if resource not in usage:
        return None
    try:
        value = int(parse_quantity(str(usage[resource])) * Fraction(scale))
    except QuantityError as exc:
        bad(*where, f"{resource}: {exc}")
        return None
    if value < 0:  # usage is never negative: a cumulative counter fed one would go backwards
        bad(*where, f"{resource}: negative usage {str(usage[resource])[:40]!r}")
        return None
    return value


def _usage(usage: Mapping[str, Any], where: tuple[str, str], bad: BadFigure) -> tuple[int | None, int | None]:
    """(nanocores, bytes) from a PodMetrics usage map; None where missing or unparsable (told to ``bad``)."""
    return _figure(usage, "cpu", 10**9, where, bad), _figure(usage, "memory", 1, where, bad)


def _ignore(_pod: str, _container: str, _what: str) -> None:
    return None


def _cpu_mem(when: str, cpu: int | None, mem: int | None, cumulative: int | None = None) -> Obj:
    out: Obj = {}
    if cpu is not None:
        out["cpu"] = {"time": when, "usageNanoCores": cpu}
        if cumulative is not None:
            out["cpu"]["usageCoreNanoSeconds"] = cumulative
    if mem is not None:
        out["memory"] = {"time": when, "usageBytes": mem, "workingSetBytes": mem}
    return out


_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_UNIT_SECONDS: Final = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}
_MAX_DURATION_S: Final = (2**63 - 1) / 1e9  # Go's Duration is int64 nanoseconds (~292 years)


def go_duration(text: str) -> float | None:
    """Seconds in a Go ``time.Duration`` string ("30s", "1m0.5s", "250ms"); None if it is not one.

    Beyond int64 nanoseconds is not one either (Go's ParseDuration refuses it): a 400-digit figure
    would be infinite here, and infinity times a rate has no integer value.
    """
    pos, total = 0, 0.0
    for m in _DURATION.finditer(text):
        if m.start() != pos:
            return None
        total += float(m.group(1)) * _UNIT_SECONDS[m.group(2)]
        pos = m.end()
    return total if pos == len(text) and text and total <= _MAX_DURATION_S else None


def _epoch(text: str) -> float | None:
    try:
        return dt.datetime.fromisoformat(text).timestamp()
    except (ValueError, OverflowError):
        return None


def _window(pm: Obj, pod: str, bad: BadFigure) -> float:
    """A PodMetrics window in seconds; 0 (a first sample counts no CPU time) if missing or unusable."""
    raw = pm.get("window")
    if not raw:
        return 0.0
    seconds = go_duration(str(raw))
    if seconds is None:
        bad(pod, "", f"window: not a Go duration: {str(raw)[:40]!r}")
        return 0.0
    return seconds


def _containers(pm: Obj, pod: str, bad: BadFigure) -> list[tuple[str, Mapping[str, Any]]]:
    """(name, usage map) of each container entry of a PodMetrics; malformed entries are left out (told
    to ``bad``), so one pod's broken answer never costs the others their stats."""
    entries = pm.get("containers") or []
    if not isinstance(entries, list):
        bad(pod, "", f"containers: not a list but {type(entries).__name__}")
        return []
    out: list[tuple[str, Mapping[str, Any]]] = []
    for c in entries:
        if not isinstance(c, dict):
            bad(pod, "", f"container entry: not an object but {type(c).__name__}")
            continue
        name = str(c.get("name", ""))
        usage = c.get("usage") or {}
        if not isinstance(usage, dict):
            bad(pod, name, f"usage: not an object but {type(usage).__name__}")
            usage = {}
        out.append((name, usage))
    return out


ContainerKey = tuple[str, str, str]  # (namespace, pod, container), local names


@dataclass
class _Counter:
    started: str  # the container's start time: a new one (restart) starts a new counter
    at: float  # epoch seconds of the last PodMetrics sample integrated
    total: int  # core-nanoseconds


class CpuCounters:
    """Cumulative CPU (core-nanoseconds) per container and for the node, from PodMetrics rates.

    Pure bookkeeping, no I/O. A container's first sample counts its rate over the sample's window
    (what the pool measured); each later sample with a newer timestamp adds rate x time since the
    previous one. A sample with the same timestamp adds nothing, so repeated scrapes are stable, and
    metrics-server's delta over delta-time between two of our samples is the pool's latest rate.
    The node total only ever grows: a pod that goes away keeps its share in it, as on a kubelet.
    """

    def __init__(self) -> None:
        self._counters: dict[ContainerKey, _Counter] = {}
        self.node_total = 0

    def observe(self, key: ContainerKey, started: str, at: float, window: float, nanocores: int) -> int:
        c = self._counters.get(key)
        if c is None or c.started != started:
            c = self._counters[key] = _Counter(started, at, int(nanocores * window))
            self.node_total += c.total
        elif at > c.at:
            grown = int(nanocores * (at - c.at))
            c.total += grown
            c.at = at
            self.node_total += grown
        return c.total

    def retain(self, pods: set[tuple[str, str]]) -> None:
        """Forget the containers of pods no longer on the node (bounded by the pods on the node).

        A pod whose PodMetrics miss one scrape keeps its counters: starting them again would be a
        counter reset without a restart, which metrics-server reads as a decrease and skips.
        """
        for key in [k for k in self._counters if k[:2] not in pods]:
            del self._counters[key]


def _started(pod: Obj) -> dict[str, str]:
    """Container name -> startedAt of each running container (the reflected status of the remote pod)."""
    out: dict[str, str] = {}
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        running = (cs.get("state") or {}).get("running") or {}
        if cs.get("name") and running.get("startedAt"):
            out[str(cs["name"])] = str(running["startedAt"])
    return out


def build_summary(
    node_name: str,
    start_time: dt.datetime,
    pods: Iterable[Obj],
    metrics: Mapping[tuple[str, str], Obj],
    now: dt.datetime,
    bad_figure: BadFigure = _ignore,
    counters: CpuCounters | None = None,
) -> Obj:
    """Pure: a Summary with one entry per pod; usage only for pods that have PodMetrics.

    Containers are the running ones (with ``startTime``) and those with PodMetrics. A figure that
    does not parse, or an entry of the wrong shape, is left out (the rest of the Summary stands) and
    told to ``bad_figure``. With ``counters``, CPU also carries the cumulative ``usageCoreNanoSeconds``
    (``CpuCounters``).
    """
    node: Obj = {"nodeName": node_name, "startTime": rfc3339(start_time)}
    out_pods: list[Obj] = []
    node_cpu = node_mem = 0
    have_usage = False
    present: set[tuple[str, str]] = set()
    for pod in pods:
        meta = pod.get("metadata") or {}
        ns, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        present.add((ns, name))
        entry: Obj = {"podRef": {"name": name, "namespace": ns, "uid": str(meta.get("uid", ""))}}
        started = (pod.get("status") or {}).get("startTime") or meta.get("creationTimestamp")
        if started:
            entry["startTime"] = started
        container_start = _started(pod)
        containers: dict[str, Obj] = {c: {"name": c, "startTime": t} for c, t in container_start.items()}
        pm = metrics.get((ns, name))
        if pm is not None:
            where = f"{ns}/{name}"
            when = str(pm.get("timestamp") or rfc3339(now))
            at, window = _epoch(when), _window(pm, where, bad_figure)
            pod_cpu = pod_mem = pod_cum = 0
            for cname, usage in _containers(pm, where, bad_figure):
                cpu, mem = _usage(usage, (where, cname), bad_figure)
                cum = None
                if counters is not None and cpu is not None and at is not None:
                    cum = counters.observe((ns, name, cname), container_start.get(cname, ""), at, window, cpu)
                    pod_cum += cum
                containers.setdefault(cname, {"name": cname}).update(_cpu_mem(when, cpu, mem, cum))
                pod_cpu += cpu or 0
                pod_mem += mem or 0
            entry.update(_cpu_mem(when, pod_cpu, pod_mem, pod_cum if counters is not None else None))
            node_cpu += pod_cpu
            node_mem += pod_mem
            have_usage = True
        entry["containers"] = list(containers.values())
        out_pods.append(entry)
    if counters is not None:
        counters.retain(present)
    if have_usage:
        node.update(
            _cpu_mem(rfc3339(now), node_cpu, node_mem, None if counters is None else counters.node_total)
        )
    return {"node": node, "pods": out_pods}


def is_running(pod: Obj) -> bool:
    """The pod runs on the pool: its reflected phase is Running, or a container of it runs.

    A pod held back (missing references, no grant) was never sent and stays Pending here.
    """
    status = pod.get("status") or {}
    if status.get("phase") == "Running":
        return True
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    return any("running" in (cs.get("state") or {}) for cs in status.get("containerStatuses") or [])


def summary_ref(pod: Obj) -> Obj:
    """The little of a pod that a Summary and the kubelet gauges read (``build_summary`` takes these)."""
    meta = pod.get("metadata") or {}
    kept = {k: meta[k] for k in ("namespace", "name", "uid", "creationTimestamp") if k in meta}
    status = pod.get("status") or {}
    out: Obj = {}
    if start := status.get("startTime"):
        out["startTime"] = start
    if phase := status.get("phase"):
        out["phase"] = phase
    statuses = []
    for cs in status.get("containerStatuses") or []:
        state = cs.get("state") or {}
        running = state.get("running")
        if running is not None:
            statuses.append(
                {"name": cs.get("name"), "state": {"running": {"startedAt": running.get("startedAt")}}}
            )
        else:
            statuses.append({"name": cs.get("name"), "state": {k: {} for k in state}})
    if statuses:
        out["containerStatuses"] = statuses
    return {"metadata": kept, "status": out}


class PodRefs:
    """``summary_ref`` of every pod of a cache, kept from its change feed.

    The pod cache is compact (JSON bytes): listing it decodes every pod on the event loop, ~0.9 s
    per 10,000 pods, on each scrape. Subscribers get the decoded objects anyway, so this costs nothing
    per change. Each ref is kept as its JSON (~350 bytes; as dicts with the strings they held, ~1.3 KB):
    a scrape decodes one small object per pod (~2 us each).
    """

    def __init__(self, pods: Cache) -> None:
        self._refs: dict[str, bytes] = {}
        self._running: set[str] = set()
        self._unsubscribe = pods.subscribe(self._on_change)
        for pod in pods.list():  # once; usually empty (the server is built before the caches sync)
            self._keep(object_key(pod), pod)

    def _keep(self, key: str, pod: Obj) -> None:
        ref = summary_ref(pod)
        self._refs[key] = json_bytes(ref)
        if is_running(ref):
            self._running.add(key)
        else:
            self._running.discard(key)

    def _on_change(self, _type: EventType, old: Mapping[str, Any] | None, new: Obj | None) -> None:
        if new is not None:
            self._keep(object_key(new), new)
        elif old is not None:
            key = object_key(old)
            self._refs.pop(key, None)
            self._running.discard(key)

    def entries(self) -> list[Obj]:
        return [orjson.loads(ref) for ref in self._refs.values()]

    def running_keys(self) -> list[str]:
        """Keys of the pods that run on the pool (``is_running``): what a kubelet's runtime would list."""
        return [key for key in self._refs if key in self._running]

    def close(self) -> None:
        self._unsubscribe()


def _retrieved(task: asyncio.Task[Any]) -> None:
    """A shared read whose scrapes all gave up: its outcome is nobody's, so asyncio must not warn."""
    if not task.cancelled():
        task.exception()


@dataclass(frozen=True)
class Collected:
    """One Summary and whether reading the pool's usage failed (``scrape_error`` of /metrics/resource)."""

    summary: Obj
    error: bool


class StatsProvider:
    """The Summary of our node's pods, usage from the pool's metrics API when it serves one."""

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
        self._api: bool | None = None  # does the pool serve metrics.k8s.io? None: not asked yet
        self._recheck_at = 0.0
        self._backoff = UNAVAILABLE_TTL
        self._told: set[tuple[str, str, str]] = set()
        self.counters = CpuCounters()
        self._reading: asyncio.Task[tuple[dict[tuple[str, str], Obj], bool]] | None = None

    async def summary(self) -> Obj:
        return (await self.collect()).summary

    async def collect(self) -> Collected:
        """One Summary. Scrapes that arrive while the pool's usage is being read share that read, so
        none queues behind another's slow pool answer (each waits for one read at most); the counters
        integrate in ``build_summary``, which does not await: one sample at a time without a lock."""
        pods = self._local_pods()
        if self._reading is None or self._reading.done():
            namespaces = {str((p.get("metadata") or {}).get("namespace", "")) for p in pods}
            self._reading = asyncio.get_running_loop().create_task(self._read_usage(namespaces))
            self._reading.add_done_callback(_retrieved)
        metrics, error = await asyncio.shield(self._reading)  # a scrape that gives up ends only itself
        now = dt.datetime.now(dt.UTC)
        summary = build_summary(
            self._node_name, self._start, pods, metrics, now, self._bad_figure, self.counters
        )
        return Collected(summary, error)

    async def _read_usage(self, namespaces: set[str]) -> tuple[dict[tuple[str, str], Obj], bool]:
        try:
            return await self._pod_metrics(namespaces)
        except ApiError as exc:  # a pool that answers badly or not at all: what is known, and say so
            log.warning("cannot read pod metrics from the pool; stats without usage", error=str(exc)[:300])
            return {}, True

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

    def _unavailable(self, why: str) -> None:
        """Remember that the pool has no (usable) metrics API; log it once, not on every re-check."""
        if self._api is not False:
            log.info(
                "pool serves no usable metrics.k8s.io API: /stats/summary and /metrics/resource carry "
                "pods and start times only, no usage; re-checked with backoff",
                reason=why,
            )
            self._backoff = UNAVAILABLE_TTL
        else:
            self._backoff = min(self._backoff * 2, UNAVAILABLE_TTL_MAX)
        self._api = False
        self._recheck_at = self._clock() + self._backoff

    async def _api_available(self) -> bool:
        """Discovery, once; a "no" is remembered until the next re-check (backoff, capped)."""
        if self._api is True or (self._api is False and self._clock() < self._recheck_at):
            return self._api
        try:
            await self._pool.request("GET", METRICS_PREFIX, timeout=FETCH_TIMEOUT)
        except ApiError as exc:
            if exc.status in (403, 404, 503):
                self._unavailable(f"discovery of {METRICS_PREFIX}: HTTP {exc.status}")
                return False
            raise
        if self._api is False:
            log.info("pool metrics.k8s.io API now available: stats carry usage")
        self._api = True
        return True

    async def _pod_metrics(self, namespaces: set[str]) -> tuple[dict[tuple[str, str], Obj], bool]:
        """PodMetrics by local (namespace, pod), and whether some could not be read (not "no API")."""
        if not await self._api_available():
            return {}, False
        pairs = [(ns, r) for ns in sorted(namespaces) if (r := self._remote_namespace(ns)) is not None]
        sem = asyncio.Semaphore(_CONCURRENCY)

        async def one(local: str, remote: str) -> list[tuple[tuple[str, str], Obj]]:
            async with sem:
                body = await self._pool.request(
                    "GET", f"{METRICS_PREFIX}/namespaces/{remote}/pods", timeout=FETCH_TIMEOUT
                )
            items = body.get("items") or []
            if not isinstance(items, list):
                self._bad_figure(f"{local}/*", "", f"items: not a list but {type(items).__name__}")
                return []
            found = []
            for i in items:
                meta = i.get("metadata") if isinstance(i, dict) else None
                if not isinstance(meta, dict):
                    self._bad_figure(f"{local}/*", "", "PodMetrics: not an object with metadata")
                    continue
                found.append(((local, str(meta.get("name", ""))), i))
            return found

        results = await asyncio.gather(*(one(ns, r) for ns, r in pairs), return_exceptions=True)
        out: dict[tuple[str, str], Obj] = {}
        failed: ApiError | None = None
        for res in results:
            if isinstance(res, ApiError):
                if res.status in (403, 404, 503):  # the API went away, or may not be read after all
                    self._unavailable(f"pod metrics: HTTP {res.status}")
                    return {}, False
                failed = res
            elif isinstance(res, BaseException):
                if is_transport_failure(res):
                    failed = ApiError(0, "TransportError", f"{type(res).__name__}: {res}")
                    continue
                raise res
            else:
                out.update(res)
        if failed is not None:
            log.warning("cannot read pod metrics from the pool; stats without usage", error=str(failed)[:300])
        return out, failed is not None
