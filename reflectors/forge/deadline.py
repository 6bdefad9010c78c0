"""A pod's ``activeDeadlineSeconds``, enforced at home as a kubelet enforces it.

The ShadowPod carries the value the pod had when it was sent, and the pool's kubelet enforces that one. The
field is mutable (it may be set, or lowered, on a running pod), and the ShadowPod's spec is not: a lowered
deadline is therefore enforced here, from the local pod, as the kubelet's active deadline handler does.
"""

from __future__ import annotations

from datetime import datetime

from reflectors.forge.pods import PHASE_FAILED, KubeObj, ReadObj, status_of
from reflectors.forge.status import CONTAINER_STATUS_LISTS, terminate_container_state
from reflectors.forge.timefmt import rfc3339

__all__ = ["DEADLINE_EXCEEDED", "DEADLINE_EXCEEDED_MESSAGE", "deadline_exceeded_status", "seconds_left"]

# The kubelet's reason and message (pkg/kubelet/active_deadline.go), on the status and its Event.
DEADLINE_EXCEEDED = "DeadlineExceeded"
DEADLINE_EXCEEDED_MESSAGE = "Pod was active on the node longer than the specified deadline"


def seconds_left(local_pod: ReadObj, now: datetime) -> float | None:
    """Seconds until the pod's active deadline (<= 0: past it); None without a deadline or a start time."""
    deadline = (local_pod.get("spec") or {}).get("activeDeadlineSeconds")
    started = status_of(local_pod).get("startTime")
    if not isinstance(deadline, int) or isinstance(deadline, bool) or not isinstance(started, str):
        return None
    try:
        start = datetime.fromisoformat(started.replace("Z", "+00:00"))
    except ValueError:
        return None
    return deadline - (now - start).total_seconds()


def deadline_exceeded_status(local_pod: ReadObj, now: datetime) -> KubeObj:
    """The local status of a pod past its deadline: Failed/DeadlineExceeded with the kubelet's message, its
    containers terminated and not ready, the kubelet's True conditions False; others' conditions kept."""
    status: KubeObj = {**status_of(local_pod)}
    status["phase"] = PHASE_FAILED
    status["reason"] = DEADLINE_EXCEEDED
    status["message"] = DEADLINE_EXCEEDED_MESSAGE
    stamp = rfc3339(now)
    conditions = []
    for cond in status.get("conditions") or ():
        cond = dict(cond)
        if cond.get("type") in ("Ready", "ContainersReady") and cond.get("status") == "True":
            cond.update(status="False", reason="PodFailed", lastTransitionTime=stamp)
            cond.pop("message", None)
        conditions.append(cond)
    if conditions:
        status["conditions"] = conditions
    for list_name in CONTAINER_STATUS_LISTS:
        if status.get(list_name):
            status[list_name] = [dict(cs) for cs in status[list_name]]
            for cs in status[list_name]:
                terminate_container_state(cs, PHASE_FAILED, DEADLINE_EXCEEDED)
    return status
