"""(a) Consumer side: NamespaceOffloading -> NamespaceMap.spec.desiredMapping, and NamespaceOffloading status.

Liqo's namespaceoffloading controller, reduced to one peered cluster. The whole desiredMapping is
recomputed from all NamespaceOffloadings on every change, so a restart converges from any state.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from . import names as n
from .context import Env
from .kube import ApiError, Obj, api_path
from .runtime import Controller, obj_key

log = logging.getLogger(__name__)

_MAP_KEY = "namespacemap"
_MANAGED = ("remoteNamespaceName", "observedGeneration", "offloadingPhase", "remoteNamespacesConditions")


def match_expression(expr: dict[str, Any], labels: dict[str, str]) -> bool:
    key, op, values = expr.get("key", ""), expr.get("operator", ""), expr.get("values") or []
    if op == "In":
        return key in labels and labels[key] in values
    if op == "NotIn":
        return key not in labels or labels[key] not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and values:
        try:
            a, b = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def cluster_selected(nso: Obj, node_labels: dict[str, str]) -> bool:
    """NodeSelector semantics: terms ORed, expressions ANDed.

    No selector (or no terms) selects nothing: Liqo v1.1.2/v1.2.0 leave such an object in
    NoClusterSelected (GUIDE §3.7), and the emulator reproduces it.
    """
    terms = ((nso.get("spec") or {}).get("clusterSelector") or {}).get("nodeSelectorTerms") or []
    for term in terms:
        exprs = term.get("matchExpressions") or []
        if exprs and all(match_expression(e, node_labels) for e in exprs):
            return True
    return False


def remote_name(nso: Obj, consumer_id: str) -> str:
    spec = nso.get("spec") or {}
    ns = nso["metadata"]["namespace"]
    strategy = spec.get("namespaceMappingStrategy") or "DefaultName"
    if strategy == "EnforceSameName":
        return str(ns)
    if strategy == "SelectedName" and spec.get("remoteNamespaceName"):
        return str(spec["remoteNamespaceName"])
    return n.remote_namespace(ns, consumer_id)


def namespacemap_body(slug: str, desired: dict[str, str]) -> Obj:
    """The consumer NamespaceMap Liqo's virtualnode controller keeps for a peered cluster."""
    return {
        "apiVersion": n.OFFLOADING,
        "kind": "NamespaceMap",
        "metadata": {
            "name": slug,
            "namespace": n.consumer_tenant_ns(slug),
            "labels": n.replication_labels(slug),
        },
        "spec": {"desiredMapping": desired},
    }


class Offloading:
    def __init__(self, env: Env) -> None:
        self.env = env
        cfg = env.cfg
        self.nsos = env.informer(env.consumer, api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS))
        self.maps = env.informer(env.consumer, api_path(n.OFFLOADING, n.NAMESPACEMAPS, cfg.consumer_tenant))
        self.vnodes = env.informer(env.consumer, api_path(n.OFFLOADING, n.VIRTUALNODES, cfg.consumer_tenant))
        self.map_ctrl = Controller("offloading-map", self.reconcile_map)
        self.status_ctrl = Controller("offloading-status", self.reconcile_status)
        self.nsos.on_change(self._on_nso)
        self.maps.on_change(lambda _o: self._all())
        self.vnodes.on_change(lambda _o: self._all())

    @property
    def controllers(self) -> list[Controller]:
        return [self.map_ctrl, self.status_ctrl]

    def _on_nso(self, obj: Obj) -> None:
        self.map_ctrl.enqueue(_MAP_KEY)
        self.status_ctrl.enqueue(obj_key(obj))

    def _all(self) -> None:
        self.map_ctrl.enqueue(_MAP_KEY)
        for k in list(self.nsos.cache):
            self.status_ctrl.enqueue(k)

    def node_labels(self) -> dict[str, str]:
        """Labels a virtual node of this peering carries (base Liqo labels + VirtualNode.spec.labels)."""
        slug = self.env.cfg.slug
        labels = {"liqo.io/type": "virtual-node", n.REMOTE_CLUSTER_ID: slug, "kubernetes.io/hostname": slug}
        vn = self.vnodes.get(f"{self.env.cfg.consumer_tenant}/{slug}")
        if vn:
            labels.update((vn.get("spec") or {}).get("labels") or {})
        return labels

    def _selected(self) -> dict[str, Obj]:
        labels = self.node_labels()
        return {
            o["metadata"]["namespace"]: o
            for o in self.nsos.values()
            if o["metadata"]["name"] == n.OFFLOADING_NAME
            and not o["metadata"].get("deletionTimestamp")
            and cluster_selected(o, labels)
        }

    async def reconcile_map(self, _key: str) -> float | None:
        cfg = self.env.cfg
        desired = {ns: remote_name(o, cfg.consumer_id) for ns, o in self._selected().items()}
        nm = self.maps.get(f"{cfg.consumer_tenant}/{cfg.slug}")
        coll = api_path(n.OFFLOADING, n.NAMESPACEMAPS, cfg.consumer_tenant)
        if nm is None:
            try:
                await self.env.consumer.create(coll, namespacemap_body(cfg.slug, desired))
            except ApiError as e:
                if e.not_found:  # tenant namespace not there yet (no bundle applied)
                    return 2.0
                if not e.already_exists:
                    raise
            return None
        if ((nm.get("spec") or {}).get("desiredMapping") or {}) == desired:
            return None
        body = {**nm, "spec": {**(nm.get("spec") or {}), "desiredMapping": desired}}
        await self.env.consumer.update(f"{coll}/{cfg.slug}", body)
        log.info("NamespaceMap %s/%s desiredMapping -> %s", cfg.consumer_tenant, cfg.slug, desired)
        return None

    async def reconcile_status(self, key: str) -> float | None:
        nso = self.nsos.get(key)
        if nso is None or nso["metadata"]["name"] != n.OFFLOADING_NAME:
            return None
        cfg = self.env.cfg
        ns = nso["metadata"]["namespace"]
        old = nso.get("status") or {}
        remote = remote_name(nso, cfg.consumer_id)
        status: dict[str, Any] = {
            "remoteNamespaceName": remote,
            "observedGeneration": nso["metadata"].get("generation", 0),
        }
        if nso["metadata"].get("deletionTimestamp"):
            status["offloadingPhase"] = "Terminating"
        elif ns not in self._selected():
            status["offloadingPhase"] = "NoClusterSelected"
            status["remoteNamespacesConditions"] = None
        else:
            nm = self.maps.get(f"{cfg.consumer_tenant}/{cfg.slug}") or {}
            entry = ((nm.get("status") or {}).get("currentMapping") or {}).get(ns) or {}
            phase = entry.get("phase")
            status["offloadingPhase"] = {
                "Accepted": "Ready",
                "CreationLoopBackOff": "AllFailed",
                "Terminating": "Terminating",
            }.get(phase or "", "InProgress")
            status["remoteNamespacesConditions"] = {cfg.slug: self._conditions(old, phase)}
        before = {k: old.get(k) for k in _MANAGED}
        after = {**before, **status}
        if after == before:
            return None
        path = api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS, ns, nso["metadata"]["name"], "status")
        rv = nso["metadata"]["resourceVersion"]
        await self.env.consumer.patch(path, {"metadata": {"resourceVersion": rv}, "status": status})
        return None

    def _conditions(self, old_status: Obj, phase: str | None) -> list[Obj]:
        prev = {
            c.get("type"): c
            for c in (old_status.get("remoteNamespacesConditions") or {}).get(self.env.cfg.slug, [])
        }
        ready = phase == "Accepted"
        want = [
            (
                "OffloadingRequired",
                "True",
                "ClusterSelected",
                "You have selected this cluster for offloading",
            ),
            (
                "Ready",
                "True" if ready else "False",
                "RemoteNamespaceCreated" if ready else (phase or "CreationInProgress"),
                "Namespace correctly offloaded on this cluster"
                if ready
                else "Remote namespace is not ready on this cluster",
            ),
        ]
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        out = []
        for typ, st, reason, msg in want:
            p = prev.get(typ) or {}
            ltt = p.get("lastTransitionTime") if p.get("status") == st else now
            out.append(
                {"type": typ, "status": st, "reason": reason, "message": msg, "lastTransitionTime": ltt}
            )
        return out
