"""A reflected namespace pair: the local namespace, its remote twin, and the pool-side caches.

Remote caches are filtered server-side by our node label, so several virtual nodes can share a remote
namespace and we never hold other nodes' objects in memory. A same-name foreign object is found at
create time instead (AlreadyExists, then an ownership check).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from reflectors.forge import constants as c
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import PODS, SHADOWPODS, KubeClient

KeySink = Callable[[str], None]


def remote_selector(node_name: str, local_cluster_id: str, remote_cluster_id: str) -> str:
    return (
        f"{c.ORIGIN_LABEL}={local_cluster_id},{c.DESTINATION_LABEL}={remote_cluster_id},"
        f"{c.NODENAME_LABEL}={node_name}"
    )


@dataclass
class NamespacePair:
    local: str
    remote: str
    shadows: Cache
    remote_pods: Cache
    tasks: list[asyncio.Task[Any]] = field(default_factory=list)
    phase: str = "Accepted"  # or "Terminating": the pool is removing the remote namespace

    @property
    def synced(self) -> bool:
        return self.shadows.synced and self.remote_pods.synced

    def caches(self) -> list[Cache]:
        return [self.shadows, self.remote_pods]


def remote_pod_view(pod: dict[str, Any]) -> dict[str, Any]:
    """What the reflectors read of a remote pod: identity, labels/annotations and status (not the spec)."""
    return {k: pod[k] for k in ("apiVersion", "kind", "metadata", "status") if k in pod}


def shadowpod_view(shadow: dict[str, Any]) -> dict[str, Any]:
    """A ShadowPod without its pod spec, but for what the grant charges (container requests, overhead)."""
    out: dict[str, Any] = {k: shadow[k] for k in ("apiVersion", "kind", "metadata", "status") if k in shadow}
    pod = (shadow.get("spec") or {}).get("pod") or {}
    spec: dict[str, Any] = {
        "containers": [
            {"name": c.get("name"), "resources": c.get("resources") or {}}
            for c in pod.get("containers") or []
        ]
    }
    inits = [
        {k: c[k] for k in ("name", "resources", "restartPolicy") if k in c}
        for c in pod.get("initContainers") or []
    ]
    if inits:
        spec["initContainers"] = inits
    for key in ("overhead", "resources"):
        if key in pod:
            spec[key] = pod[key]
    out["spec"] = {"pod": spec}
    return out


def new_pair(
    pool: KubeClient, local: str, remote: str, selector: str, sink: KeySink, inactivity_timeout: float
) -> NamespacePair:
    """Caches for one pair; every remote change is re-keyed to the LOCAL namespace and queued."""

    def rekey(_type: str, old: Any, new: Any) -> None:
        obj = new if new is not None else old
        name = (obj.get("metadata") or {}).get("name")
        if name:
            sink(f"{local}/{name}")

    shadows = Cache(
        pool,
        SHADOWPODS,
        remote,
        label_selector=selector,
        name=f"pool/shadowpods@{remote}",
        inactivity_timeout=inactivity_timeout,
        compact=True,
        project=shadowpod_view,
    )
    remote_pods = Cache(
        pool,
        PODS,
        remote,
        label_selector=selector,
        name=f"pool/pods@{remote}",
        inactivity_timeout=inactivity_timeout,
        compact=True,
        project=remote_pod_view,
    )
    shadows.subscribe(rekey)
    remote_pods.subscribe(rekey)
    return NamespacePair(local=local, remote=remote, shadows=shadows, remote_pods=remote_pods)
