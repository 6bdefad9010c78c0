"""The reflection engine: which namespaces are reflected, and routing every pod key to its reflector.

Namespace pairs come from `NamespaceMap.status.currentMapping` (phase Accepted) in the tenant
namespace. A pod whose namespace is paired goes to the pod reflector, once the pair's caches have
synced (never to the fallback while reflection is merely starting: liqo#2748); a pod whose namespace
is not offloaded at all goes to the fallback. While the pool is away, keys that need it are parked
(not retried); when it returns, every pod is re-queued at once with its backoff reset.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from reflectors.charges import FinishedPods
from reflectors.configuration import ConfigurationNotReady, ConfigurationReflector
from reflectors.context import ReflectionContext
from reflectors.fallback import FallbackReflector
from reflectors.forge import constants as c
from reflectors.forge import names as fnames
from reflectors.forge import pods as fp
from reflectors.forge.shadowpod import local_pod_uid_of
from reflectors.generic import PoolUnavailable, Reflector, count_result
from reflectors.pairs import NamespacePair, new_pair, remote_selector
from reflectors.pods import PodReflector
from reflectors.remote_events import RemoteEventReflector
from vkbridge.grant import Admission, Grant
from vkbridge.kube.cache import Cache, object_key
from vkbridge.kube.client import NAMESPACEMAPS, PODS
from vkbridge.kube.reachability import PoolState
from vkbridge.kube.workqueue import RequeueAfter, WorkQueue, run_workers
from vkbridge.logs import get_logger

log = get_logger("reflectors.engine")


PAIRED_PHASES = ("Accepted", "Terminating")
# A pair whose caches have not synced after this long is logged once, with the caches' reason.
PAIR_STUCK_SECONDS = 10.0


def accepted_pairs(namespace_maps: Sequence[Mapping[str, Any]]) -> dict[str, tuple[str, str]]:
    """local namespace -> (remote namespace, phase) for every mapping the pool Accepted or is removing.

    A Terminating pair stays so that pods being deleted with their namespace finish the normal way
    (ShadowPod deleted, remote pod gone, local pod removed); nothing new is sent to it.
    """
    out: dict[str, tuple[str, str]] = {}
    for nm in namespace_maps:
        current = (nm.get("status") or {}).get("currentMapping") or {}
        for local, entry in current.items():
            if not isinstance(entry, Mapping) or not entry.get("remoteNamespace"):
                continue
            if entry.get("phase") in PAIRED_PHASES:
                out[str(local)] = (str(entry["remoteNamespace"]), str(entry["phase"]))
    return out


def mapping_entries(namespace_maps: Sequence[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """local namespace -> its ``currentMapping`` entry, whatever the phase."""
    out: dict[str, Mapping[str, Any]] = {}
    for nm in namespace_maps:
        for local, entry in ((nm.get("status") or {}).get("currentMapping") or {}).items():
            if isinstance(entry, Mapping):
                out[str(local)] = entry
    return out


def requested_namespaces(namespace_maps: Sequence[Mapping[str, Any]]) -> set[str]:
    """Namespaces someone asked to offload (desired) or the pool knows of (any phase)."""
    out: set[str] = set()
    for nm in namespace_maps:
        out.update(((nm.get("spec") or {}).get("desiredMapping") or {}).keys())
        out.update(((nm.get("status") or {}).get("currentMapping") or {}).keys())
    return out


class ReflectionEngine:
    def __init__(
        self,
        ctx: ReflectionContext,
        admission: Admission,
        *,
        pod_workers: int = 10,
        event_workers: int = 3,
        configuration_workers: int = 3,
        secret_policy: str = c.POLICY_DENY_LIST,
        configmap_policy: str = c.POLICY_DENY_LIST,
        inactivity_timeout: float = 60.0,
    ) -> None:
        self.ctx = ctx
        self.admission = admission
        self.pod_workers = max(1, pod_workers)
        self.inactivity_timeout = inactivity_timeout
        self.local_pods = Cache(
            ctx.home,
            PODS,
            field_selector=f"spec.nodeName={ctx.node_name}",
            name="consumer/pods",
            inactivity_timeout=inactivity_timeout,
            compact=True,  # the biggest cache by far: thousands of whole pods
        )
        self.namespace_maps = Cache(
            ctx.home,
            NAMESPACEMAPS,
            ctx.tenant_namespace,
            label_selector=f"{c.REMOTE_CLUSTER_ID_LABEL}={ctx.remote_cluster_id}",
            name="consumer/namespacemaps",
            inactivity_timeout=inactivity_timeout,
        )
        self.queue: WorkQueue[str] = WorkQueue("pods", metrics=ctx.metrics.workqueue("pods"))
        self.pairs: dict[str, NamespacePair] = {}
        self.parked: set[str] = set()
        self.configuration = ConfigurationReflector(
            ctx,
            configuration_workers,
            local_pods=self.local_pods,
            on_object_ready=self._requeue_pods,
            secret_policy=secret_policy,
            configmap_policy=configmap_policy,
            inactivity_timeout=inactivity_timeout,
        )
        self.pods = PodReflector(ctx, self.local_pods, admission, self.configuration)
        admission.on_freed(self._on_freed)
        # read at scrape time: exact the moment a pod is admitted, deleted or finishes
        ctx.metrics.pods_waiting_for_grant.set_function(lambda: len(admission.waiters))
        self.fallback = FallbackReflector(ctx)
        self.events = RemoteEventReflector(
            ctx,
            self.local_pods,
            event_workers,
            inactivity_timeout=inactivity_timeout,
            recorded_uid=self._recorded_local_uid,
        )
        # Every reflector beside the pods' one, driven the same way: workers, and one pair per namespace.
        self.reflectors: tuple[Reflector, ...] = (self.configuration, self.events)
        self._selector = remote_selector(ctx.node_name, ctx.local_cluster_id, ctx.remote_cluster_id)
        self._tg: asyncio.TaskGroup | None = None
        self._pairs_dirty = asyncio.Event()
        self._requeue_waiting_pending = False
        self.refused: dict[str, str] = {}  # namespace the pool refused to map -> why (logged once)
        self._told_refused: set[str] = set()  # pods whose wait for such a namespace was logged
        self.unpaired: dict[str, str] = {}  # local namespace -> the remote it was paired with
        self._ns_pods: Counter[str] = Counter()  # local pods of our node per namespace
        self._gated: set[str] = set()  # pods waiting before admission for another pair to sync
        self.pods.admission_gate = self._admission_gate
        self._finished = FinishedPods()  # local pods Succeeded/Failed, for _account
        self.local_pods.subscribe(self._finished.track)
        self.local_pods.subscribe(self._on_local)
        self.namespace_maps.subscribe(lambda *_: self._pairs_dirty.set())
        ctx.reach.subscribe(self._on_pool)

    # ------------------------------------------------------------------------------------------ run

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tg:
            self._tg = tg
            tg.create_task(self.local_pods.run(), name="cache-local-pods")
            tg.create_task(self.namespace_maps.run(), name="cache-namespacemaps")
            for reflector in self.reflectors:
                tg.create_task(reflector.run(), name=f"{reflector.name}-workers")
            await self.namespace_maps.wait_synced()
            await self.local_pods.wait_synced()
            log.info(
                "consumer caches synced",
                pods=len(self.local_pods),
                namespace_maps=len(self.namespace_maps),
            )
            self._sync_pairs()
            tg.create_task(self._pairs_loop(), name="namespace-pairs")
            tg.create_task(
                run_workers(self.queue, self._handle, self.pod_workers, "pods", on_result=self._on_result),
                name="pod-workers",
            )
            tg.create_task(self._gauges_loop(), name="reflection-gauges")
            for key in self.local_pods.keys():
                self.queue.add(key)

    def stop(self) -> None:
        self.queue.shutdown()
        for reflector in self.reflectors:
            reflector.stop()

    # ------------------------------------------------------------------------------------------ pairs

    async def _pairs_loop(self) -> None:
        while True:
            await self._pairs_dirty.wait()
            self._pairs_dirty.clear()
            self._sync_pairs()

    def _sync_pairs(self) -> None:
        maps = self.namespace_maps.list()
        desired = accepted_pairs(maps)
        for local in list(self.pairs):
            pair = self.pairs[local]
            if local not in desired or desired[local][0] != pair.remote:
                self._stop_pair(self.pairs.pop(local))
        for local, (remote, phase) in desired.items():
            if local not in self.pairs:
                self._start_pair(local, remote)
            pair = self.pairs[local]
            if pair.phase != phase:
                log.info("namespace mapping phase changed", namespace=local, remote=remote, phase=phase)
                pair.phase = phase
                self._requeue_namespace(local)
        self._sync_refusals(maps)

    def _sync_refusals(self, maps: Sequence[Mapping[str, Any]]) -> None:
        """Log once per namespace why the pool refuses it, and re-handle its pods so each gets an event."""
        refused: dict[str, str] = {}
        for local, entry in mapping_entries(maps).items():
            problem = None if local in self.pairs else fnames.mapping_problem(local, entry)
            if problem is not None:
                refused[local] = problem
        for local, problem in refused.items():
            if self.refused.get(local) != problem:
                log.warning("namespace not offloaded: its pods wait", namespace=local, reason=problem)
                self._requeue_namespace(local)
        for local in self.refused.keys() - refused.keys():
            log.info("namespace no longer refused by the pool", namespace=local)
        self.refused = refused

    def _start_pair(self, local: str, remote: str) -> None:
        assert self._tg is not None
        pair = new_pair(self.ctx.pool, local, remote, self._selector, self.queue.add, self.inactivity_timeout)
        finished = FinishedPods()  # its remote pods Succeeded/Failed
        pair.remote_pods.subscribe(finished.track)
        pair.shadows.subscribe(lambda _t, old, new: self._account(pair, finished, old, new))
        for cache in pair.caches():
            pair.tasks.append(self._tg.create_task(cache.run(), name=f"cache-{cache.name}"))
        for reflector in self.reflectors:
            reflector.start_pair(local, remote, self._tg.create_task)
        pair.tasks.append(self._tg.create_task(self._when_synced(pair), name=f"pair-sync-{local}"))
        self.pairs[local] = pair
        self.unpaired.pop(local, None)
        log.info("reflection starting", namespace=local, remote=remote)

    def _stop_pair(self, pair: NamespacePair) -> None:
        for task in pair.tasks:
            task.cancel()
        self.pods.charges.release_namespace(pair.local)  # its ShadowPods are out of sight: no leaked share
        for reflector in self.reflectors:
            reflector.stop_pair(pair.local)
        log.info("reflection stopped", namespace=pair.local, remote=pair.remote)
        self.unpaired[pair.local] = pair.remote  # its terminating pods: the fallback looks there first
        self._requeue_gated()
        self._requeue_namespace(pair.local)

    async def _when_synced(self, pair: NamespacePair) -> None:
        if not await self._wait_pair(pair, PAIR_STUCK_SECONDS):
            # Once, not per pod or per retry: the caches retry on their own with a capped backoff. Only
            # this namespace's pods wait; others go on (new admissions wait only if it holds pods).
            log.warning(
                "namespace reflection not starting: its pods wait",
                namespace=pair.local,
                remote=pair.remote,
                reason=self._pair_problem(pair),
            )
            await self._wait_pair(pair, None)
        log.info(
            "reflection started",
            namespace=pair.local,
            remote=pair.remote,
            shadowpods=len(pair.shadows),
            remote_pods=len(pair.remote_pods),
        )
        self._requeue_namespace(pair.local)
        self._requeue_gated()
        if self.all_pairs_synced():
            self._requeue_waiting()

    async def _wait_pair(self, pair: NamespacePair, timeout: float | None) -> bool:
        """Wait for the pair's pod caches and those of the reflectors pods wait for; False if ``timeout``
        passed first."""
        try:
            async with asyncio.timeout(timeout):
                await pair.shadows.wait_synced()
                await pair.remote_pods.wait_synced()
                for reflector in self._gates():
                    await reflector.wait_synced(pair.local)
        except TimeoutError:
            return False
        return True

    def _pair_problem(self, pair: NamespacePair) -> str:
        caches = [*pair.caches(), *(c for r in self._gates() for c in r.caches_of(pair.local))]
        stuck = [f"{c.name}: {c.problem or c.state}" for c in caches if not c.synced]
        return "; ".join(stuck) or "configuration not synced"

    def _admission_gate(self, key: str) -> str | None:
        """Why a new ShadowPod for ``key`` must wait: another pair that holds pods of our node has not
        synced, so its ShadowPods are not counted against the grant yet (restart safety). A pair with no
        pods here holds no charge; status, metadata and deletion never wait for other pairs."""
        ns = key.split("/", 1)[0]
        for pair in self.pairs.values():
            if pair.local != ns and self._ns_pods.get(pair.local) and not self._pair_synced(pair):
                self._gated.add(key)
                return f"namespace {pair.local} is not reflected yet: its ShadowPods are not counted"
        return None

    def _requeue_gated(self) -> None:
        gated, self._gated = self._gated, set()
        for key in gated:
            self.queue.add(key)

    def all_pairs_synced(self) -> bool:
        return all(self._pair_synced(p) for p in self.pairs.values())

    def _pair_synced(self, pair: NamespacePair) -> bool:
        return pair.synced and all(r.synced(pair.local) for r in self._gates())

    def _gates(self) -> list[Reflector]:
        return [r for r in self.reflectors if r.gates_pods]

    def _account(
        self,
        pair: NamespacePair,
        remote_finished: FinishedPods,
        old: Mapping[str, Any] | None,
        new: Mapping[str, Any] | None,
    ) -> None:
        """ShadowPods count against the grant from the moment we see them (restart safety), and stop
        counting the moment they finish, are being deleted or are gone. Whether its pods finished comes
        from their change feeds: the local pod is decoded only to make a charge."""
        name = fp.name_of(new if new is not None else old)
        key = f"{pair.local}/{name}"
        if new is None:
            self.pods.charges.release_gone(key, old)
            return
        finished = self._finished.finished(key) or remote_finished.finished_for(f"{pair.remote}/{name}", new)
        self.pods.charges.account_seen(
            key, new, finished=finished, read_local=lambda: self.local_pods.get(key)
        )

    def _recorded_local_uid(self, namespace: str, name: str, uid: str) -> str | None:
        """The local pod UID recorded by the pool pod or ShadowPod ``name`` of the pair, if it is the one of
        UID ``uid`` (a remote Event's involved object): None when we do not hold it or it records none."""
        pair = self.pairs.get(namespace)
        if pair is None or not uid:
            return None
        for cache in (pair.remote_pods, pair.shadows):
            obj = cache.get(f"{pair.remote}/{name}")
            if obj is not None and fp.uid_of(obj) == uid:
                return local_pod_uid_of(obj)
        return None

    # ------------------------------------------------------------------------------------------ routing

    async def _handle(self, key: str) -> RequeueAfter | None:
        ns = key.split("/", 1)[0]
        pair = self.pairs.get(ns)
        try:
            if pair is None:
                if ns in requested_namespaces(self.namespace_maps.list()):
                    self._tell_refused(key, ns)  # mapping not Accepted (yet): wait, never abort
                    return None
                return await self.fallback.handle(key, self.local_pods.get(key), self.unpaired.get(ns))
            if not self._pair_synced(pair):
                if not self.ctx.reach.connected:
                    self.parked.add(key)
                return None  # queued again by _when_synced
            if pair.phase != "Accepted":  # read the pod only then: each read of a compact cache decodes it
                local = self.local_pods.get(key)
                if local is not None and not fp.is_terminating(local):
                    return None  # the pool is removing this namespace: send nothing new, abort nothing
            return await self.pods.handle(key, pair)  # new admissions wait on _admission_gate
        except PoolUnavailable as err:
            if self.ctx.reach.connected:
                # One request failed in transit (a tunnel reset) but the pinger still reaches the pool:
                # parking would wait for a Lost -> Connected transition that may never come. Retry soon;
                # if the pool is really gone, the next try finds it Lost and parks the key.
                log.warning(
                    "pool request failed in transit; retrying", pod=key, retry_in="1s", error=str(err)
                )
                return RequeueAfter(1.0)
            self.parked.add(key)
            return None
        except ConfigurationNotReady:
            return RequeueAfter(1.0)

    def _tell_refused(self, key: str, ns: str) -> None:
        """A pod waiting for a namespace the pool refuses: one log line, and an event each handle."""
        local = self.local_pods.get(key)
        problem = self.refused.get(ns)
        if problem is None or local is None or fp.is_terminating(local):
            return
        if key not in self._told_refused:
            self._told_refused.add(key)
            log.warning("pod waits: its namespace is not offloaded", pod=key, reason=problem)
        self.ctx.recorder.event(
            local, c.EVENT_TYPE_WARNING, c.EVENT_FAILED_REFLECTION,
            c.failed_reflection_msg(self.ctx.remote_cluster_id, problem),
        )  # fmt: skip

    def _requeue_pods(self, keys: Collection[str]) -> None:
        """Pods that waited for a Secret/ConfigMap which now exists on the pool."""
        for key in keys:
            self.queue.add(key)

    def _on_local(self, _type: str, old: Any, new: Any) -> None:
        obj = new if new is not None else old
        if obj is not None:
            key = object_key(obj)
            ns = key.split("/", 1)[0]
            if new is None:
                self._told_refused.discard(key)
                self._ns_pods[ns] -= 1
                if self._ns_pods[ns] <= 0:
                    del self._ns_pods[ns]
                    if self._gated:
                        self._requeue_gated()  # that namespace may have been what held them
            elif old is None:
                self._ns_pods[ns] += 1
            self.queue.add(key)  # the pod reflector stamped its arrival already (it subscribed first)

    def _on_pool(self, old: PoolState, new: PoolState) -> None:
        if new is not PoolState.CONNECTED:
            return
        if old is PoolState.UNKNOWN:
            # First contact: every pod was queued at start already, but keys parked before it need it now.
            waiting, self.parked = self.parked, set()
            for key in waiting:
                self.queue.add(key)
            if waiting:
                log.info("pool reached: retrying parked pods", parked=len(waiting))
            return
        parked = len(self.parked)
        self.parked.clear()
        self.queue.reset_backoff()
        for key in self.local_pods.keys():
            self.queue.add(key)
        log.info("pool back: re-syncing every pod", pods=len(self.local_pods), parked=parked)

    def _requeue_namespace(self, namespace: str) -> None:
        prefix = namespace + "/"
        for key in self.local_pods.keys():
            if key.startswith(prefix):
                self.queue.add(key)

    # ------------------------------------------------------------------------------------------ grant

    def set_grant(self, grant: Mapping[str, str]) -> None:
        try:
            new = Grant.from_resource_list(grant)
        except ValueError as err:
            log.error("grant unreadable: keeping the previous one", error=str(err)[:200])
            return
        if dict(new.resources) == dict(self.admission.grant.resources):
            return
        self.admission.set_grant(new)
        log.info("grant changed", grant=",".join(f"{k}={v}" for k, v in sorted(grant.items())))
        self._requeue_waiting()

    def _on_freed(self) -> None:
        """The ledger freed a charge while pods wait: re-queue them once the current handle is done."""
        if not self._requeue_waiting_pending:
            self._requeue_waiting_pending = True
            asyncio.get_running_loop().call_soon(self._requeue_waiting)

    def _requeue_waiting(self) -> None:
        """Pods waiting for the grant get another chance, oldest first."""
        self._requeue_waiting_pending = False
        for key in self.admission.waiting_oldest_first():
            if self.local_pods.get(key) is None:
                self.admission.stop_waiting(key)
                continue
            self.queue.add(key)

    # ------------------------------------------------------------------------------------------ metrics

    def _on_result(self, key: str, ok: bool, _duration: float) -> None:
        count_result(self.ctx, key.split("/", 1)[0], c.REFLECTOR_POD, ok)

    async def _gauges_loop(self) -> None:
        m = self.ctx.metrics
        while True:
            m.reflected_pods.set(sum(len(p.shadows) for p in self.pairs.values()))
            m.show_grant(self.admission.grant.resources, self.admission.used())
            await asyncio.sleep(5.0)
