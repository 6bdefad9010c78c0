"""Pure pod status model: container states in, the kubelet-shaped ``status`` dict out.

Kept free of I/O so the phase and condition rules (kubelet ``getPhase`` and ``status.GenerateContainersReady
Condition``) can be unit-tested. Transition times are remembered so an unchanged pod yields an identical
dict, which is what lets the writer skip no-op PATCHes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]

OWNED_CONDITIONS = ("PodReadyToStartContainers", "Initialized", "ContainersReady", "Ready")


def container_id(pod_uid: str, name: str, attempt: int) -> str:
    return "fake://" + hashlib.sha256(f"{pod_uid}/{name}/{attempt}".encode()).hexdigest()


def image_id(image: str) -> str:
    """A digest reference as containerd reports it: docker.io/library/busybox@sha256:<hex>."""
    ref = image.split("@", 1)[0]
    name = ref
    last = ref.rsplit("/", 1)[-1]
    if ":" in last:
        name = ref[: len(ref) - len(last)] + last.split(":", 1)[0]
    first = name.split("/", 1)[0]
    if "/" not in name:
        name = "docker.io/library/" + name
    elif "." not in first and ":" not in first and first != "localhost":
        name = "docker.io/" + name
    return f"{name}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


@dataclass
class ContainerState:
    """What the fake runtime knows about one container; ``done`` means terminated for good."""

    name: str
    image: str
    init: bool = False
    sidecar: bool = False
    restart_count: int = 0
    state: Json = field(default_factory=lambda: {"waiting": {"reason": "ContainerCreating"}})
    last_state: Json = field(default_factory=dict)
    container_id: str = ""
    ready: bool = False
    done: bool = False
    # cpu/memory requests and limits a 1.33+ kubelet reports for a running container; without them the
    # apiserver refuses an in-place resize ("Pod running on node without support for resize")
    resources: Json = field(default_factory=dict)

    @property
    def running(self) -> bool:
        return "running" in self.state

    @property
    def ever_started(self) -> bool:
        return "running" in self.state or "terminated" in self.state or bool(self.last_state)

    @property
    def exit_code(self) -> int | None:
        term = self.state.get("terminated")
        return None if term is None else int(term.get("exitCode", 0))

    @property
    def failed(self) -> bool:
        return self.done and (self.exit_code or 0) != 0

    def to_status(self) -> Json:
        out: Json = {
            "name": self.name,
            "image": self.image,
            "imageID": image_id(self.image) if self.ever_started else "",
            "ready": self.ready,
            "restartCount": self.restart_count,
            "started": self.running,
            "state": self.state,
            "lastState": self.last_state,
        }
        if self.container_id:
            out["containerID"] = self.container_id
        if self.resources and self.running:
            out["resources"] = self.resources
        return out


def reported_resources(resources: Json | None) -> Json:
    """The cpu/memory part of a container's resources, as the kubelet reports it in its status."""
    out: Json = {}
    for kind in ("requests", "limits"):
        vals = {k: v for k, v in ((resources or {}).get(kind) or {}).items() if k in ("cpu", "memory")}
        if vals:
            out[kind] = vals
    return out


class ConditionBook:
    """Remembers lastTransitionTime per condition type, changing it only when the status flips."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[str, str]] = {}

    def make(self, ctype: str, ok: bool, now: str, reason: str = "", message: str = "") -> Json:
        status = "True" if ok else "False"
        prev = self._seen.get(ctype)
        since = prev[1] if prev and prev[0] == status else now
        self._seen[ctype] = (status, since)
        cond: Json = {"type": ctype, "status": status, "lastProbeTime": None, "lastTransitionTime": since}
        if reason:
            cond["reason"] = reason
        if message:
            cond["message"] = message
        return cond


def pod_phase(init: list[ContainerState], main: list[ContainerState]) -> str:
    """kubelet getPhase, restricted to what a fake runtime can reach."""
    if any(c.failed and not c.sidecar for c in init):
        return "Failed"
    if main and all(c.done for c in main):
        return "Failed" if any(c.failed for c in main) else "Succeeded"
    if any(not (c.done or (c.sidecar and c.running)) for c in init):
        return "Pending"
    if any(not c.ever_started for c in main):
        return "Pending"
    return "Running"


def _names(cs: list[ContainerState]) -> str:
    return "[" + " ".join(c.name for c in cs) + "]"


def conditions(
    book: ConditionBook,
    init: list[ContainerState],
    main: list[ContainerState],
    phase: str,
    sandbox: bool,
    now: str,
) -> list[Json]:
    out = [book.make("PodReadyToStartContainers", sandbox, now)]
    pending_init = [c for c in init if not ((c.done and not c.failed) or (c.sidecar and c.running))]
    if pending_init and phase not in ("Succeeded", "Failed"):
        out.append(
            book.make(
                "Initialized",
                False,
                now,
                "ContainersNotInitialized",
                f"containers with incomplete status: {_names(pending_init)}",
            )
        )
    else:
        out.append(book.make("Initialized", True, now))
    if phase in ("Succeeded", "Failed"):
        out.append(book.make("ContainersReady", False, now, "PodCompleted"))
        out.append(book.make("Ready", False, now, "PodCompleted"))
    else:
        unready = [c for c in main if not c.ready]
        if unready:
            msg = f"containers with unready status: {_names(unready)}"
            out.append(book.make("ContainersReady", False, now, "ContainersNotReady", msg))
            out.append(book.make("Ready", False, now, "ContainersNotReady", msg))
        else:
            out.append(book.make("ContainersReady", True, now))
            out.append(book.make("Ready", True, now))
    return out


def merge_conditions(existing: list[Json] | None, ours: list[Json], scheduled: Json) -> list[Json]:
    """A merge patch replaces the list, so carry over the conditions other writers own (the scheduler's
    PodScheduled, DisruptionTarget...); ``scheduled`` stands in when a pod was bound without a scheduler."""
    kept = [c for c in existing or [] if c.get("type") not in OWNED_CONDITIONS]
    if not any(c.get("type") == "PodScheduled" for c in kept):
        kept.append(scheduled)
    return kept + ours


def merge_patch(old: Json | None, new: Json) -> Json:
    """Top-level RFC 7386 diff: changed keys with their new value, dropped keys as null."""
    if old is None:
        return dict(new)
    patch: Json = {k: v for k, v in new.items() if old.get(k) != v}
    for k in old:
        if k not in new:
            patch[k] = None
    return patch
