"""What every reflector shares: clients, identities, pool state, events, metrics."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vkbridge.kube.client import KubeClient
from vkbridge.kube.events import EventRecorder
from vkbridge.kube.reachability import Reachability
from vkbridge.metrics import Metrics


@dataclass
class ReflectionContext:
    home: KubeClient
    pool: KubeClient
    node_name: str
    local_cluster_id: str
    remote_cluster_id: str
    tenant_namespace: str
    vk_pod_ip: str
    reach: Reachability
    recorder: EventRecorder
    metrics: Metrics
    apiserver_support: str = "disabled"
    disable_ip_reflection: bool = False
    offloading_patch: Callable[[], Mapping[str, Any] | None] = field(default=lambda: None)

    def metric_labels(self, namespace: str, reflector: str) -> dict[str, str]:
        return {
            "namespace": namespace,
            "reflector_resource": reflector,
            "cluster_id": self.remote_cluster_id,
            "node_name": self.node_name,
        }
