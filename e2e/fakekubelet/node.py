"""Node registration, the kube-node-lease heartbeat and the periodic Ready status, kubelet-style."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import uuid
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from .kubeclient import MERGE, STRATEGIC, ApiError, KubeClient
from .timefmt import iso_seconds, micro_time

log = logging.getLogger(__name__)

Json = dict[str, Any]
WS_FEATURE = "ExtendWebSocketsToKubelet"
LEASE_NS = "kube-node-lease"
LEASE_SECONDS = 40
CAPACITY = {"cpu": "32", "memory": "128Gi", "pods": "1000", "ephemeral-storage": "100Gi"}
PRESSURES = (
    ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
    ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
    ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
)


def node_conditions(since: str, now: str) -> list[Json]:
    conds = [
        {
            "type": t,
            "status": "False",
            "reason": reason,
            "message": msg,
            "lastHeartbeatTime": now,
            "lastTransitionTime": since,
        }
        for t, reason, msg in PRESSURES
    ]
    conds.append(
        {
            "type": "Ready",
            "status": "True",
            "reason": "KubeletReady",
            "message": "kubelet is posting ready status",
            "lastHeartbeatTime": now,
            "lastTransitionTime": since,
        }
    )
    return conds


def node_status(name: str, port: int, since: str, now: str, declare_ws: bool) -> Json:
    status: Json = {
        "capacity": dict(CAPACITY),
        "allocatable": dict(CAPACITY),
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "machineID": uuid.uuid5(uuid.NAMESPACE_DNS, name).hex,
            "systemUUID": str(uuid.uuid5(uuid.NAMESPACE_URL, name)),
            "bootID": str(uuid.uuid4()),
            "kernelVersion": "6.1.0-fake",
            "osImage": "vkbridge fake kubelet",
            "containerRuntimeVersion": "fake://0.1.0",
            "kubeletVersion": "v1.36.3-fake",
            "kubeProxyVersion": "",
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
        "conditions": node_conditions(since, now),
    }
    if declare_ws:
        status["declaredFeatures"] = [WS_FEATURE]
    return status


def node_object(name: str, port: int, since: str, declare_ws: bool) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "fake-worker",
            },
        },
        "spec": {},
        "status": node_status(name, port, since, since, declare_ws),
    }


@dataclass(eq=False)
class NodeAgent:
    """Registers one node and keeps its Lease and Ready condition fresh until cancelled."""

    client: KubeClient
    name: str
    port: int
    _: KW_ONLY
    lease_interval: float = 10.0
    status_interval: float = 30.0
    since: str = field(default_factory=iso_seconds, init=False)
    uid: str = field(default="", init=False)
    declared_features: list[str] = field(default_factory=list, init=False)
    _lease: Json | None = field(default=None, init=False, repr=False)

    async def register(self) -> None:
        """Create the node, or take over an existing one (new port, fresh status)."""
        path = f"/api/v1/nodes/{self.name}"
        body = node_object(self.name, self.port, self.since, declare_ws=True)
        try:
            node = await self.client.request("POST", "/api/v1/nodes", body=body)
        except ApiError as exc:
            if exc.status != 409:
                raise
            await self.client.request("PATCH", path, body={"metadata": body["metadata"]}, content_type=MERGE)
            # Merge patch replaces addresses/declaredFeatures whole; conditions go by SMP below.
            status = {k: v for k, v in body["status"].items() if k != "conditions"}
            await self.client.request("PATCH", path + "/status", body={"status": status}, content_type=MERGE)
            node = await self._heartbeat()
        self.uid = node["metadata"]["uid"]
        self.declared_features = list(node.get("status", {}).get("declaredFeatures") or [])
        if WS_FEATURE not in self.declared_features:
            log.warning("node %s: the API server dropped status.declaredFeatures=%s", self.name, WS_FEATURE)
        log.info(
            "node %s registered (port %d, declaredFeatures=%s)", self.name, self.port, self.declared_features
        )
        await self._renew_lease()

    async def _heartbeat(self) -> Json:
        now = iso_seconds()
        body = {"status": {"conditions": node_conditions(self.since, now)}}
        return await self.client.request(
            "PATCH", f"/api/v1/nodes/{self.name}/status", body=body, content_type=STRATEGIC
        )

    async def run(self) -> None:
        tasks = [
            asyncio.create_task(self._every(self.lease_interval, self._renew_lease)),
            asyncio.create_task(self._every(self.status_interval, self._refresh_status)),
        ]
        try:
            await asyncio.gather(*tasks)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _every(self, interval: float, action: Any) -> None:
        failures = 0
        while True:
            delay = interval if failures == 0 else min(0.5 * 2**failures, interval, 7.0)
            await asyncio.sleep(delay * (0.9 + 0.2 * random.random()) if failures == 0 else delay)
            try:
                await action()
                failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failures += 1
                log.warning("node %s: %s failed: %s", self.name, getattr(action, "__name__", action), exc)

    async def _refresh_status(self) -> None:
        try:
            await self._heartbeat()
        except ApiError as exc:
            if exc.status != 404:
                raise
            log.warning("node %s was deleted; registering it again", self.name)
            self._lease = None
            await self.register()

    def _lease_body(self) -> Json:
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": self.name,
                "namespace": LEASE_NS,
                "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": self.name, "uid": self.uid}],
            },
            "spec": {
                "holderIdentity": self.name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": micro_time(),
            },
        }

    async def _renew_lease(self) -> None:
        """PUT the last-seen Lease with a new renewTime; re-GET on conflict, create when missing."""
        path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{self.name}"
        for _ in range(5):
            if self._lease is None:
                try:
                    self._lease = await self.client.request("GET", path)
                except ApiError as exc:
                    if exc.status != 404:
                        raise
                    with contextlib.suppress(ApiError):
                        self._lease = await self.client.request(
                            "POST",
                            f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases",
                            body=self._lease_body(),
                        )
                        return
                    continue
            lease = dict(self._lease)
            lease["spec"] = {
                **lease.get("spec", {}),
                "holderIdentity": self.name,
                "leaseDurationSeconds": LEASE_SECONDS,
                "renewTime": micro_time(),
            }
            try:
                self._lease = await self.client.request("PUT", path, body=lease)
                return
            except ApiError as exc:
                if exc.status not in (404, 409):
                    raise
                self._lease = None
        raise RuntimeError(f"lease {self.name} not renewed after 5 attempts")
