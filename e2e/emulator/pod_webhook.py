"""The consumer's pod mutating webhook "pod.mutate.liqo.io" (LIQO §3.3; pkg/webhooks/pod of Liqo v1.2).

Liqo registers it with namespaceSelector ``liqo.io/scheduling-enabled=true``, a label its namespaceoffloading
controller keeps on every namespace whose NamespaceOffloading has strategy LocalAndRemote or Remote. The
emulator's offloading controller does not write that label, so this module keeps it too, and the API
server only calls the webhook for pods created in offloaded namespaces.

For such a pod without ``runtimeClassName: liqo`` the webhook adds the toleration
``virtual-node.liqo.io/not-allowed Exists NoExecute`` and, from the NamespaceOffloading, a required node
affinity: with Remote every clusterSelector term (or one empty term) gets ``liqo.io/type In
[virtual-node]``; with LocalAndRemote and a clusterSelector the terms plus an alternative ``liqo.io/type
NotIn [virtual-node]``. An existing required node affinity is merged term by term (utils.MergeNodeSelector,
which keeps only matchExpressions).

Deliberate differences: Liqo appends the toleration even when the pod already has it; here it is not
duplicated. failurePolicy is Ignore (Liqo's chart default is Fail), so a dead emulator never blocks pods.
With no NamespaceOffloading in a labelled namespace Liqo denies the pod (error 500); its finalizer removes
the label before the object goes, so it never meets that case, while the emulator (no finalizer) can for a
moment, and admits the pod as is.
"""

from __future__ import annotations

import base64
import copy
import datetime as dt
import json
import logging
from typing import Any

from . import names as n
from .context import Env
from .kube import Obj, api_path
from .runtime import Controller
from .webhook import WebhookServer

log = logging.getLogger(__name__)

CONFIG_NAME = "liqo-webhook"
WEBHOOK_NAME = "pod.mutate.liqo.io"
WEBHOOK_PATH = "/mutate/pod"
SCHEDULING_LABEL = "liqo.io/scheduling-enabled"
LIQO_RUNTIME_CLASS = "liqo"
TYPE_LABEL = "liqo.io/type"
TYPE_NODE = "virtual-node"
VIRTUAL_NODE_TOLERATION: Obj = {
    "key": "virtual-node.liqo.io/not-allowed",
    "operator": "Exists",
    "effect": "NoExecute",
}
LOCAL, REMOTE, LOCAL_AND_REMOTE = "Local", "Remote", "LocalAndRemote"
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
# The serving certificate must outlive the emulator whatever --cert-lifetime says (that is for clients).
_SERVING_LIFETIME = dt.timedelta(days=365)


class MutationError(ValueError):
    """The NamespaceOffloading asks for something Liqo cannot build (an unknown strategy)."""


# ---- mutations.go ------------------------------------------------------------------------------------


def schedules_remotely(nso: Obj | None) -> bool:
    """Whether Liqo labels the namespace for the webhook (namespaceoffloading_controller.go Reconcile)."""
    if nso is None or nso["metadata"].get("deletionTimestamp"):
        return False
    return (nso.get("spec") or {}).get("podOffloadingStrategy") in (LOCAL_AND_REMOTE, REMOTE)


def imposed_node_selector(nso: Obj) -> Obj | None:
    """createNodeSelectorFromNamespaceOffloading: None means "leave the pod's affinity alone"."""
    spec = nso.get("spec") or {}
    strategy = spec.get("podOffloadingStrategy")
    terms: list[Obj] = copy.deepcopy((spec.get("clusterSelector") or {}).get("nodeSelectorTerms") or [])
    if strategy == REMOTE:
        terms = terms or [{}]
        for term in terms:
            term["matchExpressions"] = [
                *(term.get("matchExpressions") or []),
                {"key": TYPE_LABEL, "operator": "In", "values": [TYPE_NODE]},
            ]
        return {"nodeSelectorTerms": terms}
    if strategy == LOCAL_AND_REMOTE:
        if not terms:
            return None
        local = {"matchExpressions": [{"key": TYPE_LABEL, "operator": "NotIn", "values": [TYPE_NODE]}]}
        return {"nodeSelectorTerms": [*terms, local]}
    if strategy == LOCAL:
        return None
    raise MutationError(f"unknown PodOffloadingStrategyType {strategy!r}")


def merge_node_selector(first: Obj, second: Obj) -> Obj:
    """utils.MergeNodeSelector: (A||B) && (C||D) -> A&&C || A&&D || B&&C || B&&D; matchFields are dropped."""
    terms = []
    for a in first.get("nodeSelectorTerms") or []:
        for b in second.get("nodeSelectorTerms") or []:
            exprs = copy.deepcopy([*(a.get("matchExpressions") or []), *(b.get("matchExpressions") or [])])
            terms.append({"matchExpressions": exprs} if exprs else {})
    return {"nodeSelectorTerms": terms}


def with_node_selector(affinity: Obj | None, imposed: Obj) -> Obj:
    """fillPodWithTheNewNodeSelector: the pod's affinity with the imposed selector set or merged in."""
    out = copy.deepcopy(affinity or {})
    node_affinity = out.get("nodeAffinity")
    if node_affinity is None:
        out["nodeAffinity"] = {REQUIRED: imposed}
    elif not (node_affinity.get(REQUIRED) or {}).get("nodeSelectorTerms"):
        node_affinity[REQUIRED] = imposed
    else:
        node_affinity[REQUIRED] = merge_node_selector(node_affinity[REQUIRED], imposed)
    return out


def _same_toleration(a: Obj, b: Obj) -> bool:
    def norm(t: Obj) -> tuple[Any, ...]:
        return (t.get("key", ""), t.get("operator") or "Equal", t.get("value", ""), t.get("effect", ""),
                t.get("tolerationSeconds"))  # fmt: skip

    return norm(a) == norm(b)


def mutate(nso: Obj, pod: Obj, runtime_class: str = LIQO_RUNTIME_CLASS) -> Obj:
    """mutatePod: the pod spec fields to replace (empty when the pod stays as it is)."""
    spec = pod.get("spec") or {}
    strategy = (nso.get("spec") or {}).get("podOffloadingStrategy")
    if strategy == LOCAL or spec.get("runtimeClassName") == runtime_class:
        return {}
    if strategy not in (REMOTE, LOCAL_AND_REMOTE):
        raise MutationError(f"unknown PodOffloadingStrategyType {strategy!r}")
    changes: Obj = {}
    tolerations = list(spec.get("tolerations") or [])
    if not any(_same_toleration(t, VIRTUAL_NODE_TOLERATION) for t in tolerations):
        changes["tolerations"] = [*tolerations, dict(VIRTUAL_NODE_TOLERATION)]
    imposed = imposed_node_selector(nso)
    if imposed is not None:
        changes["affinity"] = with_node_selector(spec.get("affinity"), imposed)
    return changes


def json_patch(changes: Obj) -> list[Obj]:
    """RFC 6902 "add" on an object member replaces it, so this works whether the field was set or not."""
    return [{"op": "add", "path": f"/spec/{field}", "value": value} for field, value in changes.items()]


# ---- the webhook ------------------------------------------------------------------------------------

_WEBHOOK: Obj = {
    "name": WEBHOOK_NAME,
    "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}],
    "namespaceSelector": {"matchLabels": {SCHEDULING_LABEL: "true"}},
    "failurePolicy": "Ignore",
}


class PodWebhook:
    def __init__(self, env: Env) -> None:
        if env.consumer_signer is None:
            raise ValueError("the pod webhook needs the consumer CA (--consumer-ca-cert/--consumer-ca-key)")
        self.env = env
        self.server = WebhookServer(
            env.consumer, "MutatingWebhookConfiguration", CONFIG_NAME, WEBHOOK_PATH, env.consumer_signer
        )
        self.nsos = env.informer(env.consumer, api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS))
        self.label_ctrl = Controller("pod-webhook-scheduling-label", self.reconcile_label)
        self.nsos.on_change(lambda o: self.label_ctrl.enqueue(o["metadata"]["namespace"]))

    @property
    def controllers(self) -> list[Controller]:
        return [self.label_ctrl]

    @property
    def port(self) -> int:
        return self.server.port

    def nso(self, namespace: str) -> Obj | None:
        return self.nsos.get(f"{namespace}/{n.OFFLOADING_NAME}")

    async def reconcile_label(self, namespace: str) -> float | None:
        """Keep liqo.io/scheduling-enabled=true exactly on namespaces that offload pods."""
        path = api_path("v1", "namespaces", name=namespace)
        ns = await self.env.consumer.get_or_none(path)
        if ns is None:
            return None
        want = schedules_remotely(self.nso(namespace))
        has = (ns["metadata"].get("labels") or {}).get(SCHEDULING_LABEL) == "true"
        if want != has:
            await self.env.consumer.patch(
                path, {"metadata": {"labels": {SCHEDULING_LABEL: "true" if want else None}}}
            )
            log.info("namespace %s: %s %s", namespace, "added" if want else "removed", SCHEDULING_LABEL)
        return None

    def review(self, req: Obj) -> Obj:
        """One AdmissionReview request -> its response (without uid), as podwh.Handle answers."""
        pod = req.get("object")
        if req.get("operation") != "CREATE" or not isinstance(pod, dict):
            return {"allowed": True}
        nso = self.nso(req.get("namespace") or "")
        if nso is None:
            log.debug("pod webhook: no NamespaceOffloading in %s; admitted as is", req.get("namespace"))
            return {"allowed": True}
        try:
            changes = mutate(nso, pod)
        except MutationError as e:
            log.warning("pod webhook: %s/%s: %s", req.get("namespace"), req.get("name"), e)
            return {"allowed": False, "status": {"code": 500, "message": "failed constructing pod mutation"}}
        if not changes:
            return {"allowed": True}
        patch = base64.b64encode(json.dumps(json_patch(changes)).encode()).decode()
        return {"allowed": True, "patchType": "JSONPatch", "patch": patch}

    def _answer(self, req: Obj) -> Obj:
        try:
            return self.review(req)
        except Exception as e:  # a malformed object must not crash the server; say why
            log.exception("pod webhook: review failed")
            return {"allowed": False, "status": {"code": 400, "message": f"emulated pod webhook error: {e}"}}

    async def start(self) -> None:
        await self.server.serve(self._answer, _SERVING_LIFETIME)
        await self.server.register({"liqo.io/webhook": "true"}, _WEBHOOK)
        log.info("pod webhook serving on %s", self.server.url)

    async def stop(self) -> None:
        await self.server.stop()
