"""What would otherwise silently do nothing on a virtual node, said once on the local pod (issue 17 item 6).

Pure decisions and messages: which ephemeral containers (``kubectl debug``) were never sent, which in-place
resizes cannot reach the frozen ShadowPod spec (DESIGN invariant 5), and what the pool said about a ShadowPod
that has no remote pod yet. The pod reflector writes the events and status pieces built here.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, Final

from reflectors.forge.pods import KubeObj, ReadObj, spec_of, status_of
from reflectors.forge.timefmt import rfc3339

EVENT_EPHEMERAL_CONTAINER_UNSUPPORTED: Final = "EphemeralContainerUnsupported"
EVENT_RESIZE_INFEASIBLE: Final = "ResizeInfeasible"
EVENT_REMOTE_POD_MISSING: Final = "RemotePodMissing"
# The state.waiting.reason of an ephemeral container that will never start here.
REASON_EPHEMERAL_UNSUPPORTED: Final = "EphemeralContainersUnsupported"
# Kubernetes >= 1.33 reports a resize the node cannot do as this condition with reason Infeasible
# (status.resize is deprecated and no longer written by the kubelet).
CONDITION_RESIZE_PENDING: Final = "PodResizePending"
REASON_INFEASIBLE: Final = "Infeasible"


def ephemeral_unsupported_msg(name: str) -> str:
    return (
        f"ephemeral container {name!r} will not run: ephemeral containers are not supported on the virtual "
        "node (the pod runs on the pool and its spec is fixed at creation); use `kubectl exec`, or "
        "`kubectl debug --copy-to=<new-pod>` for a debug copy of the pod"
    )


def ephemeral_names(pod: ReadObj) -> list[str]:
    return [str(e.get("name")) for e in spec_of(pod).get("ephemeralContainers") or [] if e.get("name")]


def ephemeral_statuses(pod: ReadObj) -> list[KubeObj]:
    """A waiting status per ephemeral container, so ``kubectl debug`` stops waiting and says why."""
    out: list[KubeObj] = []
    for e in spec_of(pod).get("ephemeralContainers") or []:
        name = e.get("name")
        if not name:
            continue
        out.append(
            {
                "name": name,
                "image": e.get("image") or "",
                "imageID": "",
                "ready": False,
                "restartCount": 0,
                "state": {
                    "waiting": {
                        "reason": REASON_EPHEMERAL_UNSUPPORTED,
                        "message": ephemeral_unsupported_msg(str(name)),
                    }
                },
            }
        )
    return out


def container_resources(spec: Mapping[str, Any]) -> dict[str, Any]:
    """name -> resources of the containers (and init containers) plus the pod-level resources."""
    out: dict[str, Any] = {"": spec.get("resources") or {}}
    for key in ("initContainers", "containers"):
        for ctr in spec.get(key) or []:
            out[str(ctr.get("name"))] = ctr.get("resources") or {}
    return out


def resized(local_pod: ReadObj, shadow: ReadObj) -> list[str]:
    """Names of the containers whose resources differ from those sent to the pool ("" = pod level)."""
    want = container_resources(spec_of(local_pod))
    sent = container_resources(spec_of(shadow).get("pod") or {})
    return sorted(n for n, r in want.items() if n in sent and sent[n] != r)


def resize_infeasible_msg(names: list[str]) -> str:
    what = ", ".join("pod-level resources" if n == "" else f"container {n!r}" for n in names)
    return (
        f"in-place resize of {what} is not applied: the pod runs on the pool with the resources it was "
        "created with (the ShadowPod spec is fixed); delete and re-create the pod to change them"
    )


def resize_pending_condition(message: str, now: datetime) -> KubeObj:
    return {
        "type": CONDITION_RESIZE_PENDING,
        "status": "True",
        "reason": REASON_INFEASIBLE,
        "message": message,
        "lastTransitionTime": rfc3339(now),
    }


def with_notices(
    new_status: KubeObj, local_pod: ReadObj, resize_message: str | None, now: datetime
) -> KubeObj:
    """The forged status plus our own pieces the remote pod cannot carry: ephemeral container statuses and
    the PodResizePending condition (its lastTransitionTime kept while it holds)."""
    eph = ephemeral_statuses(local_pod)
    if eph:
        new_status["ephemeralContainerStatuses"] = eph
    if resize_message is not None:
        conditions = status_of(local_pod).get("conditions") or []
        old = next((x for x in conditions if x.get("type") == CONDITION_RESIZE_PENDING), None)
        cond = resize_pending_condition(resize_message, now)
        if old is not None and old.get("message") == resize_message:
            cond["lastTransitionTime"] = old.get("lastTransitionTime")
        conds = [x for x in new_status.get("conditions") or [] if x.get("type") != CONDITION_RESIZE_PENDING]
        new_status["conditions"] = [*conds, cond]
    return new_status


def remote_pod_missing_msg(shadow: ReadObj, waited: float) -> str:
    """What the pool said about a ShadowPod with no remote pod after ``waited`` seconds, or that it said
    nothing: its status (phase, reason, message, conditions). Pool Events about it reach the local pod
    through the event reflector already."""
    st = status_of(shadow)
    said: list[str] = []
    if st.get("phase"):
        said.append(f"phase {st['phase']}")
    for key in ("reason", "message"):
        if st.get(key):
            said.append(f"{key} {st[key]!r}")
    for cond in st.get("conditions") or []:
        text = f"condition {cond.get('type')}={cond.get('status')}"
        if cond.get("reason") or cond.get("message"):
            text += f" ({cond.get('reason') or ''}: {cond.get('message') or ''})"
        said.append(text)
    told = "; ".join(said) if said else "nothing (no phase, reason or conditions on the ShadowPod)"
    return (
        f"the pool accepted the ShadowPod but no remote pod exists after {waited:.0f}s; "
        f"the pool said: {told}. "
        "Check the pool's quotas, admission webhooks and ShadowPod controller"
    )
