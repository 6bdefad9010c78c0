"""The workloads: pod and Deployment bodies, and the clients that create pods at a pace or all at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from bench.kubeapi import Api, ApiError, Obj

BENCH_REQUESTS = {"cpu": "1m", "memory": "1Mi"}


def pod_spec(slug: str | None) -> Obj:
    """GUIDE §4 opt-in (toleration + nodeSelector) when slug is given; tiny requests; no-exec friendly.

    slug=None is the vanilla twin for the pool itself: vkbridge drops nodeSelector from the ShadowPod
    (LIQO §4.1), so the pool runs exactly this spec either way.
    """
    spec: Obj = {
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "app",
                "image": "busybox:1.36",
                "command": ["sh", "-c", "sleep 3600"],
                "resources": {"requests": dict(BENCH_REQUESTS)},
            }
        ],
    }
    if slug is not None:
        spec["tolerations"] = [
            {"key": "multicloud.io/pool", "operator": "Equal", "value": slug, "effect": "NoSchedule"}
        ]
        spec["nodeSelector"] = {"multicloud.io/pool": slug}
    return spec


def deployment(name: str, replicas: int, slug: str | None) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(slug)},
        },
    }


def bare_pod(name: str, slug: str | None, labels: Mapping[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {"app": "churn"})},
        "spec": pod_spec(slug),
    }


SHADOWPODS = "/apis/offloading.liqo.io/v1beta1/namespaces/{ns}/shadowpods"


def shadow_pod(name: str, origin: str) -> Obj:
    """The pool path without a VK: a ShadowPod of the vanilla pod spec, counted against the grant of
    ``origin`` (the consumer ID) by the pool's quota webhook, as one a VK sends."""
    return {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "ShadowPod",
        "metadata": {"name": name, "labels": {"app": "churn", "offloading.liqo.io/origin": origin}},
        "spec": {"pod": pod_spec(None)},
    }


# Creates in flight at most (the bench's connection pool allows 128): a create waiting for a slot has
# not started, so a client that cannot keep up shows as a low started rate.
IN_FLIGHT = 120


@dataclass
class Creations:
    """What a creator did, per pod name: when each create was due, started (a slot free) and answered."""

    sent: dict[str, float] = field(default_factory=dict)  # due: the schedule (latencies count from here)
    started: dict[str, float] = field(default_factory=dict)
    acked: dict[str, float] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    slots: asyncio.Semaphore | None = None

    def achieved_rate(self) -> float | None:
        """Creates the client started per second: below the asked rate, the client was the bottleneck."""
        return _rate(self.started.values())

    def answered_rate(self) -> float | None:
        """Creates answered per second, first due to last answered (includes the API server's latency)."""
        if len(self.acked) < 2:
            return None
        span = max(self.acked.values()) - min(self.sent.values())
        return round(len(self.acked) / span, 1) if span > 0 else None


def _rate(stamps: Iterable[float]) -> float | None:
    ts = sorted(stamps)
    if len(ts) < 2 or ts[-1] <= ts[0]:
        return None
    return round((len(ts) - 1) / (ts[-1] - ts[0]), 1)


async def _create(
    api: Api, ns: str, name: str, slug: str | None, out: Creations, shadows_of: str | None = None
) -> None:
    path, body = (
        (f"/api/v1/namespaces/{ns}/pods", bare_pod(name, slug))
        if shadows_of is None
        else (SHADOWPODS.format(ns=ns), shadow_pod(name, shadows_of))
    )
    out.sent[name] = time.monotonic()
    if out.slots is None:
        out.slots = asyncio.Semaphore(IN_FLIGHT)
    async with out.slots:
        out.started[name] = time.monotonic()
        try:
            await api.request("POST", path, body)
            out.acked[name] = time.monotonic()
        except (ApiError, OSError, TimeoutError) as err:
            out.errors.append(f"create {name}: {err}")


async def paced(
    api: Api, ns: str, slug: str | None, rate: float, duration: float, lifetime: float, out: Creations,
    prefix: str = "churn-", shadows_of: str | None = None,
) -> None:  # fmt: skip
    """Create `rate` pods per second on an absolute schedule (a slow answer never slows the pace);
    delete each `lifetime` seconds after its creation (0: keep them). ``shadows_of``: ShadowPods of that
    origin instead of pods (no deletion then)."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    total = int(rate * duration)
    tasks: set[asyncio.Task[None]] = set()

    async def delete_later(name: str, at: float) -> None:
        await asyncio.sleep(max(0.0, at - loop.time()))
        try:
            await api.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")
        except (ApiError, OSError, TimeoutError) as err:
            out.errors.append(f"delete {name}: {err}")

    for i in range(total):
        at = start + i / rate
        await asyncio.sleep(max(0.0, at - loop.time()))
        name = f"{prefix}{i:05d}"
        coros = [_create(api, ns, name, slug, out, shadows_of)]
        if lifetime > 0 and shadows_of is None:
            coros.append(delete_later(name, at + lifetime))
        for coro in coros:
            t = asyncio.create_task(coro)
            tasks.add(t)
            t.add_done_callback(tasks.discard)
    await asyncio.gather(*tasks)


async def all_at_once(
    api: Api, ns: str, slug: str | None, n: int, concurrency: int, out: Creations, prefix: str = "flood-"
) -> None:
    """Create n pods as fast as the API server answers, `concurrency` requests in flight (no pacing)."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            await _create(api, ns, f"{prefix}{i:05d}", slug, out)

    await asyncio.gather(*(one(i) for i in range(n)))


async def delete_pods(api: Api, ns: str, shadows: bool = False) -> None:
    """Every pod (or ShadowPod) of a namespace (deletecollection): the drain between two steps."""
    await api.request("DELETE", SHADOWPODS.format(ns=ns) if shadows else f"/api/v1/namespaces/{ns}/pods")
