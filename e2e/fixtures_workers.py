"""pytest plugin: real kubelet workers (e2e/workers) on the session's planes; opt-in, session-scoped.

``real_pool_worker`` adds one real worker node to the POOL plane. It is tainted
``vkbridge.e2e/real-worker=true:NoSchedule`` so the rest of the suite, written for the fake workers,
never lands on it; ``steer_pool_pods_to(pool, node)`` sends the pool's new pods there for a while
(offloaded pods carry no toleration for it: Liqo drops tolerations). On a machine that cannot run real
workers the fixture skips with the reason from ``why_not()``.

``real_consumer_worker`` is the same on the CONSUMER plane (one more RealWorkers, same taint): where
vkbridge is to run as a pod from its image, pass the image archive as ``RealWorkers(extra_images=...)``
and give the pod ``hostNetwork: true`` (the planes and the tunnel listen on 127.0.0.1; the testbed
has no kube-proxy, so the in-cluster Service address does not route: use a kubeconfig instead).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.controlplane import ControlPlane
from e2e.workers import RealWorkers, why_not

REAL_POOL_NODE = "pool-real-0"
REAL_CONSUMER_NODE = "consumer-real-0"
REAL_WORKER_TAINT = {"key": "vkbridge.e2e/real-worker", "value": "true", "effect": "NoSchedule"}
REAL_WORKER_LABEL = "vkbridge.e2e/real-worker"
REAL_WORKER_TOLERATION = {"key": REAL_WORKER_TAINT["key"], "operator": "Exists", "effect": "NoSchedule"}
_MERGE = "application/merge-patch+json"


def real_workers_on(plane: ControlPlane, node: str) -> Iterator[RealWorkers]:
    """One tainted real worker on plane for a session fixture; skips with why_not()'s reason."""
    reason = why_not()
    if reason:
        pytest.skip(reason)
    workers = RealWorkers(
        plane, [node], taints=[REAL_WORKER_TAINT], labels={REAL_WORKER_LABEL: "true"}
    ).start()
    yield workers
    problems = workers.stop()
    if problems:
        pytest.fail(f"real workers left things behind: {problems}")


@pytest.fixture(scope="session")
def real_pool_workers(pool: ControlPlane) -> Iterator[RealWorkers]:
    """One real kubelet worker on the pool (containerd, CNI, locally made busybox and pause images)."""
    yield from real_workers_on(pool, REAL_POOL_NODE)


@pytest.fixture(scope="session")
def real_consumer_workers(consumer: ControlPlane) -> Iterator[RealWorkers]:
    """One real kubelet worker on the consumer (see the module docstring); opt-in like the pool's."""
    yield from real_workers_on(consumer, REAL_CONSUMER_NODE)


@pytest.fixture(scope="session")
def real_consumer_worker(real_consumer_workers: RealWorkers) -> str:
    """The real consumer worker's node name."""
    return real_consumer_workers.nodes[0].name


@pytest.fixture(scope="session")
def real_pool_worker(real_pool_workers: RealWorkers) -> str:
    """The real pool worker's node name."""
    return real_pool_workers.nodes[0].name


def _patch_node(pool: ControlPlane, name: str, spec: dict[str, Any], *, check: bool = True) -> None:
    status, got = pool.api("PATCH", f"/api/v1/nodes/{name}", {"spec": spec}, content_type=_MERGE)
    if check and status >= 300:
        raise RuntimeError(f"{pool.name}: patching node {name}: {status} {got}")


@contextlib.contextmanager
def steer_pool_pods_to(pool: ControlPlane, node: str) -> Iterator[None]:
    """Until exit, the pool schedules new pods only onto node: the others are cordoned, its taint lifted."""
    status, body = pool.api("GET", "/api/v1/nodes")
    if status != 200:
        raise RuntimeError(f"{pool.name}: listing nodes: {status} {body}")
    nodes = body["items"]
    others = [n["metadata"]["name"] for n in nodes if n["metadata"]["name"] != node
              and not n["spec"].get("unschedulable")]  # fmt: skip
    taints = next(n["spec"].get("taints") or [] for n in nodes if n["metadata"]["name"] == node)
    try:
        for other in others:
            _patch_node(pool, other, {"unschedulable": True})
        _patch_node(pool, node, {"taints": None})
        yield
    finally:
        _patch_node(pool, node, {"taints": taints or None})
        for other in others:
            _patch_node(pool, other, {"unschedulable": None}, check=False)
