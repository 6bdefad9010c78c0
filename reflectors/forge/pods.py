"""Small predicates and accessors over raw Kubernetes object dicts (the shapes caches hold)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeAlias

from reflectors.forge import constants as c

KubeObj: TypeAlias = dict[str, Any]
"""A Kubernetes object as decoded from JSON (camelCase keys)."""

ReadObj: TypeAlias = Mapping[str, Any]
"""A Kubernetes object the forge only reads; never mutated."""

PHASE_PENDING = "Pending"
PHASE_RUNNING = "Running"
PHASE_SUCCEEDED = "Succeeded"
PHASE_FAILED = "Failed"
TERMINAL_PHASES = frozenset({PHASE_SUCCEEDED, PHASE_FAILED})


def meta(obj: ReadObj | None) -> Mapping[str, Any]:
    if not obj:
        return {}
    m = obj.get("metadata")
    return m if isinstance(m, Mapping) else {}


def labels_of(obj: ReadObj | None) -> dict[str, str]:
    return dict(meta(obj).get("labels") or {})


def annotations_of(obj: ReadObj | None) -> dict[str, str]:
    return dict(meta(obj).get("annotations") or {})


def name_of(obj: ReadObj | None) -> str:
    return str(meta(obj).get("name") or "")


def namespace_of(obj: ReadObj | None) -> str:
    return str(meta(obj).get("namespace") or "")


def uid_of(obj: ReadObj | None) -> str:
    return str(meta(obj).get("uid") or "")


def spec_of(pod: ReadObj | None) -> Mapping[str, Any]:
    s = (pod or {}).get("spec")
    return s if isinstance(s, Mapping) else {}


def status_of(pod: ReadObj | None) -> Mapping[str, Any]:
    s = (pod or {}).get("status")
    return s if isinstance(s, Mapping) else {}


def phase_of(pod: ReadObj | None) -> str:
    return str(status_of(pod).get("phase") or "")


def pod_key(pod: ReadObj) -> str:
    """Work-queue key ``namespace/name`` (always the LOCAL namespace for local pods)."""
    return f"{namespace_of(pod)}/{name_of(pod)}"


def is_terminal(pod: ReadObj | None) -> bool:
    """Succeeded and Failed are final (liqo#3096): such a pod is never re-created remotely."""
    return phase_of(pod) in TERMINAL_PHASES


def is_terminating(obj: ReadObj | None) -> bool:
    return bool(meta(obj).get("deletionTimestamp"))


def is_daemonset_pod(pod: ReadObj | None) -> bool:
    """True when a DaemonSet controls the pod (such pods cannot run on a virtual node)."""
    for ref in meta(pod).get("ownerReferences") or ():
        if (
            ref.get("kind") == "DaemonSet"
            and str(ref.get("apiVersion", "")).startswith("apps/")
            and ref.get("controller") is True
        ):
            return True
    return False


def has_remote_unavailable_label(pod: ReadObj | None) -> bool:
    """Set by Liqo's podstatus-controller while the virtual node is not Ready (LIQO §2.3)."""
    return labels_of(pod).get(c.REMOTE_UNAVAILABLE_LABEL) == c.REMOTE_UNAVAILABLE_VALUE


def service_account_name(pod: ReadObj) -> str:
    return str(spec_of(pod).get("serviceAccountName") or "default")
