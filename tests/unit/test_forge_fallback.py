"""Table tests for reflectors.forge.fallback (LIQO §4.7)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from reflectors.forge import constants as c
from reflectors.forge.fallback import (
    FallbackAction,
    decide_fallback,
    fallback_message,
    fallback_status,
    fallback_warning_message,
)

NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
DS_OWNER = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "fluentbit", "uid": "u", "controller": True}
RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-5d9", "uid": "u", "controller": True}


def pod(
    phase: str | None = "Pending", *, terminating: bool = False, containers: bool = False
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if phase is not None:
        status["phase"] = phase
    if containers:
        status["containerStatuses"] = [
            {"name": "app", "ready": True, "restartCount": 0, "state": {"running": {}}}
        ]
    status["conditions"] = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-29T09:00:00Z"}
    ]
    metadata: dict[str, Any] = {"name": "agent-x", "namespace": "kube-system", "uid": "uid-1"}
    if terminating:
        metadata["deletionTimestamp"] = "2026-11-29T09:59:00Z"
    return {"metadata": metadata, "spec": {"nodeName": "c0123456789ab"}, "status": status}


@pytest.mark.parametrize(
    ("local", "expected"),
    [
        pytest.param(None, FallbackAction.NONE, id="gone-pod-nothing-to-do"),
        pytest.param(pod(terminating=True), FallbackAction.DELETE, id="terminating-pod-is-deleted"),
        pytest.param(
            pod("Failed", terminating=True), FallbackAction.DELETE, id="terminating-wins-over-terminal"
        ),
        pytest.param(pod("Succeeded"), FallbackAction.NONE, id="succeeded-is-final"),
        pytest.param(pod("Failed"), FallbackAction.NONE, id="failed-is-final"),
        pytest.param(
            pod("Pending"), FallbackAction.BACKOFF, id="pending-without-container-statuses-backs-off"
        ),
        pytest.param(pod(None), FallbackAction.BACKOFF, id="no-phase-is-treated-as-pending"),
        pytest.param(
            pod("Pending", containers=True), FallbackAction.ABORT, id="pending-with-container-statuses"
        ),
        pytest.param(pod("Running", containers=True), FallbackAction.ABORT, id="running-pod-is-aborted"),
        pytest.param(pod("Running"), FallbackAction.ABORT, id="running-without-statuses-is-aborted"),
        pytest.param(pod("Unknown"), FallbackAction.ABORT, id="unknown-phase-is-aborted"),
    ],
)
def test_decide_fallback(local: dict[str, Any] | None, expected: FallbackAction) -> None:
    assert decide_fallback(local) is expected


@pytest.mark.parametrize(
    ("local", "action", "phase", "reason"),
    [
        pytest.param(
            pod("Pending"), FallbackAction.BACKOFF, "Pending", "OffloadingBackOff", id="backoff-status"
        ),
        pytest.param(
            pod("Running", containers=True),
            FallbackAction.ABORT,
            "Failed",
            "OffloadingAborted",
            id="abort-status",
        ),
    ],
)
def test_fallback_status(local: dict[str, Any], action: FallbackAction, phase: str, reason: str) -> None:
    status = fallback_status(local, action, NOW)
    assert status is not None
    assert (status["phase"], status["reason"]) == (phase, reason)
    assert status["conditions"][0] == {
        "type": "PodScheduled",
        "status": "False",
        "reason": reason,
        "lastTransitionTime": "2026-11-29T10:00:00Z",
    }
    if action is FallbackAction.ABORT:
        assert status["containerStatuses"][0]["state"] == {"terminated": {"exitCode": 1, "reason": reason}}


@pytest.mark.parametrize("action", [FallbackAction.NONE, FallbackAction.DELETE], ids=["none", "delete"])
def test_fallback_status_only_for_rejections(action: FallbackAction) -> None:
    assert fallback_status(pod(), action, NOW) is None


def test_warning_for_a_pod_tells_how_to_offload_the_namespace() -> None:
    msg = fallback_warning_message(remote_cluster_id="c0123456789ab", namespace="my-team", daemonset=False)
    assert msg.startswith('Reflection to cluster "c0123456789ab" disabled for namespace "my-team".')
    for needle in (
        "NamespaceOffloading",
        "section 3.7",
        "liqoctl offload namespace my-team",
        "re-create the pod",
    ):
        assert needle in msg
    for needle in (
        "multicloud.io/pool",
        "DoesNotExist",
        "liqo.io/type=virtual-node",
        "spec.template.spec.affinity",
    ):
        assert needle in msg


def test_warning_for_a_daemonset_pod_tells_how_to_keep_it_off_virtual_nodes() -> None:
    msg = fallback_warning_message(remote_cluster_id="c0123456789ab", namespace="kube-system", daemonset=True)
    assert "DaemonSet" in msg
    assert "multicloud.io/pool and operator DoesNotExist" in msg
    assert "liqo.io/type=virtual-node" in msg
    assert "NamespaceOffloading" not in msg


@pytest.mark.parametrize(
    ("owners", "daemonset"),
    [
        pytest.param([DS_OWNER], True, id="daemonset-pod"),
        pytest.param([RS_OWNER], False, id="replicaset-pod"),
        pytest.param([], False, id="bare-pod"),
    ],
)
def test_fallback_message_picks_the_daemonset_variant(owners: list[dict[str, Any]], daemonset: bool) -> None:
    local = pod()
    local["metadata"]["ownerReferences"] = owners
    expected = fallback_warning_message(remote_cluster_id="rid", namespace="kube-system", daemonset=daemonset)
    assert fallback_message(local, "rid") == expected


def test_reasons_match_liqo() -> None:
    assert (c.REASON_OFFLOADING_BACKOFF, c.REASON_OFFLOADING_ABORTED) == (
        "OffloadingBackOff",
        "OffloadingAborted",
    )
