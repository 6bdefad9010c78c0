"""Referenced Secrets and ConfigMaps -> their copies on the pool, reference-counted (DESIGN §1, GUIDE §8).

Liqo reflects every object of a reflected namespace (LIQO §5); Extend promises the pool sees only what an
offloaded pod references. So the pod reflector calls ``ensure_for_pod`` before it creates a ShadowPod
(the copies must exist when the pool starts the pod) and ``release_pod`` once the pod is gone or
terminal: a copy lives while one non-terminal reflected pod references its local object. Our own queue
keeps the copies level-consistent afterwards: local edits are re-applied, remote drift is reverted, a
local object that appears releases the pods waiting for it.

Secret data is copied, compared and hashed, never logged: log lines, events and errors name objects only.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from reflectors.config_copies import (
    KINDS,
    RESOURCES,
    Applied,
    ConfigPair,
    ConfigurationWriteError,
    PoolCopies,
)
from reflectors.context import ReflectionContext
from reflectors.forge import constants as c
from reflectors.forge import pods as fp
from reflectors.forge.configuration import (
    SKIP_SA_TOKEN,
    configmap_skip_reason,
    copy_matches,
    forge_remote_copy,
    kept_for_other_nodes,
    missing_message,
    needs_recreate,
    reserved_name_reason,
    secret_skip_reason,
)
from reflectors.forge.configuration import fingerprint as fingerprint_of
from reflectors.forge.configuration import resource_version as rv_of
from reflectors.forge.labels import is_reflected, reflected_label_selector
from reflectors.forge.references import CONFIGMAP, SECRET, Reference, pod_references
from reflectors.generic import KeyLocks, PairReflector, PoolUnavailable, count_result, require_pool
from reflectors.refcount import ObjectRef, RefIndex
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import ApiError
from vkbridge.kube.reachability import PoolState
from vkbridge.kube.workqueue import RequeueAfter, WorkQueue, run_workers
from vkbridge.logs import get_logger

log = get_logger("reflectors.configuration")

# A same-name object on the pool that is not ours is looked at again this often (we cannot watch it).
FOREIGN_RECHECK_SECONDS: Final = 30.0

NOT_FOUND: Final = "not found"
FOREIGN: Final = "an object of that name exists on the pool and is not ours"


class ConfigurationNotReady(Exception):
    """The namespace pair has no synced configuration caches yet: handle the pod once it has."""


class PodSource(Protocol):
    """The local pods of our node (the engine's pod cache): one namespace's, read at its pair's start."""

    def list(self, namespace: str | None = None) -> list[dict[str, Any]]: ...


ObjectReady = Callable[[Collection[str]], None]


@dataclass(frozen=True)
class _Outcome:
    ready: bool
    reason: str = ""
    recheck: float | None = None
    blocking: bool = False  # holds the pod back even if its reference is optional


READY: Final = _Outcome(True)


class ConfigurationReflector(PairReflector[ConfigPair]):
    name = "configuration"
    gates_pods = True  # a pod's ShadowPod is created only once its Secrets/ConfigMaps can be checked

    def __init__(
        self,
        ctx: ReflectionContext,
        workers: int,
        *,
        local_pods: PodSource | None = None,
        on_object_ready: ObjectReady | None = None,
        secret_policy: str = c.POLICY_DENY_LIST,
        configmap_policy: str = c.POLICY_DENY_LIST,
        inactivity_timeout: float = 60.0,
    ) -> None:
        super().__init__()
        self.ctx = ctx
        self.workers = max(1, workers)
        self.local_pods = local_pods
        self.on_object_ready: ObjectReady = on_object_ready or (lambda _keys: None)
        self.policies: dict[str, str] = {SECRET: secret_policy, CONFIGMAP: configmap_policy}
        self.inactivity_timeout = inactivity_timeout
        self.index = RefIndex()
        self.queue: WorkQueue[str] = WorkQueue(
            "configuration", metrics=ctx.metrics.workqueue("configuration")
        )
        self.parked: set[str] = set()
        self.copies = PoolCopies(ctx)  # our copies on the pool and how they are written
        self._releasable: set[ObjectRef] = set()  # unreferenced: delete the remote copy
        self._locks: KeyLocks[ObjectRef] = KeyLocks()
        self._noted: dict[ObjectRef, str] = {}  # last "not reflected" reason logged, one line per change
        self._absent: dict[str, tuple[Reference, ...]] = {}  # pod key -> references not found locally
        self._selector = reflected_label_selector(ctx.local_cluster_id, ctx.remote_cluster_id)
        ctx.reach.subscribe(self._on_pool)

    # ------------------------------------------------------------------------------------------ run

    async def run(self) -> None:
        """The workers, until ``stop()`` or cancellation (run it in the engine's TaskGroup)."""
        await run_workers(self.queue, self._handle, self.workers, "configuration", on_result=self._on_result)

    def stop(self) -> None:
        self.queue.shutdown()

    # ------------------------------------------------------------------------------------------ pairs

    def _new_pair(self, pair_local: str, pair_remote: str) -> ConfigPair:
        home, pool = self.ctx.home, self.ctx.pool
        pair = ConfigPair(
            local=pair_local,
            remote=pair_remote,
            local_caches={
                kind: Cache(
                    home,
                    RESOURCES[kind],
                    pair_local,
                    name=f"consumer/{RESOURCES[kind].plural}@{pair_local}",
                    inactivity_timeout=self.inactivity_timeout,
                )
                for kind in KINDS
            },
            remote_caches={
                kind: Cache(
                    pool,
                    RESOURCES[kind],
                    pair_remote,
                    label_selector=self._selector,
                    name=f"pool/{RESOURCES[kind].plural}@{pair_remote}",
                    inactivity_timeout=self.inactivity_timeout,
                )
                for kind in KINDS
            },
        )
        for kind in KINDS:
            pair.local_caches[kind].subscribe(self._local_handler(pair_local, kind))
            pair.remote_caches[kind].subscribe(self._remote_handler(pair_local, kind))
        return pair

    def _forget_pair(self, pair: ConfigPair) -> None:
        """Stop watching; remote copies are left alone (the pool removes the namespace with the mapping)."""
        local = pair.local
        self.index.drop_namespace(local)
        for store in (self.copies.applied, self._noted):
            for ref in [r for r in store if r.namespace == local]:
                store.pop(ref, None)
        self._releasable = {r for r in self._releasable if r.namespace != local}

    async def _prepare(self, pair: ConfigPair) -> None:
        if not await self.wait_synced(pair.local) or self.pairs.get(pair.local) is not pair:
            return
        try:
            orphans = self._sweep(pair)
        except Exception:  # a bug here must not stop reflection: leftovers wait for the next start
            log.exception("sweeping leftover copies failed", namespace=pair.local)
            orphans = -1
        for ref in self.index.objects(pair.local):
            self.queue.add(ref.key())
        log.info(
            "configuration reflection started",
            namespace=pair.local,
            remote=pair.remote,
            remote_secrets=len(pair.remote_caches[SECRET]),
            remote_configmaps=len(pair.remote_caches[CONFIGMAP]),
            orphans=orphans,
        )

    def _sweep(self, pair: ConfigPair) -> int:
        """Remote copies no live pod references (left by a previous run) are marked for deletion.

        Restart safety: the index is empty until the pod reflector has seen each pod again, so the
        decision reads the local pods themselves. Without them nothing is swept.
        """
        if self.local_pods is None:
            return 0
        live = set(self.index.objects(pair.local))
        for pod in self.local_pods.list(pair.local):  # not the whole compact cache: ~90 us per pod decoded
            if fp.namespace_of(pod) != pair.local or fp.is_terminal(pod) or fp.is_terminating(pod):
                continue
            live.update(ObjectRef(r.kind, pair.local, r.name) for r in pod_references(pod))
        orphans = 0
        for kind, cache in pair.remote_caches.items():
            for remote in cache.list():
                ref = self.copies.ref_of_remote(pair.local, kind, remote)
                if ref is not None and ref not in live:
                    orphans += 1
                    self._releasable.add(ref)
                    self.queue.add(ref.key())
        return orphans

    # ------------------------------------------------------------------------------------------ pods API

    async def ensure_for_pod(self, pair_local: str, pod: Mapping[str, Any]) -> list[str]:
        """Register the pod's references and make every one exist on the pool; returns what is missing.

        Each missing item is human-readable (``Secret "db" (not found)``) and names the object only.
        Optional references never block. The pod is re-queued via ``on_object_ready`` once its last
        missing object appears.
        """
        pair = self.pairs.get(pair_local)
        if pair is None or not pair.synced:
            raise ConfigurationNotReady(f"configuration caches of namespace {pair_local} not synced yet")
        pod_key = fp.pod_key(pod)
        refs = pod_references(pod)
        objs = [ObjectRef(r.kind, pair_local, r.name) for r in refs]
        self._register(pod_key, objs)
        missing: list[str] = []
        waiting: list[ObjectRef] = []
        absent: list[Reference] = []
        try:
            for ref, obj in zip(refs, objs, strict=True):
                async with self._locks.hold(obj):
                    outcome = await self._reconcile(pair, obj, confirm_missing=True)
                if outcome.recheck is not None:
                    self.queue.add_after(obj.key(), outcome.recheck)
                if outcome.reason == NOT_FOUND:
                    absent.append(ref)
                if outcome.ready or (ref.optional and not outcome.blocking):
                    continue
                missing.append(f"{ref.kind} {c.go_quote(ref.name)} ({outcome.reason})")
                waiting.append(obj)
        finally:
            self.index.set_waiting(pod_key, waiting)
            if absent:
                self._absent[pod_key] = tuple(absent)
            else:
                self._absent.pop(pod_key, None)
        return missing

    def absent_references(self, pod_key: str) -> tuple[Reference, ...]:
        """The references the last ``ensure_for_pod`` of this pod found missing (not found locally),
        optional ones included: the pod reflector tells them with the upstream virtual-kubelet reasons."""
        return self._absent.get(pod_key, ())

    def track_pod(self, pair_local: str, pod: Mapping[str, Any]) -> None:
        """Register a pod already running on the pool (found at start-up); its objects are checked soon."""
        objs = [ObjectRef(r.kind, pair_local, r.name) for r in pod_references(pod)]
        pod_key = fp.pod_key(pod)
        if self.index.refs_of(pod_key) == frozenset(objs):
            return
        self._register(pod_key, objs)
        for obj in objs:
            self.queue.add(obj.key())

    def release_pod(self, pod_key: str) -> None:
        """The pod is gone or terminal: copies nothing else references are deleted from the pool."""
        self._absent.pop(pod_key, None)
        self._release(self.index.drop_pod(pod_key))

    @staticmethod
    def missing_message(missing: Iterable[str]) -> str:
        return missing_message(missing)

    def _register(self, pod_key: str, objs: Iterable[ObjectRef]) -> None:
        objs = list(objs)
        self._releasable.difference_update(objs)
        self._release(self.index.set_pod(pod_key, objs))

    def _release(self, objs: Iterable[ObjectRef]) -> None:
        for obj in objs:
            self._releasable.add(obj)
            self.queue.add(obj.key())

    # ------------------------------------------------------------------------------------------ events

    def _local_handler(self, local_ns: str, kind: str) -> Callable[[str, Any, Any], None]:
        def handler(_type: str, old: Any, new: Any) -> None:
            obj = new if new is not None else old
            ref = ObjectRef(kind, local_ns, fp.name_of(obj))
            if self.index.referenced(ref) or self.index.waited_for(ref) or ref in self.copies.applied:
                self.queue.add(ref.key())

        return handler

    def _remote_handler(self, local_ns: str, kind: str) -> Callable[[str, Any, Any], None]:
        def handler(_type: str, old: Any, new: Any) -> None:
            obj = new if new is not None else old
            ref = self.copies.ref_of_remote(local_ns, kind, obj)
            if ref is None:
                return
            applied = self.copies.applied.get(ref)
            if applied is not None and (
                new is None or fp.uid_of(new) != applied.uid or rv_of(new) != applied.resource_version
            ):
                self.copies.applied.pop(ref, None)  # not our last write: decide from the cache again
            self.queue.add(ref.key())

        return handler

    def _on_pool(self, _old: PoolState, new: PoolState) -> None:
        if new is not PoolState.CONNECTED:
            return
        parked, self.parked = self.parked, set()
        self.queue.reset_backoff()
        for key in parked:
            self.queue.add(key)

    # ------------------------------------------------------------------------------------------ handle

    async def _handle(self, key: str) -> RequeueAfter | None:
        ref = ObjectRef.from_key(key)
        pair = self.pairs.get(ref.namespace)
        if pair is None or not pair.synced:
            return None  # not reflected, or queued again by _prepare
        try:
            async with self._locks.hold(ref):
                if self.index.referenced(ref):
                    outcome = await self._reconcile(pair, ref)
                    if outcome.ready:
                        waiting = self.index.take_waiting(ref)
                        if waiting:
                            self.on_object_ready(sorted(waiting))
                    if outcome.recheck is not None:
                        return RequeueAfter(outcome.recheck)
                    return None
                if ref in self._releasable:
                    await self.copies.release(pair, ref)
                    self._releasable.discard(ref)
                    self._noted.pop(ref, None)
        except PoolUnavailable:
            self.parked.add(key)
        return None

    async def _reconcile(
        self, pair: ConfigPair, ref: ObjectRef, *, confirm_missing: bool = False
    ) -> _Outcome:
        """Make the remote copy of one referenced object match its local object (caller holds the lock).

        ``confirm_missing``: a pod and its Secret are often created together and their watches race, so
        before a pod is held back for an object the cache lacks, one GET makes sure it really is missing.
        """
        local = pair.local_caches[ref.kind].get(f"{ref.namespace}/{ref.name}")
        if local is None and confirm_missing:
            local = await self._get_local(ref)
        if ref.kind == CONFIGMAP and (reserved := reserved_name_reason(ref.name, self.ctx.local_cluster_id)):
            return self._refuse_reserved(ref, local, reserved)
        remote = self.copies.cached(pair, ref)
        if local is None:
            await self.copies.delete_ours(pair, ref, "local object gone")
            return self._not_ready(ref, NOT_FOUND)
        policy = self.policies[ref.kind]
        reason = (
            secret_skip_reason(local, policy=policy)
            if ref.kind == SECRET
            else configmap_skip_reason(local, policy=policy)
        )
        if reason is not None:
            if await self.copies.delete_ours(pair, ref, "reflection disabled for the object"):
                message = (
                    c.sa_reflection_disabled_msg(self.ctx.remote_cluster_id)
                    if reason == SKIP_SA_TOKEN
                    else c.object_reflection_disabled_msg(self.ctx.remote_cluster_id, policy)
                )
                self._event(local, ref, c.EVENT_TYPE_NORMAL, c.EVENT_REFLECTION_DISABLED, message)
            return self._not_ready(ref, reason)
        desired = self._forge(pair, ref.kind, local)
        fingerprint = fingerprint_of(desired)
        if remote is not None and copy_matches(remote, desired):
            self.copies.applied[ref] = Applied(fingerprint, fp.uid_of(remote), rv_of(remote))
            return self._ready(ref)
        applied = self.copies.applied.get(ref)
        if applied is not None and applied.fingerprint == fingerprint:
            return self._ready(ref)  # our own write, not in the cache yet
        return await self._apply(pair, ref, local, desired, fingerprint, remote)

    async def _apply(
        self,
        pair: ConfigPair,
        ref: ObjectRef,
        local: Mapping[str, Any],
        desired: dict[str, Any],
        fingerprint: str,
        remote: Mapping[str, Any] | None,
    ) -> _Outcome:
        require_pool(self.ctx.reach)
        remote_name = self.copies.remote_name(ref)
        resource = RESOURCES[ref.kind]
        if remote is None:
            existing = await self.copies.get(pair, ref, local)
            if existing is not None and not is_reflected(
                existing, self.ctx.local_cluster_id, self.ctx.remote_cluster_id
            ):
                if self._noted.get(ref) != FOREIGN:
                    self._event(
                        local,
                        ref,
                        c.EVENT_TYPE_WARNING,
                        c.EVENT_FAILED_REFLECTION,
                        c.failed_reflection_already_exists_msg(self.ctx.remote_cluster_id),
                    )
                return self._not_ready(ref, FOREIGN, recheck=FOREIGN_RECHECK_SECONDS)
            remote = existing  # ours, the cache has not shown it yet
        body = copy.deepcopy(desired)
        if remote is not None and needs_recreate(remote, desired):
            await self.copies.delete(pair, ref, remote, local, "type or immutable content changed")
            remote = None
        if remote is not None:
            # The copy is shared with the other virtual nodes of the namespace: keep their marks, and what
            # our offloadingPatch leaves out that another node may reflect (with one field manager for all
            # nodes, a key left out of an apply is removed). The resourceVersion below makes a mark added
            # meanwhile conflict instead of being lost.
            patch = self.ctx.offloading_patch() or {}
            labels, annotations = kept_for_other_nodes(
                remote,
                self.ctx.node_name,
                patch.get("labelsNotReflected") or (),
                patch.get("annotationsNotReflected") or (),
            )
            body["metadata"]["labels"].update(labels)
            body["metadata"]["annotations"].update(annotations)
            # Ownership precondition: the apply fails (409) if the copy changed since we saw it ours.
            # Our own last write is newer than a cache that has not shown it yet.
            applied = self.copies.applied.get(ref)
            same = applied is not None and applied.uid == fp.uid_of(remote)
            body["metadata"]["resourceVersion"] = (
                applied.resource_version if same and applied else rv_of(remote)
            )
        verb = "update" if remote is not None else "create"
        try:
            # A create is not forced, so a foreign object appearing meanwhile conflicts instead of
            # being taken over.
            out = await self.ctx.pool.apply(
                resource, body, pair.remote, field_manager=c.FIELD_MANAGER, force=remote is not None
            )
            out = await self.copies.prune(pair, ref, desired, out)
        except ApiError as err:
            raise self.copies.write_error(verb, pair, ref, local, err) from None
        self.copies.applied[ref] = Applied(fingerprint, fp.uid_of(out), rv_of(out))
        log.info(
            f"{ref.kind} reflected to the pool ({verb})",
            object=f"{ref.namespace}/{ref.name}",
            remote=f"{pair.remote}/{remote_name}",
        )
        return self._ready(ref)

    async def _get_local(self, ref: ObjectRef) -> dict[str, Any] | None:
        try:
            return await self.ctx.home.get(RESOURCES[ref.kind], ref.name, ref.namespace)
        except ApiError as err:
            if err.not_found:
                return None
            raise ConfigurationWriteError(
                f"get {ref.kind} {ref.namespace}/{ref.name} at home: {err.status} {err.reason}"
            ) from None

    # ------------------------------------------------------------------------------------------ helpers

    def _forge(self, pair: ConfigPair, kind: str, local: Mapping[str, Any]) -> dict[str, Any]:
        # The VirtualNode's offloadingPatch filters these copies' labels and annotations as it does the
        # ShadowPod's (Liqo's ForgingOpts serve every reflector).
        patch = self.ctx.offloading_patch() or {}
        return forge_remote_copy(
            kind,
            local,
            remote_ns=pair.remote,
            local_id=self.ctx.local_cluster_id,
            remote_id=self.ctx.remote_cluster_id,
            labels_not_reflected=patch.get("labelsNotReflected") or (),
            annotations_not_reflected=patch.get("annotationsNotReflected") or (),
            node_name=self.ctx.node_name,
        )

    def _ready(self, ref: ObjectRef) -> _Outcome:
        if self._noted.pop(ref, None) is not None:
            log.info(f"{ref.kind} now reflected", object=f"{ref.namespace}/{ref.name}")
        return READY

    def _refuse_reserved(self, ref: ObjectRef, local: Mapping[str, Any] | None, reason: str) -> _Outcome:
        """A local ConfigMap named like the renamed root CA copy: never copied, and pods using it wait,
        even through optional references (on the pool that name holds the CA). One Warning per change."""
        if local is not None and self._noted.get(ref) != reason:
            message = f"Error reflecting object to cluster {c.go_quote(self.ctx.remote_cluster_id)}: {reason}"
            self._event(local, ref, c.EVENT_TYPE_WARNING, c.EVENT_FAILED_REFLECTION, message)
        return self._not_ready(ref, reason, blocking=True)

    def _not_ready(
        self, ref: ObjectRef, reason: str, recheck: float | None = None, *, blocking: bool = False
    ) -> _Outcome:
        if self._noted.get(ref) != reason:
            self._noted[ref] = reason
            log.info(f"{ref.kind} not reflected", object=f"{ref.namespace}/{ref.name}", reason=reason)
        return _Outcome(False, reason, recheck, blocking)

    def _event(self, local: Mapping[str, Any], ref: ObjectRef, type_: str, reason: str, message: str) -> None:
        self.ctx.recorder.event(
            local,
            "Warning" if type_ == c.EVENT_TYPE_WARNING else "Normal",
            reason,
            message,
            kind=ref.kind,
            api_version="v1",
        )

    def _on_result(self, key: str, ok: bool, _duration: float) -> None:
        ref = ObjectRef.from_key(key)
        count_result(self.ctx, ref.namespace, ref.kind, ok)

    def stats(self) -> dict[str, int]:
        """For gauges and logs: referenced objects, pending deletions, queued keys, parked keys."""
        return {
            "referenced": len(self.index),
            "releasable": len(self._releasable),
            "queued": len(self.queue),
            "parked": len(self.parked),
        }
