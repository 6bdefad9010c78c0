"""The desired virtual Node: labels, taints, capacity, conditions, and drift repair."""

from __future__ import annotations

import json
from typing import Any

from vkbridge.node import model

SLUG = "c0123456789ab"
VN = {
    "spec": {
        "labels": {"multicloud.io/pool": SLUG, "liqo.io/remote-cluster-id": SLUG},
        "taints": [{"key": "multicloud.io/pool", "value": SLUG, "effect": "NoSchedule"}],
    }
}
GRANT = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}


def inputs(**kw: Any) -> model.NodeInputs:
    base: dict[str, Any] = dict(
        node_name=SLUG,
        remote_cluster_id=SLUG,
        node_ip="10.1.2.3",
        listen_port=10250,
        kubelet_version="v1.36.3",
        virtual_node=VN,
        grant=GRANT,
    )
    base.update(kw)
    return model.NodeInputs(**base)


def test_labels_are_liqo_base_plus_virtualnode_plus_extra() -> None:
    labels = model.desired_labels(inputs(extra_labels={"team": "a"}))
    assert labels["liqo.io/type"] == "virtual-node"
    assert labels["kubernetes.io/hostname"] == SLUG
    assert labels["multicloud.io/pool"] == SLUG
    assert labels["team"] == "a"
    assert labels["storage.liqo.io/available"] == "false"


def test_the_node_is_labelled_type_virtual_kubelet_so_the_cluster_autoscaler_leaves_it_out() -> None:
    # cluster-autoscaler's VirtualKubeletNodeFilter matches exactly this key and value; Liqo after v1.2 sets it.
    assert model.desired_labels(inputs())["type"] == "virtual-kubelet"
    assert model.desired_labels(inputs(virtual_node={"spec": {"labels": {"type": "gpu"}}}))["type"] == "gpu"


def test_taints_are_not_allowed_plus_pool_taint() -> None:
    taints = model.desired_taints(inputs())
    assert taints == [
        {"key": "virtual-node.liqo.io/not-allowed", "value": "true", "effect": "NoExecute"},
        {"key": "multicloud.io/pool", "value": SLUG, "effect": "NoSchedule"},
    ]


def test_capacity_equals_allocatable_equals_grant() -> None:
    body = model.status_body(inputs(), "2026-01-01T00:00:00Z", [])
    assert body["status"]["capacity"] == GRANT
    assert body["status"]["allocatable"] == GRANT
    assert body["status"]["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 10250}}
    assert body["status"]["addresses"] == [{"type": "InternalIP", "address": "10.1.2.3"}]


def test_ready_needs_cpu_and_memory_in_grant() -> None:
    ready = {c["type"]: c for c in model.conditions(inputs(), "t")}
    assert ready["Ready"]["status"] == "True" and ready["Ready"]["reason"] == "KubeletReady"
    assert ready["MemoryPressure"]["status"] == "False"
    empty = {c["type"]: c for c in model.conditions(inputs(grant={"cpu": "0", "memory": "1Gi"}), "t")}
    assert empty["Ready"]["status"] == "False"
    assert empty["DiskPressure"]["status"] == "True"
    assert "NetworkUnavailable" not in empty


def test_transition_time_kept_when_status_unchanged() -> None:
    current = [{"type": "Ready", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]
    body = model.status_body(inputs(), "2026-01-01T00:00:00Z", current)
    ready = next(c for c in body["status"]["conditions"] if c["type"] == "Ready")
    assert ready["lastTransitionTime"] == "2020-01-01T00:00:00Z"
    assert ready["lastHeartbeatTime"] == "2026-01-01T00:00:00Z"


def test_fresh_node_needs_no_patch() -> None:
    node = model.new_node(inputs())
    node["metadata"]["resourceVersion"] = "5"
    assert model.metadata_patch(inputs(), node) is None


def test_removed_pool_taint_is_restored_and_foreign_taints_kept() -> None:
    node = model.new_node(inputs())
    node["metadata"]["resourceVersion"] = "5"
    node["spec"]["taints"] = [
        node["spec"]["taints"][0],
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
    ]
    patch = model.metadata_patch(inputs(), node)
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == "5"
    keys = {(t["key"], t["effect"]) for t in patch["spec"]["taints"]}
    assert ("multicloud.io/pool", "NoSchedule") in keys
    assert ("node.kubernetes.io/unreachable", "NoExecute") in keys


def test_edited_pool_taint_value_is_restored() -> None:
    node = model.new_node(inputs())
    node["metadata"]["resourceVersion"] = "5"
    node["spec"]["taints"][1]["value"] = "other"
    patch = model.metadata_patch(inputs(), node)
    assert patch is not None
    assert {"key": "multicloud.io/pool", "value": SLUG, "effect": "NoSchedule"} in patch["spec"]["taints"]
    assert not any(t.get("value") == "other" for t in patch["spec"]["taints"])


def test_foreign_label_kept_our_removed_label_restored() -> None:
    node = model.new_node(inputs())
    node["metadata"]["resourceVersion"] = "5"
    node["metadata"]["labels"]["someone/else"] = "x"
    del node["metadata"]["labels"]["multicloud.io/pool"]
    patch = model.metadata_patch(inputs(), node)
    assert patch is not None
    assert patch["metadata"]["labels"] == {"multicloud.io/pool": SLUG}


def test_label_we_no_longer_want_is_removed() -> None:
    node = model.new_node(inputs(extra_labels={"old": "1"}))
    node["metadata"]["resourceVersion"] = "5"
    patch = model.metadata_patch(inputs(), node)
    assert patch is not None
    assert patch["metadata"]["labels"] == {"old": None}
    last = json.loads(patch["metadata"]["annotations"][model.LAST_APPLIED_ANNOTATION])
    assert "old" not in last["labels"]
