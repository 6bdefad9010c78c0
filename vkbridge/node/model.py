"""The desired virtual Node, as pure functions of the settings, the VirtualNode and the grant.

Kept free of I/O so every rule (labels, taints, capacity, conditions, what is "ours") is table-tested.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reflectors.forge import constants as c

NOT_ALLOWED_TAINT = {"key": c.VIRTUAL_NODE_TOLERATION_KEY, "value": "true", "effect": "NoExecute"}
LAST_APPLIED_ANNOTATION = "vkbridge.multicloud.io/last-applied-node-metadata"
BASE_RESOURCES = ("cpu", "memory")


@dataclass(frozen=True)
class NodeInputs:
    """Everything the Node depends on; a change of any field re-applies the Node."""

    node_name: str
    remote_cluster_id: str
    node_ip: str
    listen_port: int
    kubelet_version: str
    extra_labels: Mapping[str, str] = field(default_factory=dict)
    extra_annotations: Mapping[str, str] = field(default_factory=dict)
    virtual_node: Mapping[str, Any] | None = None
    grant: Mapping[str, str] = field(default_factory=dict)


def base_labels(node_name: str, remote_cluster_id: str) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/role": "agent",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        c.TYPE_LABEL: c.TYPE_VIRTUAL_NODE,
        c.VIRTUAL_KUBELET_TYPE_LABEL: c.VIRTUAL_KUBELET_TYPE,  # the cluster autoscaler skips the node
        c.REMOTE_CLUSTER_ID_LABEL: remote_cluster_id,
        "node.kubernetes.io/exclude-from-external-load-balancers": "true",
        "alpha.service-controller.kubernetes.io/exclude-balancer": "true",
    }


def desired_labels(inp: NodeInputs) -> dict[str, str]:
    labels = base_labels(inp.node_name, inp.remote_cluster_id)
    labels.update(inp.extra_labels)
    spec = (inp.virtual_node or {}).get("spec") or {}
    labels.update(spec.get("labels") or {})
    labels[c.STORAGE_AVAILABLE_LABEL] = "true" if spec.get("storageClasses") else "false"
    return labels


def desired_annotations(inp: NodeInputs) -> dict[str, str]:
    annotations = dict(inp.extra_annotations)
    spec = (inp.virtual_node or {}).get("spec") or {}
    annotations.update(spec.get("annotations") or {})
    return annotations


def desired_taints(inp: NodeInputs) -> list[dict[str, str]]:
    taints = [dict(NOT_ALLOWED_TAINT)]
    spec = (inp.virtual_node or {}).get("spec") or {}
    for t in spec.get("taints") or []:
        taint = {k: str(v) for k, v in t.items() if k in ("key", "value", "effect") and v is not None}
        if taint not in taints:
            taints.append(taint)
    return taints


def capacity(inp: NodeInputs) -> dict[str, str]:
    """Capacity = allocatable = the grant, key by key (see docs/architecture.md, "the grant")."""
    return {k: str(v) for k, v in sorted(inp.grant.items())}


def resources_ready(grant: Mapping[str, str]) -> bool:
    """Liqo's rule: Ready needs a non-zero cpu and memory grant."""
    return all(_positive(grant.get(r)) for r in BASE_RESOURCES)


def _positive(value: str | None) -> bool:
    if value is None:
        return False
    digits = value.strip().lstrip("+")
    return bool(digits) and not digits.startswith("-") and any(c in "123456789" for c in digits.split("e")[0])


def conditions(inp: NodeInputs, now: str) -> list[dict[str, str]]:
    """Ready and the three pressure conditions, as Liqo computes them (LIQO section 2.2).

    NetworkUnavailable is never set: Extend runs with the network check off and has no
    cross-cluster network to report on.
    """
    ready = resources_ready(inp.grant)
    rows = [
        (
            "Ready",
            ready,
            ("KubeletReady", "The Liqo Virtual Kubelet is posting ready status"),
            ("KubeletNotReady", "The Liqo Virtual Kubelet is currently not ready"),
        ),
        (
            "MemoryPressure",
            not ready,
            ("RemoteClusterHasMemoryPressure", "The remote cluster is advertising no/insufficient resources"),
            ("RemoteClusterHasSufficientMemory", "The remote cluster is advertising sufficient resources"),
        ),
        (
            "DiskPressure",
            not ready,
            ("RemoteClusterHasDiskPressure", "The remote cluster is advertising no/insufficient resources"),
            ("RemoteClusterHasNoDiskPressure", "The remote cluster is advertising sufficient resources"),
        ),
        (
            "PIDPressure",
            not ready,
            ("RemoteClusterHasPIDPressure", "The remote cluster is advertising no/insufficient resources"),
            ("RemoteClusterHasNoPIDPressure", "The remote cluster is advertising sufficient resources"),
        ),
    ]
    out = []
    for ctype, is_true, true_rm, false_rm in rows:
        reason, message = true_rm if is_true else false_rm
        out.append(
            {
                "type": ctype,
                "status": "True" if is_true else "False",
                "reason": reason,
                "message": message,
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )
    return out


def merge_transition_times(new: list[dict[str, str]], current: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Keep lastTransitionTime of conditions whose status did not change (Kubernetes convention)."""
    by_type = {c.get("type"): c for c in current}
    out = []
    for cond in new:
        old = by_type.get(cond["type"])
        if old is not None and old.get("status") == cond["status"] and old.get("lastTransitionTime"):
            cond = {**cond, "lastTransitionTime": str(old["lastTransitionTime"])}
        out.append(cond)
    return out


def status_body(inp: NodeInputs, now: str, current_conditions: list[dict[str, Any]]) -> dict[str, Any]:
    """The server-side-apply body for nodes/status (we own exactly these fields)."""
    cap = capacity(inp)
    vn_spec = (inp.virtual_node or {}).get("spec") or {}
    status: dict[str, Any] = {
        "capacity": cap,
        "allocatable": cap,
        "conditions": merge_transition_times(conditions(inp, now), current_conditions),
        "addresses": [{"type": "InternalIP", "address": inp.node_ip}] if inp.node_ip else [],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": inp.listen_port}},
        "nodeInfo": {
            "architecture": "amd64",
            "operatingSystem": "linux",
            "kubeletVersion": inp.kubelet_version,
            "kubeProxyVersion": "",
            "bootID": "",
            "containerRuntimeVersion": "",
            "kernelVersion": "",
            "machineID": "",
            "osImage": "",
            "systemUUID": "",
        },
    }
    if vn_spec.get("images"):
        status["images"] = vn_spec["images"]
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": inp.node_name}, "status": status}


@dataclass(frozen=True)
class LastApplied:
    """What we applied last time, so we can remove what we no longer want and keep what others added."""

    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()

    def encode(self) -> str:
        return json.dumps(
            {"labels": dict(self.labels), "annotations": dict(self.annotations), "taints": list(self.taints)},
            sort_keys=True,
            separators=(",", ":"),
        )

    @staticmethod
    def decode(text: str | None) -> LastApplied:
        if not text:
            return LastApplied()
        try:
            raw = json.loads(text)
            return LastApplied(
                labels=dict(raw.get("labels") or {}),
                annotations=dict(raw.get("annotations") or {}),
                taints=tuple(tuple(t) for t in raw.get("taints") or []),
            )
        except (ValueError, TypeError, AttributeError):
            return LastApplied()


def _taint_key(t: Mapping[str, Any]) -> tuple[str, str, str]:
    return (str(t.get("key", "")), str(t.get("value", "") or ""), str(t.get("effect", "")))


def metadata_patch(inp: NodeInputs, node: Mapping[str, Any]) -> dict[str, Any] | None:
    """A merge patch (with resourceVersion, so it is conflict-safe) that restores our metadata and taints.

    Others' labels, annotations and taints are kept; ours that we no longer want are removed; ours that
    someone removed or edited are put back. Returns None when the Node already matches.
    """
    meta = node.get("metadata") or {}
    cur_labels: dict[str, str] = dict(meta.get("labels") or {})
    cur_ann: dict[str, str] = dict(meta.get("annotations") or {})
    cur_taints: list[dict[str, Any]] = list((node.get("spec") or {}).get("taints") or [])
    last = LastApplied.decode(cur_ann.get(LAST_APPLIED_ANNOTATION))

    want_labels = desired_labels(inp)
    want_ann = desired_annotations(inp)
    want_taints = desired_taints(inp)
    want_keys = [_taint_key(t) for t in want_taints]

    label_patch: dict[str, str | None] = {k: v for k, v in want_labels.items() if cur_labels.get(k) != v}
    label_patch.update({k: None for k in last.labels if k not in want_labels and k in cur_labels})
    ann_patch: dict[str, str | None] = {k: v for k, v in want_ann.items() if cur_ann.get(k) != v}
    ann_patch.update({k: None for k in last.annotations if k not in want_ann and k in cur_ann})

    # Our taints are identified by key+effect (a user editing the value of ours gets it restored).
    ours_by_key_effect = {(k, e) for k, _, e in want_keys} | {(k, e) for k, _, e in last.taints}
    kept = [
        t for t in cur_taints if (str(t.get("key", "")), str(t.get("effect", ""))) not in ours_by_key_effect
    ]
    new_taints = kept + [dict(t) for t in want_taints]
    taints_changed = sorted(map(_taint_key, new_taints)) != sorted(map(_taint_key, cur_taints))

    new_last = LastApplied(want_labels, want_ann, tuple(want_keys)).encode()
    if cur_ann.get(LAST_APPLIED_ANNOTATION) != new_last:
        ann_patch[LAST_APPLIED_ANNOTATION] = new_last
    if not label_patch and not ann_patch and not taints_changed:
        return None
    patch: dict[str, Any] = {"metadata": {"resourceVersion": meta.get("resourceVersion")}}
    if label_patch:
        patch["metadata"]["labels"] = label_patch
    if ann_patch:
        patch["metadata"]["annotations"] = ann_patch
    if taints_changed:
        patch["spec"] = {"taints": new_taints}
    return patch


def new_node(inp: NodeInputs) -> dict[str, Any]:
    """The Node to create (status is applied separately through the status subresource)."""
    labels = desired_labels(inp)
    annotations = desired_annotations(inp)
    taints = desired_taints(inp)
    annotations[LAST_APPLIED_ANNOTATION] = LastApplied(
        labels, dict(annotations), tuple(_taint_key(t) for t in taints)
    ).encode()
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": inp.node_name, "labels": labels, "annotations": annotations},
        "spec": {"taints": taints},
    }
