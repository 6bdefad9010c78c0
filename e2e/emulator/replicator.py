"""(b) Liqo's CRD replicator for NamespaceMap and ResourceSlice ("shared" ownership).

Consumer objects labelled for replication towards the pool are copied into the pool tenant namespace:
spec flows consumer -> pool, status pool -> consumer (pkg/crdReplicator/reflection/handler.go). Liqo also
puts a finalizer on the consumer object; the emulator does not, so a stopped emulator never wedges
namespace deletion in tests, and a restart deletes pool copies whose consumer object is gone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from . import names as n
from .context import Env
from .kube import Kube, Obj, api_path
from .runtime import Controller, Informer, OneController

log = logging.getLogger(__name__)

# (group/version, plural, kind)
REPLICATED = ((n.OFFLOADING, n.NAMESPACEMAPS, "NamespaceMap"), (n.AUTH, n.RESOURCESLICES, "ResourceSlice"))


class Replicator(OneController):
    def __init__(self, env: Env) -> None:
        self.env = env
        cfg = env.cfg
        local_sel = f"{n.REPLICATION_REQUESTED}=true,{n.REPLICATION_DESTINATION}={cfg.slug}"
        remote_sel = f"{n.REPLICATION_STATUS}=true,{n.REPLICATION_ORIGIN}={cfg.consumer_id}"
        self.kinds = {plural: (gv, kind) for gv, plural, kind in REPLICATED}
        self.local: dict[str, Informer] = {}
        self.remote: dict[str, Informer] = {}
        self.ctrl = Controller("replicator", self.reconcile, workers=2)
        for gv, plural, _kind in REPLICATED:
            loc = env.informer(
                env.consumer, api_path(gv, plural, cfg.consumer_tenant), label_selector=local_sel
            )
            rem = env.informer(env.pool, api_path(gv, plural, cfg.pool_tenant), label_selector=remote_sel)
            self.local[plural], self.remote[plural] = loc, rem
            loc.on_change(self._enqueuer(plural))
            rem.on_change(self._enqueuer(plural))

    def _enqueuer(self, plural: str) -> Callable[[Obj], None]:
        return lambda o: self.ctrl.enqueue(f"{plural}/{o['metadata']['name']}")

    async def reconcile(self, key: str) -> float | None:
        plural, name = key.split("/", 1)
        gv, kind = self.kinds[plural]
        cfg = self.env.cfg
        local = self.local[plural].get(f"{cfg.consumer_tenant}/{name}")
        remote = self.remote[plural].get(f"{cfg.pool_tenant}/{name}")
        pool: Kube = self.env.pool
        remote_coll = api_path(gv, plural, cfg.pool_tenant)
        if local is None or local["metadata"].get("deletionTimestamp"):
            if remote is not None:
                await pool.delete(f"{remote_coll}/{name}", uid=remote["metadata"]["uid"])
                log.info("replicator: deleted pool %s %s/%s", kind, cfg.pool_tenant, name)
            return None
        spec = local.get("spec") or {}
        if remote is None:
            body: Obj = {
                "apiVersion": gv,
                "kind": kind,
                "metadata": {
                    "name": name,
                    "namespace": cfg.pool_tenant,
                    "labels": n.labels_for_remote(local["metadata"].get("labels") or {}, cfg.consumer_id),
                    "annotations": dict(local["metadata"].get("annotations") or {}),
                },
                "spec": spec,
            }
            try:
                await pool.create(remote_coll, body)
            except Exception as e:
                if getattr(e, "already_exists", False):
                    return 0.5  # our cache lags: look again shortly
                raise
            log.info("replicator: created pool %s %s/%s", kind, cfg.pool_tenant, name)
            return None
        if (remote.get("spec") or {}) != spec:
            remote = await pool.update(f"{remote_coll}/{name}", {**remote, "spec": spec})
        remote_status = remote.get("status") or {}
        if remote_status != (local.get("status") or {}):
            local_path = api_path(gv, plural, cfg.consumer_tenant, name, "status")
            await self.env.consumer.update(
                local_path, {**local, "apiVersion": gv, "kind": kind, "status": remote_status}
            )
        return None
