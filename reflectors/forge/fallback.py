"""Pods on the virtual node that may not be offloaded (LIQO §4.7): what to do, what to tell the owner."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from reflectors.forge import constants as c
from reflectors.forge.pods import (
    PHASE_FAILED,
    PHASE_PENDING,
    KubeObj,
    ReadObj,
    is_daemonset_pod,
    is_terminal,
    is_terminating,
    namespace_of,
    status_of,
)
from reflectors.forge.status import rejected_status


class FallbackAction(StrEnum):
    NONE = "none"  # gone, or already Succeeded/Failed: leave it alone
    DELETE = "delete"  # terminating: delete with grace 0 and a UID precondition
    BACKOFF = "backoff"  # never started: Pending/OffloadingBackOff, so it can still be offloaded later
    ABORT = "abort"  # had started: Failed/OffloadingAborted, so its controller re-creates it


# The status each rejecting action writes: (phase, reason).
REJECTIONS: dict[FallbackAction, tuple[str, str]] = {
    FallbackAction.BACKOFF: (PHASE_PENDING, c.REASON_OFFLOADING_BACKOFF),
    FallbackAction.ABORT: (PHASE_FAILED, c.REASON_OFFLOADING_ABORTED),
}


def decide_fallback(pod: ReadObj | None) -> FallbackAction:
    """Liqo's FallbackPodReflector decision.

    A pod that is Pending with no container statuses never ran: back off. Anything else that is not
    terminal had started: abort. A pod without a phase is treated as Pending (the API server always sets
    one; backing off is the reversible choice).
    """
    if pod is None:
        return FallbackAction.NONE
    if is_terminating(pod):
        return FallbackAction.DELETE
    if is_terminal(pod):
        return FallbackAction.NONE
    status = status_of(pod)
    phase = status.get("phase") or PHASE_PENDING
    if phase == PHASE_PENDING and not status.get("containerStatuses"):
        return FallbackAction.BACKOFF
    return FallbackAction.ABORT


def fallback_status(pod: ReadObj, action: FallbackAction, now: datetime) -> KubeObj | None:
    """The status to write for BACKOFF/ABORT (LocalRejectedPodStatus); None for the other actions."""
    rejection = REJECTIONS.get(action)
    if rejection is None:
        return None
    phase, reason = rejection
    return rejected_status(pod, phase, reason, now)


def fallback_message(pod: ReadObj, remote_cluster_id: str) -> str:
    """``fallback_warning_message`` for this pod (its namespace; DaemonSet or not)."""
    return fallback_warning_message(
        remote_cluster_id=remote_cluster_id, namespace=namespace_of(pod), daemonset=is_daemonset_pod(pod)
    )


def fallback_warning_message(*, remote_cluster_id: str, namespace: str, daemonset: bool) -> str:
    """Warning for the ``ReflectionDisabled`` event: why the pod cannot run on the pool and how to fix it.

    Users are told to select on ``multicloud.io/pool`` (GUIDE §4); Liqo's own label is named too, as the
    Liqo message names it, for readers of Liqo's documentation.
    """
    cluster, ns = c.go_quote(remote_cluster_id), c.go_quote(namespace)
    head = f"Reflection to cluster {cluster} disabled for namespace {ns}."
    affinity_fix = (
        "under `spec.template.spec.affinity.nodeAffinity` add a required term with key "
        f"{c.EXTEND_POOL_LABEL} and operator DoesNotExist, so that its pods are not placed on virtual nodes "
        f"(Liqo marks them with the label {c.TYPE_LABEL}={c.TYPE_VIRTUAL_NODE})."
    )
    if daemonset:
        return f"{head} DaemonSet pods cannot run on a Multicloud pool: {affinity_fix}"
    return (
        f'{head} The namespace is not offloaded: create the NamespaceOffloading named "offloading" in '
        f"namespace {ns} as in section 3.7 of the user guide (or run "
        f"`liqoctl offload namespace {namespace}`), then re-create the pod. "
        f"If this pod belongs to a DaemonSet, {affinity_fix}"
    )
