"""What the pod reflector remembers about each local pod between handles, and the one-time notices that
memory keeps from repeating (a Warning per change, never per handle).

Never persisted: a restart rebuilds it from the caches, so every notice here may be told once more after
a restart, never more often.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from reflectors.context import ReflectionContext
from reflectors.forge import constants as c
from reflectors.forge import notices as fn
from reflectors.forge import pods as fp
from reflectors.forge.references import Reference, not_found_events
from reflectors.forge.shadowpod import ignored_apiserver_override
from reflectors.forge.status import status_equal
from vkbridge.kube.workqueue import RequeueAfter
from vkbridge.logs import get_logger

log = get_logger("reflectors.pods")


@dataclass(slots=True)
class PodInfo:
    """What we remember about one local pod between handles (never persisted: rebuilt on restart)."""

    first_seen: float = field(default_factory=time.monotonic)
    created_at: float | None = None
    shadow_seen: bool = False
    remote_uid: str | None = None
    restarts: int = 0
    remote_running_seen: float | None = None
    running_logged: bool = False
    pending_change_since: float | None = None
    # (local resourceVersion written over, status written) until the cache shows the write: a handle run
    # by a pool event before our own write comes back must not write the same status again
    status_written: tuple[str, dict[str, Any]] | None = None
    metadata_sig: int | None = None  # hash of what the ShadowPod's metadata was last checked against
    waiting_message: str | None = None
    config_message: str | None = None
    hinted_no_requests: bool = False
    local_uid: str | None = None  # the local pod this memory is about (a same-name replacement resets it)
    replacing: str | None = None  # UID of an earlier pod's ShadowPod being deleted before ours is created
    gate_message: str | None = None
    told_apiserver_ignored: bool = False
    # Ephemeral containers already warned about (a frozenset: the empty one is shared, as few pods have any).
    told_ephemeral: frozenset[str] = frozenset()
    resize_generation: Any = None  # metadata.generation last checked for an in-place resize
    resize_message: str | None = None  # why the current resize is Infeasible (None: no resize pending)
    no_remote_since: float | None = None  # ShadowPod seen without a remote pod since
    told_no_remote: bool = False
    # Our last ShadowPod create got no answer (timeout, reset, 5xx): the pool may hold it, so its share stays
    # held and a read settles it before anything else is decided (sent again, or the share freed).
    create_unanswered: bool = False
    finished: bool = False  # a Succeeded/Failed status went home: nothing is ever sent for this pod again

    def unconfirmed(self) -> bool:
        """Might the pool hold a ShadowPod of ours that our cache has not shown (created a moment ago, or a
        create that got no answer)? Then the pool is asked before the pod's share is freed."""
        return self.create_unanswered or (self.created_at is not None and not self.shadow_seen)


def already_written(info: PodInfo, local_rv: str, new: Mapping[str, Any]) -> bool:
    """True if ``new`` is the status we last wrote and the cached local pod predates that write (its
    resourceVersion is the one we wrote over). Forgets the write once the cache has moved past it."""
    if info.status_written is None:
        return False
    over_rv, written = info.status_written
    if local_rv != over_rv:
        info.status_written = None
        return False
    return status_equal(written, dict(new))


def ms(seconds: float) -> str:
    """A duration for the log: milliseconds below 10 s."""
    return f"{seconds * 1000:.0f}ms" if seconds < 10 else f"{seconds:.1f}s"


# ---------------------------------------------------------------------------------------------- notices


def tell_not_found(
    ctx: ReflectionContext, local: Mapping[str, Any], absent: tuple[Reference, ...], *, optional: bool
) -> None:
    """The upstream virtual-kubelet's Mandatory*/Optional*NotFound events, beside Liqo's."""
    for etype, reason, message in not_found_events(absent, optional=optional):
        ctx.recorder.event(local, etype, reason, message)


def tell_not_applied(
    ctx: ReflectionContext, local: Mapping[str, Any], shadow: Mapping[str, Any], info: PodInfo
) -> None:
    """One Warning per ephemeral container (never sent: `kubectl debug`) and per in-place resize (the
    ShadowPod spec is frozen, invariant 5). Cheap on the hot path: a resize is looked for only when the
    pod's generation moved (it counts spec changes since Kubernetes 1.34)."""
    if fp.spec_of(local).get("ephemeralContainers"):
        for name in fn.ephemeral_names(local):
            if name not in info.told_ephemeral:
                info.told_ephemeral |= {name}
                reason, msg = fn.EVENT_EPHEMERAL_CONTAINER_UNSUPPORTED, fn.ephemeral_unsupported_msg(name)
                ctx.recorder.event(local, c.EVENT_TYPE_WARNING, reason, msg)
    generation = fp.meta(local).get("generation")
    if generation is not None and generation == info.resize_generation:
        return
    info.resize_generation = generation
    names = fn.resized(local, shadow)
    message = fn.resize_infeasible_msg(names) if names else None
    if message is not None and message != info.resize_message:
        ctx.recorder.event(local, c.EVENT_TYPE_WARNING, fn.EVENT_RESIZE_INFEASIBLE, message)
    info.resize_message = message


def tell_remote_pod_missing(
    ctx: ReflectionContext, local: Mapping[str, Any], shadow: Mapping[str, Any], info: PodInfo, after: float
) -> RequeueAfter | None:
    """One Warning when the pool accepted the ShadowPod but made no remote pod within ``after`` seconds."""
    if info.told_no_remote:
        return None
    now = time.monotonic()
    if info.no_remote_since is None:
        info.no_remote_since = now
    waited = now - info.no_remote_since
    if waited < after:
        return RequeueAfter(after - waited)
    info.told_no_remote = True
    message = fn.remote_pod_missing_msg(shadow, waited)
    ctx.recorder.event(local, c.EVENT_TYPE_WARNING, fn.EVENT_REMOTE_POD_MISSING, message)
    log.warning("ShadowPod has no remote pod on the pool", pod=fp.name_of(local), waited=ms(waited))
    return None


def tell_ignored_apiserver_override(ctx: ReflectionContext, local: Mapping[str, Any], info: PodInfo) -> None:
    """``liqo.io/api-server-support: remote`` while support is off is ignored: say so on the pod once."""
    message = ignored_apiserver_override(ctx.apiserver_support, fp.annotations_of(local))
    if message is None or info.told_apiserver_ignored:
        return
    info.told_apiserver_ignored = True
    log.warning("pod annotation ignored", pod=fp.pod_key(local), reason=message)
    ctx.recorder.event(local, c.EVENT_TYPE_WARNING, c.EVENT_APISERVER_SUPPORT_IGNORED, message)
