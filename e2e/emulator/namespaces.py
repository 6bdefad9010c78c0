"""(c) Provider namespacemap controller: remote namespaces, their VK RoleBinding, status.currentMapping.

A port of pkg/liqo-controller-manager/offloading/namespacemap-controller (Liqo v1.2). Liqo holds the map
with a finalizer until its namespaces are gone; the emulator instead deletes namespaces whose managing
map no longer exists, which converges the same way and survives restarts.
"""

from __future__ import annotations

import logging

from . import names as n
from .context import Env
from .kube import ApiError, Obj, api_path
from .runtime import Controller, OneController

log = logging.getLogger(__name__)


class _Hard(Exception):
    """Creation failed for a reason retrying will not fix (the name is taken by a foreign namespace)."""


class ProviderNamespaces(OneController):
    def __init__(self, env: Env) -> None:
        self.env = env
        cfg = env.cfg
        self.maps = env.replicated(n.OFFLOADING, n.NAMESPACEMAPS)
        self.namespaces = env.informer(
            env.pool, api_path("v1", "namespaces"), label_selector=f"{n.REMOTE_CLUSTER_ID}={cfg.consumer_id}"
        )
        self.ctrl = Controller("namespacemap", self.reconcile).follow(self.maps)
        self.namespaces.on_change(self._on_namespace)

    def _on_namespace(self, ns: Obj) -> None:
        owner = (ns["metadata"].get("annotations") or {}).get(n.NS_MANAGED_BY_MAP)
        if owner:
            self.ctrl.enqueue(owner)

    async def reconcile(self, key: str) -> float | None:
        nm = self.maps.get(key)
        if nm is None:
            return await self._delete_orphans(key)
        origin = (nm["metadata"].get("labels") or {}).get(n.REPLICATION_ORIGIN)
        if not origin:
            return None
        status = dict(nm.get("status") or {})
        current: dict[str, Obj] = dict(status.get("currentMapping") or {})
        desired: dict[str, str] = (
            {}
            if nm["metadata"].get("deletionTimestamp")
            else dict((nm.get("spec") or {}).get("desiredMapping") or {})
        )
        again: float | None = None
        errors: list[str] = []
        for local, remote in desired.items():
            phase = "Accepted"
            try:
                await self._ensure_namespace(remote, local, key, origin)
            except _Hard as e:
                phase, again = "CreationLoopBackOff", 5.0
                errors.append(str(e))
            except ApiError as e:
                prev = current.get(local) or {}
                if prev.get("phase") != "Accepted":
                    phase = "CreationLoopBackOff"
                again = 1.0
                errors.append(str(e))
            current[local] = {"remoteNamespace": remote, "phase": phase}
        for local, entry in list(current.items()):
            if local in desired:
                continue
            if await self._delete_namespace(entry.get("remoteNamespace", ""), key):
                current[local] = {"remoteNamespace": entry.get("remoteNamespace", ""), "phase": "Terminating"}
                again = 1.0
            else:
                del current[local]
        if current != (status.get("currentMapping") or {}):
            body = {**nm, "status": {**status, "currentMapping": current}}
            await self.env.pool.update(
                api_path(
                    n.OFFLOADING,
                    n.NAMESPACEMAPS,
                    nm["metadata"]["namespace"],
                    nm["metadata"]["name"],
                    "status",
                ),
                body,
            )
            log.info("NamespaceMap %s currentMapping -> %s", key, current)
        for err in errors:
            log.warning("NamespaceMap %s: %s", key, err)
        return again

    async def _ensure_namespace(self, name: str, original: str, nm_key: str, origin: str) -> None:
        pool = self.env.pool
        ns_path = api_path("v1", "namespaces", name=name)
        ns = await pool.get_or_none(ns_path)
        if ns is None:
            body = {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {
                    "name": name,
                    "annotations": {n.NS_MANAGED_BY_MAP: nm_key, n.NS_ORIGINAL_NAME: original},
                    "labels": {n.REMOTE_CLUSTER_ID: origin},
                },
            }
            ns = await pool.ensure(api_path("v1", "namespaces"), body)
            log.info("created remote namespace %s (for %s)", name, original)
        if (ns["metadata"].get("annotations") or {}).get(n.NS_MANAGED_BY_MAP) != nm_key:
            raise _Hard(f"namespace {name!r} already exists and it is not managed by NamespaceMap {nm_key!r}")
        if ns["metadata"].get("deletionTimestamp"):
            raise ApiError(409, "Terminating", f"namespace {name} is still terminating")
        tenant_ns = nm_key.split("/", 1)[0]
        rb_coll = api_path(n.RBAC, "rolebindings", name)
        if await pool.get_or_none(f"{rb_coll}/{tenant_ns}") is None:
            await pool.ensure(
                rb_coll,
                {
                    "apiVersion": n.RBAC,
                    "kind": "RoleBinding",
                    "metadata": {
                        "name": tenant_ns,
                        "namespace": name,
                        "annotations": {n.NS_MANAGED_BY_MAP: nm_key},
                        "labels": {n.K8S_MANAGED_BY: "liqo", n.REMOTE_CLUSTER_ID: origin},
                    },
                    "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": origin}],
                    "roleRef": {
                        "apiGroup": "rbac.authorization.k8s.io",
                        "kind": "ClusterRole",
                        "name": n.VK_REMOTE_CLUSTERROLE,
                    },
                },
            )

    async def _delete_namespace(self, name: str, nm_key: str) -> bool:
        """Start deleting a namespace this map manages; True while it still exists."""
        if not name:
            return False
        path = api_path("v1", "namespaces", name=name)
        ns = await self.env.pool.get_or_none(path)
        if ns is None:
            return False
        if (ns["metadata"].get("annotations") or {}).get(n.NS_MANAGED_BY_MAP) != nm_key:
            log.warning("namespace %s is not associated with NamespaceMap %s; leaving it", name, nm_key)
            return False
        if not ns["metadata"].get("deletionTimestamp"):
            await self.env.pool.delete(path, uid=ns["metadata"]["uid"])
            log.info("remote namespace %s marked for termination", name)
        return True

    async def _delete_orphans(self, nm_key: str) -> float | None:
        pending = False
        for ns in self.namespaces.values():
            if (ns["metadata"].get("annotations") or {}).get(n.NS_MANAGED_BY_MAP) == nm_key:
                pending |= await self._delete_namespace(ns["metadata"]["name"], nm_key)
        return 1.0 if pending else None
