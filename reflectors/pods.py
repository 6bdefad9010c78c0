"""Local Pod <-> ShadowPod on the pool, and the remote Pod's status back home.

Level-based (DESIGN §2): `handle` reads the local pod and the pair's caches, never an event payload,
so any key can be re-queued at any time. The order of checks follows Liqo's `Handle` (LIQO §4.3), with
the grant checked before anything is sent, and remote writes parked while the pool is away.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Protocol

from reflectors.context import ReflectionContext
from reflectors.forge import constants as c
from reflectors.forge import pods as fp
from reflectors.forge.shadowpod import forge_shadowpod, needs_update
from reflectors.forge.status import (
    forge_local_status,
    rejected_status,
    restarts_on_remote_change,
    status_equal,
)
from reflectors.pairs import NamespacePair
from vkbridge.grant import Admission, pod_requests
from vkbridge.kube.cache import Cache
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


class ConfigurationPort(Protocol):
    """The configuration reflector as the pod reflector sees it (a sibling module: no import)."""

    async def ensure_for_pod(self, pair_local: str, pod: Mapping[str, Any]) -> list[str]: ...

    def track_pod(self, pair_local: str, pod: Mapping[str, Any]) -> None: ...

    def release_pod(self, pod_key: str) -> None: ...

    def missing_message(self, missing: Iterable[str]) -> str: ...


class PoolUnavailable(Exception):
    """Raised before (or instead of) a remote write while the pool is not Connected: the key is parked."""


@dataclass
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
    metadata_sig: tuple[Any, ...] | None = None
    waiting_message: str | None = None
    config_message: str | None = None
    hinted_no_requests: bool = False


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


class PodReflector:
    def __init__(
        self,
        ctx: ReflectionContext,
        local_pods: Cache,
        admission: Admission,
        on_grant_wait: Callable[[str, str], None],
        on_release: Callable[[str], None],
        configuration: ConfigurationPort,
    ) -> None:
        self.ctx = ctx
        self.local_pods = local_pods
        self.admission = admission
        self._on_grant_wait = on_grant_wait
        self._on_release = on_release
        self.configuration = configuration
        self.infos: dict[str, PodInfo] = {}
        # When each pod first reached our cache bound to the node: the outbound latency counts the time it
        # waited in the queue too, not only our handling of it.
        self.arrived: dict[str, float] = {}

    # ------------------------------------------------------------------------------------------ entry

    async def handle(self, key: str, pair: NamespacePair) -> RequeueAfter | None:
        _, name = key.split("/", 1)
        local = self.local_pods.get(key)
        shadow = pair.shadows.get(f"{pair.remote}/{name}")
        remote = pair.remote_pods.get(f"{pair.remote}/{name}")

        if local is None:
            self._release(key)
            self.configuration.release_pod(key)
            self.infos.pop(key, None)
            self.arrived.pop(key, None)
            if shadow is not None and not fp.is_terminating(shadow):
                await self._delete_shadow(key, shadow, "local pod gone")
            return None

        info = self._info(key)
        if fp.is_terminating(local):
            self.configuration.release_pod(key)
            return await self._handle_terminating(key, local, shadow, remote, pair)

        if (
            fp.phase_of(local) == "Failed"
            and fp.status_of(local).get("reason") == c.REASON_OFFLOADING_ABORTED
        ):
            if shadow is not None and not fp.is_terminating(shadow):
                await self._delete_shadow(key, shadow, "pod was aborted")
            self._release(key)
            self.configuration.release_pod(key)
            return None

        if fp.is_terminal(local) and (remote is None or fp.phase_of(remote) == fp.phase_of(local)):
            self._release(key)  # terminal is final: never re-created (liqo#3096), share freed (liqo#3137)
            self.configuration.release_pod(key)
            return None

        if shadow is None:
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
        if info.created_at is None:
            info.created_at = time.monotonic() - CREATION_GRACE_SECONDS  # found at start-up
        self.charge_existing(key, shadow)
        self.configuration.track_pod(pair.local, local)
        if not fp.has_remote_unavailable_label(local):
            await self._sync_metadata(key, local, shadow, pair)
        return await self._sync_status(key, local, shadow, remote, info)

    # ------------------------------------------------------------------------------------------ steps

    async def _handle_terminating(
        self,
        key: str,
        local: Mapping[str, Any],
        shadow: Mapping[str, Any] | None,
        remote: Mapping[str, Any] | None,
        pair: NamespacePair,
    ) -> RequeueAfter | None:
        if shadow is None and remote is None:
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
            self._release(key)
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
        if not self.admission.grant.resources:
            return RequeueAfter(2.0)  # the grant is not known yet (ResourceSlice not granted): wait quietly
        requests = self._requests(local)
        if not info.hinted_no_requests and not (requests.get("cpu") or requests.get("memory")):
            info.hinted_no_requests = True
            log.info(
                "pod declares no cpu/memory requests: it counts as zero against the grant "
                "(declare requests, user guide section 3.8)",
                pod=key,
            )
        decision = self.admission.admit(key, requests)
        if not decision.ok:
            message = decision.message
            if info.waiting_message != message:
                info.waiting_message = message
                log.info("pod waits for the grant", pod=key, reason=message)
                self.ctx.recorder.event(local, "Warning", c.EVENT_FAILED_REFLECTION, message)
            self._on_grant_wait(key, fp.meta(local).get("creationTimestamp") or "")
            return None
        if info.waiting_message is not None:
            log.info("pod admitted by the grant", pod=key)
            info.waiting_message = None

        try:
            missing = await self.configuration.ensure_for_pod(pair.local, local)
        except Exception:
            self._release(key)  # no grant share held while its Secrets/ConfigMaps cannot be written
            raise
        if missing:
            self._release(key)  # its grant share goes back while it waits
            message = self.configuration.missing_message(missing)
            if info.config_message != message:
                info.config_message = message
                log.info("pod waits for referenced objects", pod=key, missing=", ".join(missing))
                self.ctx.recorder.event(local, "Warning", c.EVENT_FAILED_REFLECTION, message)
            return None
        info.config_message = None

        self._require_pool()
        body = self._forge(local, pair, None)
        try:
            await self.ctx.pool.create(SHADOWPODS, body, pair.remote, field_manager=c.FIELD_MANAGER)
        except ApiError as err:
            if err.already_exists:
                return await self._adopt_existing(key, local, pair, info)
            self._release(key)
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
        log.info(
            "ShadowPod created", pod=key, remote=f"{pair.remote}/{key.split('/', 1)[1]}", elapsed=_ms(elapsed)
        )
        return None

    async def _adopt_existing(
        self, key: str, local: Mapping[str, Any], pair: NamespacePair, info: PodInfo
    ) -> RequeueAfter | None:
        name = key.split("/", 1)[1]
        try:
            existing = await self.ctx.pool.get(SHADOWPODS, name, pair.remote)
        except ApiError as err:
            self._pool_error(err)
            raise
        labels = fp.labels_of(existing)
        if (
            labels.get(c.ORIGIN_LABEL) != self.ctx.local_cluster_id
            or labels.get(c.DESTINATION_LABEL) != self.ctx.remote_cluster_id
            or labels.get(c.NODENAME_LABEL) != self.ctx.node_name
        ):
            self._release(key)
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
        # (a deep copy of the pod) on every status event is wasted unless one of its inputs moved.
        info = self.infos.get(key)
        sig = (
            tuple(sorted(fp.labels_of(local).items())),
            tuple(sorted(fp.annotations_of(local).items())),
            fp.meta(shadow).get("resourceVersion"),
            repr(self.ctx.offloading_patch()),
        )
        if info is not None and info.metadata_sig == sig:
            return
        desired = self._forge(local, pair, shadow)
        if not needs_update(dict(shadow), desired):
            if info is not None:
                info.metadata_sig = sig
            return
        self._require_pool()
        patch = _metadata_patch(shadow, desired)
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
                await self._write_status(key, local, new)
                self._release(key)
            return None

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
            self._release(key)
            log.info("pod finished on the pool", pod=key, phase=new.get("phase"))
        if new.get("phase") == "Running" and not info.running_logged:
            info.running_logged = True
            total = time.monotonic() - info.first_seen
            if info.remote_running_seen is not None:
                added = time.monotonic() - info.remote_running_seen
                self.ctx.metrics.reflection_latency.labels(direction="inbound").observe(added)
            log.info("local pod Running", pod=key, since_bound=_ms(total))
        return None

    async def _write_status(self, key: str, local: Mapping[str, Any], new: Mapping[str, Any]) -> None:
        ns, name = key.split("/", 1)
        patch: dict[str, Any] = {"status": _status_patch(fp.status_of(local), new)}
        if fp.labels_of(local).get(c.LOCAL_POD_LABEL) != c.LOCAL_POD_LABEL_VALUE:
            patch["metadata"] = {"labels": {c.LOCAL_POD_LABEL: c.LOCAL_POD_LABEL_VALUE}}
        try:
            await self.ctx.home.patch(PODS, name, patch, ns, subresource="status")
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

    def _info(self, key: str) -> PodInfo:
        info = self.infos.get(key)
        if info is None:
            arrived = self.arrived.pop(key) if key in self.arrived else time.monotonic()
            info = self.infos[key] = PodInfo(first_seen=arrived)
        return info

    def _requests(self, pod: Mapping[str, Any]) -> dict[str, Fraction]:
        """What the pod costs against the grant; the pod count only when the grant limits it."""
        requests = dict(pod_requests(dict(pod)))
        if "pods" not in self.admission.grant.resources:
            requests.pop("pods", None)
        return requests

    def charge_existing(self, key: str, shadow: Mapping[str, Any]) -> None:
        """A ShadowPod that exists already uses the pool's quota: count it, fit or not (restart safety)."""
        if self.admission.is_admitted(key):
            return
        requests = self._requests(dict((shadow.get("spec") or {}).get("pod") or {}))
        if not self.admission.admit(key, requests).ok:
            self.admission.force_charge(key, requests)

    def _release(self, key: str) -> None:
        if self.admission.release(key):
            self._on_release(key)

    def _require_pool(self) -> None:
        if not self.ctx.reach.connected:
            raise PoolUnavailable(self.ctx.reach.state.value)

    def _pool_error(self, err: ApiError) -> None:
        """Transport failures mean the pool may be gone: park the key and ask the pinger to look now."""
        if err.status == 0:
            self.ctx.reach.report_failure()
            raise PoolUnavailable(str(err)) from err


def _metadata_patch(shadow: Mapping[str, Any], desired: Mapping[str, Any]) -> dict[str, Any]:
    """Merge patch making the ShadowPod's labels and annotations exactly the desired ones."""
    meta: dict[str, Any] = {"resourceVersion": fp.meta(shadow).get("resourceVersion")}
    for field_name in ("labels", "annotations"):
        cur = dict(fp.meta(shadow).get(field_name) or {})
        want = dict(fp.meta(desired).get(field_name) or {})
        diff: dict[str, str | None] = {k: v for k, v in want.items() if cur.get(k) != v}
        diff.update({k: None for k in cur if k not in want})
        if diff:
            meta[field_name] = diff
    return {"metadata": meta}


def _status_patch(current: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level status fields: new values, and null for those that disappeared (lists are replaced)."""
    patch: dict[str, Any] = {k: v for k, v in new.items() if current.get(k) != v}
    patch.update({k: None for k in current if k not in new})
    return patch


def _now() -> Any:
    import datetime as dt

    return dt.datetime.now(dt.UTC)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f}ms" if seconds < 10 else f"{seconds:.1f}s"
