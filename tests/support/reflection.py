"""A ReflectionContext over two FakeApis (consumer and pool), for unit tests of the reflectors."""

from __future__ import annotations

import uuid
from typing import Any, cast

from prometheus_client import CollectorRegistry

from reflectors.context import ReflectionContext
from tests.support.fakeapi import FakeApi, FakeRecorder
from vkbridge.kube.reachability import PoolState, Reachability
from vkbridge.metrics import Metrics

LOCAL_ID = "c-1a2b3c4d"  # the consumer's cluster ID
REMOTE_ID = "c0123456789ab"  # the pool's cluster ID; the virtual node is named after it
TENANT_NS = f"liqo-tenant-{REMOTE_ID}"


def reflection_context(
    home: FakeApi,
    pool: FakeApi,
    *,
    recorder: FakeRecorder | None = None,
    reach: Reachability | None = None,
    vk_pod_ip: str = "127.0.0.1",
) -> ReflectionContext:
    """Our identities, a pool Connected unless ``reach`` says otherwise, metrics in a registry of their own."""
    if reach is None:
        reach = Reachability()
        reach.set(PoolState.CONNECTED)
    return ReflectionContext(
        home=cast(Any, home),
        pool=cast(Any, pool),
        node_name=REMOTE_ID,
        local_cluster_id=LOCAL_ID,
        remote_cluster_id=REMOTE_ID,
        tenant_namespace=TENANT_NS,
        vk_pod_ip=vk_pod_ip,
        reach=reach,
        recorder=cast(Any, recorder),
        metrics=Metrics(CollectorRegistry()),
    )


def local_pod(
    name: str = "web", ns: str = "team", *, cpu: str = "500m", memory: str = "256Mi"
) -> dict[str, Any]:
    """A Pending consumer pod bound to our virtual node, with one container's requests."""
    container = {"name": "app", "image": "busybox", "resources": {"requests": {"cpu": cpu, "memory": memory}}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "uid": str(uuid.uuid4()),
            "creationTimestamp": "2026-12-01T12:00:00Z",
        },
        "spec": {"nodeName": REMOTE_ID, "containers": [container]},
        "status": {"phase": "Pending"},
    }
