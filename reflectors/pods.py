"""Local Pod <-> ShadowPod on the pool, and the remote Pod's status back home.

Level-based (DESIGN §2): `handle` reads the local pod and the pair's caches, never an event payload,
so any key can be re-queued at any time. The order of checks follows Liqo's `Handle` (LIQO §4.3), with
the grant checked before anything is sent, and remote writes parked while the pool is away.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

from reflectors.charges import PodCharges
from reflectors.context import ReflectionContext
from reflectors.forge import constants as c
from reflectors.forge import notices as fn
from reflectors.forge import pods as fp
from reflectors.forge.deadline import (
    DEADLINE_EXCEEDED,
    DEADLINE_EXCEEDED_MESSAGE,
    deadline_exceeded_status,
    seconds_left,
)
from reflectors.forge.references import Reference
from reflectors.forge.shadowpod import (
    controlling_shadow_uid,
    forge_shadowpod,
    is_stale_shadow,
    local_pod_uid_of,
    metadata_patch,
    needs_update,
    remote_pod_of,
)
from reflectors.forge.status import (
    foreign_conditions,
    forge_local_status,
    overrides_terminal,
    rejected_status,
    restarts_on_remote_change,
    status_equal,
    status_patch,
    with_readiness_gates,
)
from reflectors.generic import outcome_unknown, pool_failure, require_pool
from reflectors.pairs import NamespacePair
from reflectors.podinfo import (
    PodInfo,
    already_written,
    ms,
    tell_ignored_apiserver_override,
    tell_not_applied,
    tell_not_found,
    tell_remote_pod_missing,
)
from vkbridge.grant import Admission, pod_requests
from vkbridge.kube.cache import Cache, object_key
from vkbridge.kube.client import PODS, SHADOWPODS, ApiError
from vkbridge.kube.workqueue import RequeueAfter
from vkbridge.logs import get_logger

log = get_logger("reflectors.pods")

# Pending -> Pending status changes (scheduled, container creating, image pulling) are held for this
# long, so a pod that starts within it costs one status write (Running), not two or three; a pod stuck
# Pending (ImagePullBackOff) shows why within this delay. Running and terminal states go at once.
PENDING_COALESCE_SECONDS = 3.0
# After we create a ShadowPod, our cache may lag: do not re-create it during this window.
CREATION_GRACE_SECONDS = 30.0
# A pod held before admission is re-queued when the gate lifts; this is only the safety net.
ADMISSION_GATE_RETRY_SECONDS = 30.0
# A ShadowPod the pool accepted with no remote pod after this long gets one Warning on the local pod
# (liqo#2603, "Pending forever"); documented in docs/operations.md.
REMOTE_POD_MISSING_SECONDS = 30.0


class ConfigurationPort(Protocol):
    """The configuration reflector as the pod reflector sees it (a sibling module: no import)."""

    async def ensure_for_pod(self, pair_local: str, pod: Mapping[str, Any]) -> list[str]: ...

    def track_pod(self, pair_local: str, pod: Mapping[str, Any]) -> None: ...

    def release_pod(self, pod_key: str) -> None: ...

    def missing_message(self, missing: Iterable[str]) -> str: ...

    def absent_references(self, pod_key: str) -> tuple[Reference, ...]: ...


class PodReflector:
    def __init__(
        self,
        ctx: ReflectionContext,
        local_pods: Cache,
        admission: Admission,
        configuration: ConfigurationPort,
    ) -> None:
        self.ctx = ctx
        self.local_pods = local_pods
        self.admission = admission
        # At most one charge per pod name, by UID: a same-name replacement never inherits its predecessor's.
        self.charges = PodCharges(admission)
        self.configuration = configuration
        self.infos: dict[str, PodInfo] = {}
        # Why a new ShadowPod must wait before admission (None: it may go); the engine sets it.
        self.admission_gate: Callable[[str], str | None] = lambda _key: None
        # When each pod first reached our cache bound to the node: the outbound latency counts the time it
        # waited in the queue too, not only our handling of it.
        self.arrived: dict[str, float] = {}
        self.remote_pod_missing_after = REMOTE_POD_MISSING_SECONDS
        local_pods.subscribe(self._on_local)

    @property
    def charged(self) -> dict[str, str]:
        """Local pod key -> its charge's key in the ledger (the local pod's UID)."""
        return self.charges.charged

    def _on_local(self, _type: str, old: Any, new: Any) -> None:
        """Stamps each pod's arrival (before the engine queues it); forgets a pod that went unhandled."""
        obj = new if new is not None else old
        if obj is None:
            return
        key = object_key(obj)
        if new is None:
            self.arrived.pop(key, None)  # never handled by us (its namespace was not paired)
        elif old is None and key not in self.infos:
            self.arrived[key] = time.monotonic()

    # ------------------------------------------------------------------------------------------ entry

    async def handle(self, key: str, pair: NamespacePair) -> RequeueAfter | None:
        _, name = key.split("/", 1)
        local = self.local_pods.get(key)
        shadow = pair.shadows.get(f"{pair.remote}/{name}")
        remote = pair.remote_pods.get(f"{pair.remote}/{name}")

        if local is None:
            info = self.infos.get(key)
            if shadow is None and info is not None and info.unconfirmed():
                # The pool may hold the ShadowPod we sent (unanswered, or not in our cache yet): ask before
                # freeing its share (no answer: the share stays, the key is retried).
                found = await self._lookup_shadow(key, pair)
                if found is not None and not fp.is_terminating(found):
                    await self._delete_shadow(key, found, "local pod gone")  # its quota goes on DELETE
            if shadow is None or fp.is_terminating(shadow):
                self.charges.release(key)
            else:
                self.admission.stop_waiting(key)  # the share goes when the pool shows the ShadowPod deleted
            self.configuration.release_pod(key)
            self.infos.pop(key, None)
            self.arrived.pop(key, None)
            if shadow is not None and not fp.is_terminating(shadow):
                await self._delete_shadow(key, shadow, "local pod gone")
            return None

        info = self._info_for(key, local)
        if shadow is not None and is_stale_shadow(shadow, local):
            return await self._replace_stale(key, shadow, info)
        if info.replacing is not None:
            if shadow is None and remote is not None and controlling_shadow_uid(remote) == info.replacing:
                return None  # the earlier pod's remote pod is still going away: its deletion re-queues us
            info.replacing = None
        remote = None if remote_pod_of(shadow, remote) is None else remote
        if fp.is_terminating(local):
            self.configuration.release_pod(key)
            return await self._handle_terminating(key, local, shadow, remote, pair)

        if (
            fp.phase_of(local) == "Failed"
            and fp.status_of(local).get("reason") == c.REASON_OFFLOADING_ABORTED
        ):
            if shadow is not None and not fp.is_terminating(shadow):
                await self._delete_shadow(key, shadow, "pod was aborted")
            self.charges.release(key)
            self.configuration.release_pod(key)
            return None

        if fp.is_terminal(local):
            # Terminal is final (invariant 4): never re-created (liqo#3096), never given another phase
            # whatever the remote pod shows, share freed (liqo#3137); a pool still running it is stopped.
            if shadow is not None and not fp.is_terminating(shadow) and _still_running(remote):
                await self._delete_shadow(key, shadow, f"local pod is {fp.phase_of(local)}")
            self.charges.release(key)
            self.configuration.release_pod(key)
            return None

        if shadow is None:
            if remote is not None and _finished_here(remote, local):
                # The pool ran it to the end and its ShadowPod went before that status came home: the status
                # goes home, nothing is sent again (invariant 4: the job never runs twice).
                return await self._sync_status(key, local, None, remote, info)
            if info.finished:
                return None  # our Succeeded/Failed write is on its way to the cache: never send it again
            if info.create_unanswered:
                settled = await self._settle_unanswered(key, pair, info)
                if settled is not None:
                    return settled
            if (
                info.created_at is not None
                and not info.shadow_seen
                and time.monotonic() - info.created_at < CREATION_GRACE_SECONDS
            ):
                return RequeueAfter(1.0)  # created by us a moment ago; the cache will show it
            if info.shadow_seen:
                log.info("ShadowPod disappeared from the pool: re-creating it", pod=key)
            info.shadow_seen = False
            return await self._create_shadow(key, local, pair, info)

        info.shadow_seen = True
        info.create_unanswered = False  # stored after all: the cache shows it
        if info.created_at is None:
            info.created_at = time.monotonic() - CREATION_GRACE_SECONDS  # found at start-up
        self.charges.account(key, local, shadow, remote)
        self.configuration.track_pod(pair.local, local)
        if not fp.has_remote_unavailable_label(local):
            await self._sync_metadata(key, local, shadow, pair)
        tell_not_applied(self.ctx, local, shadow, info)
        left = seconds_left(local, _now())
        if left is not None and left <= 0:
            await self._end_past_deadline(key, local)
            return None
        synced = await self._sync_status(key, local, shadow, remote, info)
        if left is None:
            return synced
        # A deadline set or lowered at home is the pool's only when the ShadowPod was sent with it: look again
        # at the deadline (a status write or a local update looks sooner).
        return RequeueAfter(left if synced is None else min(synced.delay, left))

    # ------------------------------------------------------------------------------------------ steps

    async def _end_past_deadline(self, key: str, local: Mapping[str, Any]) -> None:
        """The pod ran past its ``activeDeadlineSeconds``: Failed/DeadlineExceeded at home, with the kubelet's
        Event; the next pass (a terminal pod) stops it on the pool and frees its share (invariant 4)."""
        await self._write_status(key, local, deadline_exceeded_status(local, _now()))
        if (info := self.infos.get(key)) is not None:
            info.finished = True
        self.ctx.recorder.event(local, c.EVENT_TYPE_NORMAL, DEADLINE_EXCEEDED, DEADLINE_EXCEEDED_MESSAGE)
        log.info("pod ran past its activeDeadlineSeconds: Failed", pod=key)

    async def _handle_terminating(
        self,
        key: str,
        local: Mapping[str, Any],
        shadow: Mapping[str, Any] | None,
        remote: Mapping[str, Any] | None,
        pair: NamespacePair,
    ) -> RequeueAfter | None:
        if shadow is None and remote is None:
            info = self.infos.get(key)
            if info is not None and info.unconfirmed():
                # We created (or found, or sent unanswered) its ShadowPod and our cache has not shown it
                # yet: ask the pool before deciding that nothing exists remotely (invariant 1).
                found = await self._lookup_shadow(key, pair)
                if found is not None:
                    if not fp.is_terminating(found):
                        await self._delete_shadow(key, found, "local pod terminating")
                    return RequeueAfter(1.0)
            ns, name = key.split("/", 1)
            try:
                await self.ctx.home.delete(
                    PODS, name, ns, preconditions_uid=fp.uid_of(local), grace_period_seconds=0
                )
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    self.ctx.recorder.event(
                        local, "Warning", c.EVENT_FAILED_DELETION, c.failed_deletion_msg(err)
                    )
                    raise
            self.charges.release(key)
            self.infos.pop(key, None)
            log.info("pod removed: nothing left on the pool", pod=key)
            return None
        if shadow is not None and not fp.is_terminating(shadow):
            await self._delete_shadow(key, shadow, "local pod terminating")
            return None
        info = self._info(key)
        return await self._sync_status(key, local, shadow, remote, info)

    async def _create_shadow(
        self, key: str, local: Mapping[str, Any], pair: NamespacePair, info: PodInfo
    ) -> RequeueAfter | None:
        blocked = self.admission_gate(key)
        if blocked is not None:
            if info.gate_message != blocked:
                info.gate_message = blocked
                log.info("pod waits before admission", pod=key, reason=blocked)
            return RequeueAfter(ADMISSION_GATE_RETRY_SECONDS)  # also re-queued when the gate lifts
        info.gate_message = None
        if not self.admission.grant.resources:
            return RequeueAfter(2.0)  # the grant is not known yet (ResourceSlice not granted): wait quietly
        # The pod's charge, ``pods: 1`` included: the ledger checks only the names the grant has at the
        # moment, so the charge stays right when the grant starts listing ``pods``.
        requests = pod_requests(local)
        if not info.hinted_no_requests and not (requests.get("cpu") or requests.get("memory")):
            info.hinted_no_requests = True
            log.info(
                "pod declares no cpu/memory requests: it counts as zero against the grant "
                "(declare requests, user guide section 3.8)",
                pod=key,
            )
        decision = self.charges.admit(key, local, requests)  # a pod that does not fit waits in the ledger
        if not decision.ok:
            message = decision.message
            if info.waiting_message != message:
                info.waiting_message = message
                log.info("pod waits for the grant", pod=key, reason=message)
                self.ctx.recorder.event(local, "Warning", c.EVENT_FAILED_REFLECTION, message)
            return None
        if info.waiting_message is not None:
            log.info("pod admitted by the grant", pod=key)
            info.waiting_message = None

        try:
            missing = await self.configuration.ensure_for_pod(pair.local, local)
        except Exception:
            self.charges.release(key)  # no grant share held while its Secrets/ConfigMaps cannot be written
            raise
        if missing:
            self.charges.release(key)  # its grant share goes back while it waits
            message = self.configuration.missing_message(missing)
            if info.config_message != message:
                info.config_message = message
                log.info("pod waits for referenced objects", pod=key, missing=", ".join(missing))
                self.ctx.recorder.event(local, "Warning", c.EVENT_FAILED_REFLECTION, message)
                tell_not_found(self.ctx, local, self.configuration.absent_references(key), optional=False)
            return None
        info.config_message = None

        self._require_pool()
        tell_ignored_apiserver_override(self.ctx, local, info)
        body = self._forge(local, pair, None)
        try:
            await self.ctx.pool.create(SHADOWPODS, body, pair.remote, field_manager=c.FIELD_MANAGER)
        except ApiError as err:
            if err.already_exists:
                return await self._adopt_existing(key, local, pair, info)
            if outcome_unknown(err):
                # The pool may have stored it: the share stays held (no other pod is admitted into it)
                # until a read, or the cache, tells (`_settle_unanswered`); the retry asks first.
                info.create_unanswered = True
                log.warning(
                    "ShadowPod create got no answer: its grant share is kept until the pool shows "
                    "whether it was stored",
                    pod=key,
                    error=str(err)[:200],
                )
            else:
                self.charges.release(key)  # refused (4xx): nothing was stored
            self._pool_error(err)
            if not err.conflict:
                self.ctx.recorder.event(
                    local,
                    "Warning",
                    c.EVENT_FAILED_REFLECTION,
                    c.failed_reflection_msg(self.ctx.remote_cluster_id, err.message),
                )
            raise  # the work queue logs the refusal with its retry delay
        info.created_at = time.monotonic()
        elapsed = info.created_at - info.first_seen
        self.ctx.metrics.reflection_latency.labels(direction="outbound").observe(elapsed)
        self.ctx.recorder.event(
            local,
            "Normal",
            c.EVENT_SUCCESSFUL_REFLECTION,
            c.successful_reflection_msg(self.ctx.remote_cluster_id),
        )
        tell_not_found(self.ctx, local, self.configuration.absent_references(key), optional=True)
        log.info(
            "ShadowPod created", pod=key, remote=f"{pair.remote}/{key.split('/', 1)[1]}", elapsed=ms(elapsed)
        )
        return None

    async def _settle_unanswered(self, key: str, pair: NamespacePair, info: PodInfo) -> RequeueAfter | None:
        """Our last create got no answer: read whether the pool stored it. Stored: the cache will show it.
        Absent: None, and the create is sent again within the share still held. No answer again: raised,
        the share still held, and the work queue retries with its capped backoff."""
        found = await self._lookup_shadow(key, pair)
        info.create_unanswered = False
        if found is not None:
            info.created_at = time.monotonic()
            log.info("ShadowPod create that got no answer was stored by the pool", pod=key)
            return RequeueAfter(0.5)
        info.created_at = None
        log.info("ShadowPod create that got no answer was not stored: sending it again", pod=key)
        return None

    async def _lookup_shadow(self, key: str, pair: NamespacePair) -> dict[str, Any] | None:
        """Our ShadowPod of that name as the pool has it now (None: none, or not ours)."""
        self._require_pool()
        try:
            found = await self.ctx.pool.get(SHADOWPODS, key.split("/", 1)[1], pair.remote)
        except ApiError as err:
            if err.not_found:
                return None
            self._pool_error(err)
            raise
        return found if self._ours(found) else None

    async def _replace_stale(self, key: str, shadow: Mapping[str, Any], info: PodInfo) -> RequeueAfter | None:
        """The ShadowPod of that name was made for an earlier local pod (its UID annotation differs): delete
        it (UID precondition) and create this pod's once the pool shows nothing left of the earlier one.
        Its status is never mirrored onto this pod, nor is it adopted."""
        if info.replacing != fp.uid_of(shadow):
            info.replacing = fp.uid_of(shadow)
            log.info(
                "ShadowPod was made for an earlier pod of the same name: replacing it",
                pod=key,
                earlier_uid=local_pod_uid_of(shadow),
            )
        if not fp.is_terminating(shadow):
            await self._delete_shadow(key, shadow, "made for an earlier pod of the same name")
        return None  # its deletion, then its remote pod's, re-queue the key

    async def _adopt_existing(
        self, key: str, local: Mapping[str, Any], pair: NamespacePair, info: PodInfo
    ) -> RequeueAfter | None:
        name = key.split("/", 1)[1]
        try:
            existing = await self.ctx.pool.get(SHADOWPODS, name, pair.remote)
        except ApiError as err:
            self._pool_error(err)
            raise
        if not self._ours(existing):
            self.charges.release(key)
            msg = c.failed_reflection_already_exists_msg(self.ctx.remote_cluster_id)
            if info.waiting_message != msg:
                info.waiting_message = msg
                self.ctx.recorder.event(local, "Warning", c.EVENT_FAILED_REFLECTION, msg)
                log.warning(
                    "a ShadowPod of that name exists on the pool and is not ours: left alone", pod=key
                )
            return RequeueAfter(300.0)
        info.created_at = time.monotonic()
        return RequeueAfter(0.5)  # ours (a restart raced our cache): handle it once the cache shows it

    async def _sync_metadata(
        self, key: str, local: Mapping[str, Any], shadow: Mapping[str, Any], pair: NamespacePair
    ) -> None:
        # Only labels/annotations can change after creation (invariant 5): forging the whole ShadowPod
        # (a deep copy of the pod) on every status event is wasted unless one of its inputs moved. Their
        # hash is what is kept (as a tuple it held ~0.5 KB per pod): equal hashes of unequal inputs, one
        # chance in 2**64 with Python's keyed string hash, would only skip a metadata sync until the next.
        info = self.infos.get(key)
        sig = hash(
            (
                tuple(sorted(fp.labels_of(local).items())),
                tuple(sorted(fp.annotations_of(local).items())),
                fp.meta(shadow).get("resourceVersion"),
                repr(self.ctx.offloading_patch()),
            )
        )
        if info is not None and info.metadata_sig == sig:
            return
        desired = self._forge(local, pair, shadow)
        if not needs_update(dict(shadow), desired):
            if info is not None:
                info.metadata_sig = sig
            return
        self._require_pool()
        patch = metadata_patch(shadow, desired)
        try:
            await self.ctx.pool.patch(
                SHADOWPODS, key.split("/", 1)[1], patch, pair.remote, field_manager=c.FIELD_MANAGER
            )
        except ApiError as err:
            self._pool_error(err)
            raise
        log.debug("ShadowPod metadata updated", pod=key)

    async def _sync_status(
        self,
        key: str,
        local: Mapping[str, Any],
        shadow: Mapping[str, Any] | None,
        remote: Mapping[str, Any] | None,
        info: PodInfo,
    ) -> RequeueAfter | None:
        if remote is None:
            if shadow is not None and fp.phase_of(shadow) in ("Succeeded", "Failed"):
                new = rejected_status(
                    dict(local), fp.phase_of(shadow), c.REASON_REMOTE_POD_TERMINATED, _now()
                )
                if overrides_terminal(local, new):
                    return None
                await self._write_status(key, local, new)
                info.finished = True
                self.charges.release(key)
                return None
            if shadow is not None and not fp.is_terminating(shadow):
                return tell_remote_pod_missing(self.ctx, local, shadow, info, self.remote_pod_missing_after)
            return None
        info.no_remote_since, info.told_no_remote = None, False

        remote_uid = fp.uid_of(remote)
        if info.remote_uid != remote_uid:
            if info.remote_uid is not None:
                info.restarts += 1
                log.info("remote pod was re-created on the pool", pod=key, restarts=info.restarts)
            else:
                info.restarts = restarts_on_remote_change(dict(local), dict(remote))
            info.remote_uid = remote_uid
        if fp.phase_of(remote) == "Running" and info.remote_running_seen is None:
            info.remote_running_seen = time.monotonic()
            log.info("remote pod Running", pod=key)

        new = forge_local_status(
            dict(local),
            dict(remote),
            restarts=info.restarts,
            vk_pod_ip=self.ctx.vk_pod_ip,
            disable_ip_reflection=self.ctx.disable_ip_reflection,
            remote_unavailable=fp.has_remote_unavailable_label(local),
        )
        new = with_readiness_gates(new, local, _now())
        if info.told_ephemeral or info.resize_message is not None:
            new = fn.with_notices(new, local, info.resize_message, _now())
        if overrides_terminal(local, new):
            return None  # Succeeded/Failed is final, whatever the remote pod shows (invariant 4)
        local_rv = fp.meta(local).get("resourceVersion") or ""
        if already_written(info, local_rv, new):
            return None
        labelled = fp.labels_of(local).get(c.LOCAL_POD_LABEL) == c.LOCAL_POD_LABEL_VALUE
        if status_equal(dict(fp.status_of(local)), new) and labelled:
            info.pending_change_since = None
            return None
        if fp.phase_of(local) == "Pending" and new.get("phase") == "Pending":
            now = time.monotonic()
            if info.pending_change_since is None:
                info.pending_change_since = now
            wait = PENDING_COALESCE_SECONDS - (now - info.pending_change_since)
            if wait > 0:
                return RequeueAfter(wait)
        info.pending_change_since = None
        await self._write_status(key, local, new)
        info.status_written = (local_rv, new)
        if new.get("phase") in ("Succeeded", "Failed"):
            info.finished = True
            self.charges.release(key)
            log.info("pod finished on the pool", pod=key, phase=new.get("phase"))
        if new.get("phase") == "Running" and not info.running_logged:
            info.running_logged = True
            total = time.monotonic() - info.first_seen
            if info.remote_running_seen is not None:
                added = time.monotonic() - info.remote_running_seen
                self.ctx.metrics.reflection_latency.labels(direction="inbound").observe(added)
            log.info("local pod Running", pod=key, since_bound=ms(total))
        return None

    async def _write_status(self, key: str, local: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        ns, name = key.split("/", 1)
        patch: dict[str, Any] = {"status": status_patch(fp.status_of(local), new)}
        if "conditions" in patch["status"] and (
            foreign_conditions(local) or fp.spec_of(local).get("readinessGates")
        ):
            # Others write this pod's conditions (its readiness gates' controllers): the list is replaced
            # whole, so the write is conditional on the pod we read, and a condition set meanwhile is a 409
            # (retried from the newer pod), never erased.
            patch["metadata"] = {
                "resourceVersion": str((local.get("metadata") or {}).get("resourceVersion") or "")
            }
        if fp.labels_of(local).get(c.LOCAL_POD_LABEL) != c.LOCAL_POD_LABEL_VALUE:
            patch.setdefault("metadata", {})["labels"] = {c.LOCAL_POD_LABEL: c.LOCAL_POD_LABEL_VALUE}
        try:
            await self.ctx.home.patch(
                PODS, name, patch, ns, subresource="status", field_manager=c.FIELD_MANAGER
            )
        except ApiError as err:
            if err.not_found:
                return
            if not err.conflict:
                self.ctx.recorder.event(
                    local,
                    "Warning",
                    c.EVENT_FAILED_REFLECTION,
                    c.failed_status_reflection_msg(self.ctx.remote_cluster_id, err.message),
                )
            raise
        log.debug("local pod status updated", pod=key, phase=new.get("phase"))

    async def _delete_shadow(self, key: str, shadow: Mapping[str, Any], why: str) -> None:
        self._require_pool()
        try:
            await self.ctx.pool.delete(
                SHADOWPODS, fp.name_of(shadow), fp.namespace_of(shadow), preconditions_uid=fp.uid_of(shadow)
            )
        except ApiError as err:
            if err.not_found or err.conflict:
                return
            self._pool_error(err)
            raise
        log.info("ShadowPod deleted", pod=key, reason=why)

    # ------------------------------------------------------------------------------------------ helpers

    def _forge(
        self, local: Mapping[str, Any], pair: NamespacePair, existing: Mapping[str, Any] | None
    ) -> dict[str, Any]:
        return forge_shadowpod(
            dict(local),
            remote_namespace=pair.remote,
            local_cluster_id=self.ctx.local_cluster_id,
            remote_cluster_id=self.ctx.remote_cluster_id,
            node_name=self.ctx.node_name,
            apiserver_support=self.ctx.apiserver_support,
            offloading_patch=self.ctx.offloading_patch(),
            existing=None if existing is None else dict(existing),
        )

    def _ours(self, obj: Mapping[str, Any]) -> bool:
        """Ownership guard (invariant 2): our origin, destination and node labels."""
        labels = fp.labels_of(obj)
        return (
            labels.get(c.ORIGIN_LABEL) == self.ctx.local_cluster_id
            and labels.get(c.DESTINATION_LABEL) == self.ctx.remote_cluster_id
            and labels.get(c.NODENAME_LABEL) == self.ctx.node_name
        )

    def _info_for(self, key: str, local: Mapping[str, Any]) -> PodInfo:
        """The pod's memory; a same-name replacement (another UID) starts afresh, inheriting nothing."""
        info = self._info(key)
        uid = fp.uid_of(local)
        if info.local_uid is not None and info.local_uid != uid:
            info = self.infos[key] = PodInfo()
        info.local_uid = uid
        return info

    def _info(self, key: str) -> PodInfo:
        info = self.infos.get(key)
        if info is None:
            arrived = self.arrived.pop(key) if key in self.arrived else time.monotonic()
            info = self.infos[key] = PodInfo(first_seen=arrived)
        return info

    def _require_pool(self) -> None:
        require_pool(self.ctx.reach)

    def _pool_error(self, err: ApiError) -> None:
        """Transport failures mean the pool may be gone: park the key and ask the pinger to look now."""
        gone = pool_failure(self.ctx.reach, err)
        if gone is not None:
            raise gone from err


def _finished_here(remote: Mapping[str, Any], local: Mapping[str, Any]) -> bool:
    """Is ``remote`` this local pod's, Succeeded or Failed? Its UID annotation (copied by the provider from
    the ShadowPod) names the local pod; a remote pod of an earlier same-name pod is not this one's."""
    return fp.is_terminal(remote) and not is_stale_shadow(remote, local)


def _still_running(remote: Mapping[str, Any] | None) -> bool:
    return remote is not None and not fp.is_terminal(remote) and not fp.is_terminating(remote)


def _now() -> Any:
    import datetime as dt

    return dt.datetime.now(dt.UTC)
