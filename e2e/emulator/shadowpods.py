"""(d) Provider shadowpod controller: each ShadowPod becomes a same-name Pod it controls (LIQO §4.1).

The Pod is re-created when deleted, its labels/annotations follow the ShadowPod, and the ShadowPod's
status.phase mirrors the Pod's. Once a ShadowPod is Succeeded/Failed it is left alone (liqo PR #3245).
Garbage collection of the Pod after the ShadowPod is deleted is the pool's kube-controller-manager's job,
through the controller ownerReference, exactly as with Liqo.
"""

from __future__ import annotations

import logging

from . import names as n
from .context import Env
from .kube import ApiError, Obj, api_path
from .runtime import Controller, OneController

log = logging.getLogger(__name__)


def forge_pod(sp: Obj) -> Obj:
    md = sp["metadata"]
    labels = {**(md.get("labels") or {}), n.MANAGED_BY: n.MANAGED_BY_SHADOWPOD}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": md["name"],
            "namespace": md["namespace"],
            "labels": labels,
            "annotations": dict(md.get("annotations") or {}),
            "ownerReferences": [
                {
                    "apiVersion": n.OFFLOADING,
                    "kind": "ShadowPod",
                    "name": md["name"],
                    "uid": md["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": (sp.get("spec") or {}).get("pod") or {},
    }


def controller_uid(pod: Obj) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or []:
        if ref.get("controller") and ref.get("kind") == "ShadowPod":
            return str(ref.get("uid"))
    return None


class ShadowPods(OneController):
    def __init__(self, env: Env) -> None:
        self.env = env
        self.shadows = env.informer(env.pool, api_path(n.OFFLOADING, n.SHADOWPODS))
        self.pods = env.informer(
            env.pool, api_path("v1", "pods"), label_selector=f"{n.MANAGED_BY}={n.MANAGED_BY_SHADOWPOD}"
        )
        workers = env.cfg.shadowpod_workers
        self.ctrl = Controller("shadowpod", self.reconcile, workers=workers).follow(self.shadows, self.pods)

    async def reconcile(self, key: str) -> float | None:
        sp = self.shadows.get(key)
        if sp is None or sp["metadata"].get("deletionTimestamp"):
            return None
        if (sp.get("status") or {}).get("phase") in n.TERMINAL_PHASES:
            return None
        pool = self.env.pool
        ns, name = sp["metadata"]["namespace"], sp["metadata"]["name"]
        pod = self.pods.get(key)
        if pod is None:
            try:
                await pool.create(api_path("v1", "pods", ns), forge_pod(sp))
            except ApiError as e:
                if e.already_exists:
                    return 0.5  # the old pod is still going away, or our cache lags
                raise
            log.info("created pod %s for its ShadowPod", key)
            return None
        if controller_uid(pod) != sp["metadata"]["uid"]:
            # A pod of an earlier ShadowPod with the same name: make room for the new one.
            await pool.delete(api_path("v1", "pods", ns, name), uid=pod["metadata"]["uid"])
            return 0.5
        if pod["metadata"].get("deletionTimestamp"):
            return None  # its DELETED event brings us back to re-create it
        await self._sync_metadata(sp, pod)
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if (sp.get("status") or {}).get("phase") != phase:
            # resourceVersion makes it conditional: a stale cache must never overwrite a terminal phase.
            rv = sp["metadata"]["resourceVersion"]
            await pool.patch(
                api_path(n.OFFLOADING, n.SHADOWPODS, ns, name, "status"),
                {"metadata": {"resourceVersion": rv}, "status": {"phase": phase}},
            )
        return None

    async def _sync_metadata(self, sp: Obj, pod: Obj) -> None:
        want = forge_pod(sp)["metadata"]
        have = pod["metadata"]
        patch: Obj = {}
        for field in ("labels", "annotations"):
            cur = have.get(field) or {}
            diff = {k: v for k, v in want[field].items() if cur.get(k) != v}
            if diff:
                patch[field] = diff
        if patch:
            await self.env.pool.patch(
                api_path("v1", "pods", have["namespace"], have["name"]), {"metadata": patch}
            )
