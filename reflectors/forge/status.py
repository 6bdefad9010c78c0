"""Remote pod status -> local pod status (LIQO §4.6), and the statuses of rejected pods (§4.7)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from reflectors.forge import constants as c
from reflectors.forge.constants import go_quote
from reflectors.forge.jsoncopy import JSON_SCALARS, json_copy
from reflectors.forge.pods import (
    PHASE_FAILED,
    PHASE_SUCCEEDED,
    TERMINAL_PHASES,
    KubeObj,
    ReadObj,
    phase_of,
    status_of,
    uid_of,
)
from reflectors.forge.timefmt import rfc3339

CONTAINER_STATUS_LISTS = ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses")
# The conditions a kubelet owns (kubelet/types PodConditionsByKubelet, with the feature-gated two): these
# come from the pool's kubelet. Every other condition on the local pod is someone else's (a readiness-gate
# controller, the disruption controller) and stays as the API server has it, as a kubelet keeps it.
KUBELET_CONDITIONS: frozenset[str] = frozenset(
    {
        "PodScheduled",
        "Ready",
        "Initialized",
        "ContainersReady",
        "PodResizeInProgress",
        "PodResizePending",
        "PodReadyToStartContainers",
        "AllContainersRestarting",
    }
)
SHARED_CONDITIONS: frozenset[str] = frozenset({"DisruptionTarget"})  # set by the kubelet or by others
READINESS_GATES_NOT_READY = "ReadinessGatesNotReady"


def restarts_on_remote_change(
    local_pod: ReadObj, remote_pod: ReadObj, *, known_remote_uid: str | None = None, restarts: int = 0
) -> int:
    """The restart offset once ``remote_pod`` is seen; the caller then records ``uid_of(remote_pod)``.

    The provider re-creating the remote pod (new UID) is a restart the user must see: one more after a known
    UID. With no known UID (fresh vkbridge start) the offset is inferred from the statuses, so a restart of
    vkbridge does not reset the counts users already saw. The same UID keeps ``restarts``.
    """
    remote_uid = uid_of(remote_pod)
    if known_remote_uid == remote_uid:
        return restarts
    if known_remote_uid:
        return restarts + 1
    return infer_additional_restarts(status_of(local_pod), status_of(remote_pod))


def infer_additional_restarts(local_status: Mapping[str, Any], remote_status: Mapping[str, Any]) -> int:
    """``max(0, local.containerStatuses[0].restartCount - same container's remote restartCount)``."""
    local_statuses = local_status.get("containerStatuses") or []
    if not local_statuses:
        return 0
    first = local_statuses[0]
    for remote in remote_status.get("containerStatuses") or ():
        if remote.get("name") == first.get("name"):
            return max(0, int(first.get("restartCount") or 0) - int(remote.get("restartCount") or 0))
    return 0


def forge_local_status(
    local_pod: ReadObj,
    remote_pod: ReadObj,
    *,
    restarts: int,
    vk_pod_ip: str,
    disable_ip_reflection: bool,
    remote_unavailable: bool,
    now: datetime | None = None,
) -> KubeObj:
    """The local pod status: the remote status copied whole, with these changes.

    hostIP/hostIPs become the vkbridge pod IP (pool node IPs never leak); podIPs is reduced to podIP (no IP
    remapping: Extend has no cross-cluster network); restart counts get the ``restarts`` offset; with
    ``disable_ip_reflection`` the pod IPs are cleared; with ``remote_unavailable`` Ready is forced False.
    ``now`` stamps a Ready condition that turns False here; a condition already False locally keeps its time,
    so forging twice gives the same status.
    """
    status: KubeObj = json_copy(dict(status_of(remote_pod)))
    pod_ip = status.get("podIP") or ""
    if pod_ip:
        status["podIPs"] = [{"ip": pod_ip}]
    if vk_pod_ip:
        status["hostIP"] = vk_pod_ip
        status["hostIPs"] = [{"ip": vk_pod_ip}]
    else:
        status["hostIP"] = ""
        status["hostIPs"] = []
    for container in status.get("containerStatuses") or ():
        container["restartCount"] = int(container.get("restartCount") or 0) + restarts
    if disable_ip_reflection:
        status["podIP"] = ""
        status["podIPs"] = []
    if "conditions" in status or foreign_conditions(local_pod):
        status["conditions"] = merged_conditions(status.get("conditions") or [], local_pod)
    _observe_generation(status, local_pod, remote_pod)
    if remote_unavailable:
        _force_not_ready(status, status_of(local_pod), now)
    return status


def _force_not_ready(status: KubeObj, local_status: Mapping[str, Any], now: datetime | None) -> None:
    local_ready = _condition(local_status, "Ready")
    if (
        local_ready is not None
        and local_ready.get("status") == "False"
        and local_ready.get("lastTransitionTime")
    ):
        stamp: str | None = local_ready["lastTransitionTime"]
    else:
        stamp = rfc3339(now) if now is not None else None
    conditions = status.setdefault("conditions", [])
    ready = _condition(status, "Ready")
    if ready is None:
        ready = {"type": "Ready", "status": "False"}
        conditions.append(ready)
    elif ready.get("status") == "False":
        return
    ready["status"] = "False"
    if stamp is not None:
        ready["lastTransitionTime"] = stamp


def _observe_generation(status: KubeObj, local_pod: ReadObj, remote_pod: ReadObj) -> None:
    """``observedGeneration``, of the status and of the kubelet's conditions, in the local pod's terms, as a
    1.34+ kubelet reports the generation it acted on: the pool pod's own generation means nothing at home.

    Only where the pool's kubelet reports one (an older kubelet reports none, and none is made up: the
    status then is what Liqo's VK writes too, so neither rewrites the other's after a switch). The local
    generation once the pool's kubelet has caught up with its pod (its observedGeneration reaches the pool
    pod's generation), before that what the local pod said.
    """
    kubelet_conditions = [
        cond
        for cond in status.get("conditions") or ()
        if cond.get("type") in KUBELET_CONDITIONS and "observedGeneration" in cond
    ]
    local_gen = (local_pod.get("metadata") or {}).get("generation")
    if not isinstance(local_gen, int):
        status.pop("observedGeneration", None)
        for cond in kubelet_conditions:
            cond.pop("observedGeneration", None)
        return
    remote_gen = (remote_pod.get("metadata") or {}).get("generation")
    remote_seen = status_of(remote_pod).get("observedGeneration")
    caught_up = isinstance(remote_seen, int) and (
        not isinstance(remote_gen, int) or remote_seen >= remote_gen
    )
    local_status = status_of(local_pod)
    before = {
        cond.get("type"): cond.get("observedGeneration") for cond in local_status.get("conditions") or ()
    }
    if "observedGeneration" in status:
        _set_or_drop(
            status, "observedGeneration", local_gen if caught_up else local_status.get("observedGeneration")
        )
    for cond in kubelet_conditions:
        _set_or_drop(cond, "observedGeneration", local_gen if caught_up else before.get(cond.get("type")))


def _set_or_drop(obj: KubeObj, key: str, value: Any) -> None:
    if value is None:
        obj.pop(key, None)
    else:
        obj[key] = value


def foreign_conditions(local_pod: ReadObj) -> list[Any]:
    """The local pod's conditions that are not a kubelet's: someone else set them."""
    return [
        cond
        for cond in status_of(local_pod).get("conditions") or ()
        if cond.get("type") not in KUBELET_CONDITIONS
    ]


def merged_conditions(remote: list[Any], local_pod: ReadObj) -> list[Any]:
    """The pool kubelet's conditions, then the local pod's others, kept as they are (a kubelet keeps every
    condition it does not own). A condition both may set (DisruptionTarget) is the local one if there is
    one; a pool-side condition of no kubelet's (nobody here set it) is not brought home."""
    local = foreign_conditions(local_pod)
    local_types = {cond.get("type") for cond in local}
    pool = [
        cond
        for cond in remote
        if cond.get("type") in KUBELET_CONDITIONS
        or (cond.get("type") in SHARED_CONDITIONS and cond.get("type") not in local_types)
    ]
    return pool + local


def with_readiness_gates(status: KubeObj, local_pod: ReadObj, now: datetime) -> KubeObj:
    """Ready as a kubelet computes it with the pod's readiness gates: True only while the pool says Ready
    and every gate's condition (set on the local pod by its controller) is True; else False with the
    kubelet's reason and messages. The gates are never sent to the pool, where nothing would set them.

    The transition time is kept while Ready keeps its status, and is ``now`` when it changes here."""
    gates = [g.get("conditionType") for g in ((local_pod.get("spec") or {}).get("readinessGates") or ())]
    ready = _condition(status, "Ready")
    if not gates or ready is None or ready.get("status") != "True":
        return status
    unready = []
    for gate in gates:
        cond = _condition(status, gate)
        if cond is None:
            unready.append(f"corresponding condition of pod readiness gate {go_quote(gate)} does not exist.")
        elif cond.get("status") != "True":
            unready.append(
                f'the status of pod readiness gate {go_quote(gate)} is not "True", but {cond.get("status")}'
            )
    local_ready = _condition(status_of(local_pod), "Ready") or {}
    if unready:
        new = {
            "type": "Ready",
            "status": "False",
            "reason": READINESS_GATES_NOT_READY,
            "message": ", ".join(unready),
        }
    else:
        new = {k: v for k, v in ready.items() if k not in ("reason", "message")}
    if local_ready.get("status") == new["status"] and local_ready.get("lastTransitionTime"):
        new["lastTransitionTime"] = local_ready["lastTransitionTime"]
    elif new["status"] != ready.get("status") or local_ready.get("status") not in (None, new["status"]):
        new["lastTransitionTime"] = rfc3339(now)
    for key in ("observedGeneration", "lastProbeTime"):
        if key in ready:
            new.setdefault(key, ready[key])
    status["conditions"] = [new if cond is ready else cond for cond in status["conditions"]]
    return status


def _condition(status: Mapping[str, Any], kind: str) -> Any:
    for condition in status.get("conditions") or ():
        if condition.get("type") == kind:
            return condition
    return None


def rejected_status(local_pod: ReadObj, phase: str, reason: str, now: datetime) -> KubeObj:
    """Liqo's LocalRejectedPodStatus: the local status with ``phase``/``reason``; True conditions turn False.

    Every container status becomes not ready and, for a terminal ``phase``, terminated (exit code 1 if
    Failed, else 0) unless already terminated. Idempotent: applying it twice changes nothing more.
    """
    status: KubeObj = json_copy(dict(status_of(local_pod)))
    status["phase"] = phase
    status["reason"] = reason
    stamp = rfc3339(now)
    for condition in status.get("conditions") or ():
        if condition.get("status") == "True":
            condition["status"] = "False"
            condition["reason"] = reason
            condition["lastTransitionTime"] = stamp
    for list_name in CONTAINER_STATUS_LISTS:
        for container in status.get(list_name) or ():
            terminate_container_state(container, phase, reason)
    return status


def terminate_container_state(container_status: KubeObj, phase: str, reason: str) -> None:
    container_status["ready"] = False
    if phase in TERMINAL_PHASES and not (container_status.get("state") or {}).get("terminated"):
        container_status["state"] = {
            "terminated": {"exitCode": 1 if phase == PHASE_FAILED else 0, "reason": reason},
        }


def status_when_remote_missing(local_pod: ReadObj, shadow: ReadObj | None, now: datetime) -> KubeObj | None:
    """With no remote pod: mirror a terminal ShadowPod phase as RemotePodTerminated (PR #3255), else wait.

    Returns None to mean "leave the local status alone".
    """
    if shadow is None:
        return None
    phase = phase_of(shadow)
    if phase not in (PHASE_SUCCEEDED, PHASE_FAILED):
        return None
    return rejected_status(local_pod, phase, c.REASON_REMOTE_POD_TERMINATED, now)


def overrides_terminal(local_pod: ReadObj, new_status: Mapping[str, Any]) -> bool:
    """True if writing ``new_status`` would take a Succeeded/Failed local pod to another phase: terminal
    is final (invariant 4), so such a write must not happen, whatever the remote pod shows."""
    phase = phase_of(local_pod)
    return phase in TERMINAL_PHASES and new_status.get("phase") != phase


def status_equal(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Semantic equality of two statuses.

    Only JSON "omitempty" noise is ignored: an absent key equals null, "" and []. Everything else counts,
    including ``{}`` (a non-nil empty struct such as ``state.waiting``), timestamps and list order.
    """
    if a == b:
        return True  # equal as they are, so equal once normalized: a frequent case, at C speed
    return bool(_normalize(a or {}) == _normalize(b or {}))


def _normalize(value: Any) -> Any:
    kind = type(value)
    if kind in JSON_SCALARS:
        return value  # most of a status: no ABC checks for them
    if kind is dict or isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            normalized = _normalize(item)
            if not _is_empty(normalized):
                out[key] = normalized
        return out
    if isinstance(value, list | tuple):
        return [_normalize(item) for item in value]
    return value


def _is_empty(value: Any) -> bool:
    return value is None or (isinstance(value, str | list) and len(value) == 0)


def status_patch(current: Mapping[str, Any], new: Mapping[str, Any]) -> KubeObj:
    """Merge patch of the top-level status fields: new values, and null for those that disappeared (lists
    are replaced whole)."""
    patch: KubeObj = {k: v for k, v in new.items() if current.get(k) != v}
    patch.update({k: None for k in current if k not in new})
    return patch
