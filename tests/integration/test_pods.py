"""Pod reflection (issue: ShadowPods out, status back, deletion, fallback, refusals)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import names as n
from e2e.fixtures_pool import offload_namespace
from e2e.vkbridge_proc import VkbridgeProcess
from e2e.waiting import eventually
from reflectors.context import ReflectionContext
from reflectors.engine import ReflectionEngine
from reflectors.pairs import new_pair, remote_selector
from reflectors.pods import PodReflector
from tests.fixtures_vkbridge import node_ready
from tests.integration.helpers import (
    DEFAULT,
    events_for,
    get,
    must,
    phase,
    pod_path,
    pool_pod,
    rs_path,
    set_grant,
    shadow_path,
    wait_until,
)
from tests.support.offload import Offload, wait_node_idle
from vkbridge.app import HomeEventWriter
from vkbridge.grant import Admission, Grant
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import NAMESPACEMAPS, PODS, SHADOWPODS, ApiError, KubeClient, Resource
from vkbridge.kube.events import EventRecorder
from vkbridge.kube.kubeconfig import load_kubeconfig_file
from vkbridge.kube.reachability import PoolState, Reachability
from vkbridge.metrics import Metrics

pytestmark = pytest.mark.integration


def restart_count(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount") or 0)


def test_burst_hello_runs_on_the_pool_and_status_is_mirrored(offload: Offload) -> None:
    consumer, bundle, ns = offload.consumer, offload.bundle, offload.ns
    offload.run("burst-hello", command="echo hello from the pool; uname -n; sleep 30", restart="Never")
    local = offload.local("burst-hello")
    remote = offload.remote("burst-hello")
    assert local is not None and remote is not None
    assert local["spec"]["nodeName"] == bundle.slug
    assert local["status"]["startTime"] == remote["status"]["startTime"]
    assert (
        local["status"]["containerStatuses"][0]["state"] == remote["status"]["containerStatuses"][0]["state"]
    )
    assert local["status"]["hostIP"] == "127.0.0.1"
    assert local["metadata"]["labels"]["liqo.io/shadowPod"] == "true"
    shadow = offload.shadow("burst-hello")
    assert shadow is not None
    labels = shadow["metadata"]["labels"]
    assert labels["offloading.liqo.io/origin"] == bundle.consumer_id
    assert labels["offloading.liqo.io/destination"] == bundle.slug
    assert labels["offloading.liqo.io/nodename"] == bundle.slug
    assert any(m.get("manager") == "reflection.liqo.io" for m in shadow["metadata"]["managedFields"])
    reasons = {e["reason"] for e in offload.events("burst-hello")}
    assert "SuccessfulReflection" in reasons
    offload.vkbridge.wait_for_log(f"local pod Running.*pod={ns}/burst-hello", 5)
    # The kubelet API listens once kube-controller-manager signed vkbridge's serving certificate.
    logs = wait_until(
        lambda: (r := consumer.kubectl("-n", ns, "logs", "burst-hello", check=False)).returncode == 0 and r,
        60,
        "kubectl logs to work",
        interval=1.0,
    )
    assert "hello from the pool" in logs.stdout


def test_remote_pod_deleted_is_recreated_and_restart_count_grows(offload: Offload) -> None:
    offload.run("web")
    old_uid = offload.remote("web")["metadata"]["uid"]  # type: ignore[index]
    must(offload.pool, "DELETE", pod_path(offload.remote_ns, "web") + "?gracePeriodSeconds=0")
    wait_until(lambda: (offload.remote("web") or {"metadata": {"uid": old_uid}})["metadata"]["uid"]
               != old_uid, 30, "the pool to re-create the pod")  # fmt: skip
    wait_until(lambda: restart_count(offload.local("web") or {}) == 1 and offload.running("web"),
               30, "local restartCount 1 and Running")  # fmt: skip


def test_deleted_shadowpod_is_recreated(offload: Offload) -> None:
    offload.run("api")
    old = offload.shadow("api")
    assert old is not None
    offload.delete_shadow("api")
    wait_until(lambda: (offload.shadow("api") or old)["metadata"]["uid"] != old["metadata"]["uid"],
               30, "the ShadowPod to be re-created")  # fmt: skip
    wait_until(lambda: offload.running("api"), 30, "api Running again")


def test_local_delete_removes_remote_then_local_within_5s(offload: Offload) -> None:
    offload.run("gone")
    t0 = time.monotonic()
    offload.delete("gone")
    wait_until(lambda: offload.local("gone") is None, 5, "the local pod to be gone")
    elapsed = time.monotonic() - t0
    assert offload.shadow("gone") is None
    assert offload.remote("gone") is None
    print(f"\nlocal delete -> remote gone -> local gone in {elapsed:.2f}s")


def test_completed_pod_is_succeeded_and_never_recreated(offload: Offload) -> None:
    offload.create("job", command="echo done", restart="Never")
    wait_until(lambda: offload.phase("job") == "Succeeded", 30, "job Succeeded at home")
    shadow = offload.shadow("job")
    assert shadow is not None
    offload.delete_shadow("job")
    wait_until(lambda: offload.shadow("job") is None, 10, "the ShadowPod to be gone")
    time.sleep(3)  # give a buggy reflector time to re-create it (liqo#3096)
    assert offload.shadow("job") is None
    assert offload.phase("job") == "Succeeded"


def test_daemonset_style_pod_in_non_offloaded_namespace_gets_backoff_and_event(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess, fresh_ns: Any
) -> None:
    ns = fresh_ns(consumer)
    pod = pool_pod(bundle.slug, "agent", node_name=bundle.slug)
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]
    must(consumer, "POST", pod_path(ns), pod)

    def backoff() -> bool:
        p = get(consumer, pod_path(ns, "agent")) or {}
        st = p.get("status") or {}
        return st.get("phase") == "Pending" and st.get("reason") == "OffloadingBackOff"

    wait_until(backoff, 20, "OffloadingBackOff")
    events = wait_until(
        lambda: [e for e in events_for(consumer, ns, "agent") if e["reason"] == "ReflectionDisabled"],
        10,
        "the ReflectionDisabled event",
    )
    assert events[0]["type"] == "Warning"
    assert "offload" in events[0]["message"].lower()


def test_pool_quota_refusal_is_reported_and_pod_runs_once_quota_frees(offload: Offload) -> None:
    consumer, bundle = offload.consumer, offload.bundle
    wait_node_idle(consumer, bundle.slug)
    # Another virtual node of the same consumer holds most of the pool quota: our grant ledger cannot
    # see it (other node label), so only the pool's webhook can refuse our ShadowPod.
    grant = get(consumer, rs_path(bundle))
    assert grant is not None
    hog = {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "ShadowPod",
        "metadata": {
            "name": "hog",
            "labels": {
                "offloading.liqo.io/origin": bundle.consumer_id,
                "offloading.liqo.io/destination": bundle.slug,
                "offloading.liqo.io/nodename": "another-virtual-node",
            },
        },
        "spec": {"pod": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"],
                                         "resources": {"requests": {"cpu": grant["status"]["resources"]["cpu"],
                                                                    "memory": "64Mi"}}}]}},
    }  # fmt: skip
    must(offload.pool, "POST", shadow_path(offload.remote_ns), hog)
    try:
        offload.create("refused", cpu="500m")

        def refused_event() -> dict[str, Any] | None:
            for e in offload.events("refused"):
                if e["reason"] == "FailedReflection" and "quota" in e["message"]:
                    return e
            return None

        event = wait_until(refused_event, 30, "a FailedReflection event with the pool's quota message")
        assert "exceeded" in event["message"]
        assert offload.phase("refused") == "Pending"
    finally:
        offload.delete_shadow("hog")
    # The retry backoff has grown meanwhile; the reflection-touch kick (GUIDE §7.4) re-queues at once.
    must(consumer, "PATCH", pod_path(offload.ns, "refused"), {"metadata": {"annotations": {"multicloud.io/reflection-touch": "1"}}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(
        lambda: offload.running("refused"),
        10,
        "the refused pod to run once quota frees and it is touched",
    )


def test_burst_of_200_survives_sigkill_mid_burst_without_duplicates_or_losses(offload: Offload) -> None:
    from concurrent.futures import ThreadPoolExecutor

    consumer, bundle, ns = offload.consumer, offload.bundle, offload.ns
    n = 200
    set_grant(consumer, bundle, {**DEFAULT, "pods": "400"})
    try:
        names = [f"b{i:03d}" for i in range(n)]
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda name: offload.create(name, cpu="5m", memory="4Mi"), names))

        def shadows() -> list[dict[str, Any]]:
            return list(must(offload.pool, "GET", shadow_path(offload.remote_ns)).get("items") or [])

        wait_until(
            lambda: len(shadows()) >= n // 3, 60, "a third of the burst to reach the pool", interval=0.2
        )
        offload.vkbridge.kill()
        killed_with = len(shadows())
        offload.vkbridge.start()

        def all_running() -> bool:
            items = must(consumer, "GET", pod_path(ns))["items"]
            return len(items) == n and all(p["status"].get("phase") == "Running" for p in items)

        wait_until(all_running, 180, "all 200 pods Running at home", interval=1.0)
        elapsed = time.monotonic() - t0
        items = shadows()
        assert sorted(s["metadata"]["name"] for s in items) == names, "exactly one ShadowPod per pod"
        local = must(consumer, "GET", pod_path(ns))["items"]
        assert len(local) == n, "no local pod deleted"
        assert not [
            p for p in local if p["status"].get("reason") in ("OffloadingAborted", "OffloadingBackOff")
        ]
        print(
            f"\n200-pod burst: all Running in {elapsed:.1f}s; SIGKILL with {killed_with} ShadowPods created"
        )
    finally:
        set_grant(consumer, bundle, DEFAULT)


# --- issue 15: pod identity and lifecycle --------------------------------------------------------

UID_ANNOTATION = "vkbridge.multicloud.io/local-pod-uid"
MERGE = "application/merge-patch+json"


def controller_uid(pod: dict[str, Any] | None) -> str | None:
    for ref in ((pod or {}).get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("controller"):
            return str(ref.get("uid"))
    return None


def test_same_name_replacement_pod_gets_a_new_shadowpod_not_the_old_status(offload: Offload) -> None:
    """Item 8: StatefulSet web-0 force-deleted and re-created while vkbridge is away must not adopt the old
    ShadowPod: the old one is deleted (UID precondition), a new one made for the new UID, and the old remote
    pod's status is never written onto the new pod."""
    vkbridge = offload.vkbridge
    offload.run("web-0", labels={"gen": "one"})
    old_shadow = offload.shadow("web-0")
    old_remote = offload.remote("web-0")
    assert old_shadow is not None and old_remote is not None
    old_started = old_remote["status"]["startTime"]
    vkbridge.kill()
    try:
        offload.delete("web-0", {"gracePeriodSeconds": 0})
        wait_until(lambda: offload.local("web-0") is None, 10, "the old web-0 to be gone")
        time.sleep(1.1)  # a new startTime differs from the old one by at least a second
        new_uid = offload.create("web-0", labels={"gen": "two"})["metadata"]["uid"]
    finally:
        vkbridge.start()
    seen_starts: set[str] = set()

    def replaced() -> bool:
        local = offload.local("web-0") or {}
        if start := (local.get("status") or {}).get("startTime"):
            seen_starts.add(start)
        shadow = offload.shadow("web-0") or {"metadata": {}}
        remote = offload.remote("web-0")
        return (
            (shadow["metadata"].get("labels") or {}).get("gen") == "two"
            and controller_uid(remote) == shadow["metadata"].get("uid")
            and offload.running("web-0")
        )

    wait_until(replaced, 60, "a ShadowPod for the new web-0 and the new pod Running", interval=0.2)
    shadow = offload.shadow("web-0")
    remote = offload.remote("web-0")
    local = offload.local("web-0")
    assert shadow is not None and remote is not None and local is not None
    assert shadow["metadata"]["uid"] != old_shadow["metadata"]["uid"], "the old ShadowPod was adopted"
    assert shadow["metadata"]["annotations"][UID_ANNOTATION] == new_uid
    assert local["status"]["startTime"] == remote["status"]["startTime"] != old_started
    assert old_started not in seen_starts, "the old remote pod's status was written onto the new pod"


def test_terminal_local_pod_gets_no_new_shadowpod_while_its_remote_pod_runs(offload: Offload) -> None:
    """Item 10: a Failed local pod whose ShadowPod is gone while its remote pod still runs (orphaned) is
    neither re-created on the pool nor given the remote pod's Running status: terminal stays terminal."""
    consumer, vkbridge, ns = offload.consumer, offload.vkbridge, offload.ns
    offload.run("done")
    vkbridge.kill()
    try:
        must(consumer, "PATCH", pod_path(ns, "done") + "/status",
             {"status": {"phase": "Failed", "reason": "Evicted", "message": "evicted by a test"}},
             content_type=MERGE)  # fmt: skip
        offload.delete_shadow("done", {"propagationPolicy": "Orphan"})
        wait_until(lambda: offload.shadow("done") is None, 10, "the ShadowPod to be gone")
        assert phase(offload.pool, offload.remote_ns, "done") == "Running"
    finally:
        mark = len(vkbridge.log_text())
        vkbridge.start()
    try:
        wait_until(lambda: node_ready(consumer, offload.bundle.slug) == "True", 60, "the node Ready again")
        vkbridge.wait_for_log(f"reflection started.*namespace={ns}", 30, mark)
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            assert offload.shadow("done") is None, "a finished pod was sent to the pool again"
            assert offload.phase("done") == "Failed"
            time.sleep(0.2)
    finally:
        offload.pool.api("DELETE", pod_path(offload.remote_ns, "done") + "?gracePeriodSeconds=0")


def test_remote_api_server_annotation_is_ignored_with_a_warning_while_support_is_off(
    offload: Offload,
) -> None:
    """Item 19: ``liqo.io/api-server-support: remote`` does not bring back automount, token volumes or a
    remote ServiceAccount while API server support is off; the pod gets a Warning event saying so."""
    pod = offload.pod("wants-api", annotations={
        "liqo.io/api-server-support": "remote", "liqo.io/remote-service-account-name": "pool-admin"})  # fmt: skip
    pod["spec"]["volumes"] = [{"name": "tok", "projected": {"sources": [
        {"serviceAccountToken": {"audience": "vault", "path": "token"}}]}}]  # fmt: skip
    offload.post(pod)
    shadow = wait_until(lambda: offload.shadow("wants-api"), 30, "the ShadowPod")
    spec = shadow["spec"]["pod"]
    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec
    assert spec["volumes"][0]["projected"]["sources"] == []
    event = wait_until(
        lambda: next((e for e in offload.events("wants-api") if e["reason"] == "APIServerSupportIgnored"),
                     None), 10, "the APIServerSupportIgnored event")  # fmt: skip
    assert event["type"] == "Warning" and "liqo.io/api-server-support" in event["message"]
    wait_until(lambda: offload.running("wants-api"), 30, "the pod Running without API access")


def test_one_namespace_that_never_syncs_holds_up_no_other_namespace(offload: Offload, fresh_ns: Any) -> None:
    """Item 11: a remote namespace where vkbridge is denied (403) never syncs; it is logged once with its
    reason, and pods of other namespaces are created, mirrored and deleted as usual meanwhile."""
    consumer, pool, bundle, vkbridge = offload.consumer, offload.pool, offload.bundle, offload.vkbridge
    offload.run("before")
    stuck = fresh_ns(consumer, "stuck")
    stuck_remote = n.remote_namespace(stuck, bundle.consumer_id)
    pool_tenant = n.pool_tenant_ns(bundle.consumer_id)
    # The provider's namespace, made ahead with a RoleBinding granting vkbridge's group nothing.
    must(pool, "POST", "/api/v1/namespaces", {"metadata": {
        "name": stuck_remote, "labels": {n.REMOTE_CLUSTER_ID: bundle.consumer_id},
        "annotations": {n.NS_MANAGED_BY_MAP: f"{pool_tenant}/{bundle.slug}", n.NS_ORIGINAL_NAME: stuck}}})  # fmt: skip
    must(pool, "POST", f"/apis/rbac.authorization.k8s.io/v1/namespaces/{stuck_remote}/rolebindings", {
        "metadata": {"name": pool_tenant},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "nobody-at-all"}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": n.VK_REMOTE_CLUSTERROLE},
    })  # fmt: skip
    mark = len(vkbridge.log_text())
    try:
        offload_namespace(consumer, pool, stuck)
        vkbridge.wait_for_log(rf"reflection starting.*namespace={stuck}\b", 30, mark)
        # Other namespaces go on meanwhile: a new pod is admitted and runs, an old one is deleted.
        offload.run("after")
        offload.delete("before")
        wait_until(lambda: offload.local("before") is None, 15, "the old pod deleted")
        line = vkbridge.wait_for_log(rf"namespace reflection not starting.*namespace={stuck}\b.*", 30, mark)
        assert "403" in line.group(0) or "forbidden" in line.group(0).lower(), line.group(0)
        told = re.findall(
            rf"namespace reflection not starting.*namespace={stuck}\b", vkbridge.log_text()[mark:]
        )
        assert len(told) == 1, told
    finally:
        consumer.api(
            "DELETE", f"/apis/{n.OFFLOADING}/namespaces/{stuck}/namespaceoffloadings/{n.OFFLOADING_NAME}"
        )


# --- in-process reflection on the real planes: timing the vkbridge process cannot pin down -----------
#
# An engine (or a bare pod reflector) of our own, for a node of our own, with a Reachability the test
# drives instead of the pinger: the session's vkbridge never sees these pods (another node) nor these
# ShadowPods (another node label); the pool emulator turns the ShadowPods into pods as usual.

GRANT = {"cpu": "2", "memory": "2Gi", "pods": "20"}


@dataclass
class Rig:
    home: KubeClient
    pool: KubeClient
    ctx: ReflectionContext
    reach: Reachability
    node: str
    ns: str
    remote_ns: str
    tenant: str
    map_name: str

    def pod(self, name: str) -> dict[str, Any]:
        return pool_pod(self.node, name, node_name=self.node)

    async def get_or_none(self, client: KubeClient, resource: Resource, name: str, ns: str) -> Any:
        try:
            return await client.get(resource, name, ns)
        except ApiError as err:
            if err.not_found:
                return None
            raise


class NoConfiguration:
    """The configuration port of a pod that references no Secret or ConfigMap."""

    async def ensure_for_pod(self, pair_local: str, pod: Any) -> list[str]:
        return []

    def track_pod(self, pair_local: str, pod: Any) -> None:
        pass

    def release_pod(self, pod_key: str) -> None:
        pass

    def missing_message(self, missing: Any) -> str:
        return ""

    def absent_references(self, pod_key: str) -> tuple[Any, ...]:
        return ()


# Each poll of the rig is an API request: not more often than this.
until = functools.partial(eventually, interval=0.1)


@pytest.fixture
async def rig(consumer: ControlPlane, pool: ControlPlane, emulator: Any, fresh_ns: Any) -> AsyncIterator[Rig]:
    tag = uuid.uuid4().hex[:6]
    node = f"identity-{tag}"
    ns, tenant = fresh_ns(consumer, "rig"), fresh_ns(consumer, "rigt", wait_sa=False)
    remote_ns = fresh_ns(pool, "rigr")
    must(consumer, "POST", "/api/v1/nodes", {"metadata": {"name": node}})
    home = KubeClient(
        await asyncio.to_thread(load_kubeconfig_file, consumer.admin_kubeconfig), name="consumer"
    )
    pool_client = KubeClient(
        await asyncio.to_thread(load_kubeconfig_file, pool.admin_kubeconfig), name="pool"
    )
    reach = Reachability()
    recorder = EventRecorder(HomeEventWriter(home), "vkbridge-test", host=node)
    recorder_task = asyncio.create_task(recorder.run())
    ctx = ReflectionContext(
        home=home, pool=pool_client, node_name=node, local_cluster_id="identity-home",
        remote_cluster_id=f"idp-{tag}", tenant_namespace=tenant, vk_pod_ip="127.0.0.1", reach=reach,
        recorder=recorder, metrics=Metrics(),
    )  # fmt: skip
    map_name = f"idp-{tag}"
    try:
        yield Rig(home, pool_client, ctx, reach, node, ns, remote_ns, tenant, map_name)
    finally:
        recorder_task.cancel()
        await asyncio.gather(recorder_task, return_exceptions=True)
        for name in await asyncio.to_thread(lambda: [p["metadata"]["name"] for p in must(
                consumer, "GET", pod_path(ns))["items"]]):  # fmt: skip
            consumer.api("DELETE", pod_path(ns, name), {"gracePeriodSeconds": 0})
        consumer.api("DELETE", f"/api/v1/nodes/{node}")
        await home.close()
        await pool_client.close()


@contextlib.asynccontextmanager
async def running_engine(rig: Rig) -> AsyncIterator[ReflectionEngine]:
    """An engine pairing rig.ns with rig.remote_ns through a NamespaceMap in rig.tenant."""
    nm = {
        "apiVersion": "offloading.liqo.io/v1beta1", "kind": "NamespaceMap",
        "metadata": {"name": rig.map_name, "labels": {"liqo.io/remote-cluster-id": rig.ctx.remote_cluster_id}},
        "spec": {"desiredMapping": {rig.ns: rig.remote_ns}},
    }  # fmt: skip
    await rig.home.create(NAMESPACEMAPS, nm, rig.tenant)
    await rig.home.patch(NAMESPACEMAPS, rig.map_name, {"status": {"currentMapping": {
        rig.ns: {"remoteNamespace": rig.remote_ns, "phase": "Accepted"}}}}, rig.tenant, subresource="status")  # fmt: skip
    engine = ReflectionEngine(rig.ctx, Admission(Grant()), pod_workers=2, inactivity_timeout=30)
    engine.set_grant(GRANT)
    task = asyncio.create_task(engine.run())
    try:
        await until(
            lambda: _async(rig.ns in engine.pairs and engine.pairs[rig.ns].synced), 20, "the pair synced"
        )
        yield engine
    finally:
        engine.stop()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def _async(value: Any) -> Any:
    return value


async def test_terminating_pod_whose_new_shadowpod_is_not_cached_yet_is_not_force_deleted(rig: Rig) -> None:
    """Item 9: our cache has not shown the ShadowPod created a moment ago; a terminating local pod must not be
    removed with grace 0 while that ShadowPod exists: the pool is asked first, and the ShadowPod deleted."""
    local_pods = Cache(rig.home, PODS, field_selector=f"spec.nodeName={rig.node}", name="rig/pods")
    cache_task = asyncio.create_task(local_pods.run())
    try:
        reflector = PodReflector(
            rig.ctx, local_pods, Admission(Grant.from_resource_list(GRANT)), NoConfiguration()
        )
        # Pool caches that never ran: exactly what a lagging watch shows (nothing yet).
        selector = remote_selector(rig.node, rig.ctx.local_cluster_id, rig.ctx.remote_cluster_id)
        lagging = new_pair(rig.pool, rig.ns, rig.remote_ns, selector, lambda _k: None, 30)
        rig.reach.set(PoolState.CONNECTED)
        await rig.home.create(PODS, rig.pod("fresh"), rig.ns)
        key = f"{rig.ns}/fresh"
        await until(lambda: _async(local_pods.get(key)), 10, "the pod in our cache")
        await reflector.handle(key, lagging)
        shadow = await rig.get_or_none(rig.pool, SHADOWPODS, "fresh", rig.remote_ns)
        assert shadow is not None, "the ShadowPod was not created"
        await rig.home.delete(PODS, "fresh", rig.ns)  # graceful: nobody confirms it, it stays terminating
        await until(lambda: _async((local_pods.get(key) or {}).get("metadata", {}).get("deletionTimestamp")),
                    10, "the pod terminating in our cache")  # fmt: skip
        await reflector.handle(key, lagging)
        assert await rig.get_or_none(rig.home, PODS, "fresh", rig.ns) is not None, (
            "the local pod was force-deleted while its ShadowPod exists on the pool"
        )
        left = await rig.get_or_none(rig.pool, SHADOWPODS, "fresh", rig.remote_ns)
        assert left is None or left["metadata"].get("deletionTimestamp"), "its ShadowPod was not deleted"
    finally:
        cache_task.cancel()
        await asyncio.gather(cache_task, return_exceptions=True)


async def test_pods_parked_before_first_contact_are_retried_when_the_pool_is_reached(rig: Rig) -> None:
    """Item 12: while the pool state is still Unknown (no ping answered yet) remote writes are parked; the
    first Unknown -> Connected transition must retry them."""
    async with running_engine(rig) as engine:
        await rig.home.create(PODS, rig.pod("early"), rig.ns)
        key = f"{rig.ns}/early"
        await until(lambda: _async(key in engine.parked), 10, "the pod parked while the pool is Unknown")
        assert await rig.get_or_none(rig.pool, SHADOWPODS, "early", rig.remote_ns) is None
        rig.reach.set(PoolState.CONNECTED)
        await until(lambda: rig.get_or_none(rig.pool, SHADOWPODS, "early", rig.remote_ns), 10,
                    "the parked pod's ShadowPod once the pool is reached")  # fmt: skip


async def test_fallback_removes_a_terminating_pod_of_a_just_unpaired_namespace_only_once_the_pool_is_clear(
    rig: Rig,
) -> None:
    """Item 23 (fallback part): a pod deleted while the pool is away, whose namespace is then unpaired, is not
    force-deleted by the fallback while its ShadowPod and remote pod may exist: it waits for the pool, deletes
    the ShadowPod, and removes the local pod only when nothing of it is left there."""
    rig.reach.set(PoolState.CONNECTED)
    async with running_engine(rig) as engine:
        await rig.home.create(PODS, rig.pod("leaving"), rig.ns)
        key = f"{rig.ns}/leaving"
        await until(lambda: rig.get_or_none(rig.pool, PODS, "leaving", rig.remote_ns), 20, "the remote pod")
        rig.reach.set(PoolState.LOST, "test")
        await rig.home.delete(PODS, "leaving", rig.ns)
        await until(lambda: _async(key in engine.parked), 10, "the deletion parked while the pool is away")
        # Unpaired: nobody asks for it any more and the pool no longer maps it (the fallback's case).
        await rig.home.patch(NAMESPACEMAPS, rig.map_name, {"spec": {"desiredMapping": None}}, rig.tenant)
        await rig.home.patch(NAMESPACEMAPS, rig.map_name, {"status": {"currentMapping": None}}, rig.tenant,
                             subresource="status")  # fmt: skip
        await until(lambda: _async(rig.ns not in engine.pairs), 10, "the namespace unpaired")
        await asyncio.sleep(2.0)
        assert await rig.get_or_none(rig.home, PODS, "leaving", rig.ns) is not None, (
            "the fallback force-deleted a pod whose ShadowPod is still on the pool"
        )
        assert await rig.get_or_none(rig.pool, SHADOWPODS, "leaving", rig.remote_ns) is not None
        rig.reach.set(PoolState.CONNECTED)
        await until(lambda: _gone(rig, PODS, "leaving", rig.ns, rig.home), 30, "the local pod removed")
        assert await rig.get_or_none(rig.pool, SHADOWPODS, "leaving", rig.remote_ns) is None
        assert await rig.get_or_none(rig.pool, PODS, "leaving", rig.remote_ns) is None


async def _gone(rig: Rig, resource: Resource, name: str, ns: str, client: KubeClient) -> bool:
    return await rig.get_or_none(client, resource, name, ns) is None


# ============================================= readiness gates (issue 36 point 5)

GATE = "example.com/lb-ready"


def test_a_pod_with_a_readiness_gate_is_ready_once_its_controller_sets_the_condition(
    offload: Offload,
) -> None:
    """The gate is never sent to the pool (nothing there would set it); at home the pod is Running and not
    Ready, with the kubelet's reason, until a controller sets the gate's condition; that condition is kept
    by every later status write, and Ready follows it."""
    pod = offload.pod("gated")
    pod["spec"]["readinessGates"] = [{"conditionType": GATE}]
    offload.post(pod)
    offload.wait_running("gated")

    def condition(kind: str) -> dict[str, Any]:
        local = offload.local("gated") or {}
        return next((c for c in (local.get("status") or {}).get("conditions") or [] if c["type"] == kind), {})

    wait_until(lambda: condition("Ready").get("reason") == "ReadinessGatesNotReady", 15,
               "Ready False for the gate")  # fmt: skip
    assert condition("Ready")["status"] == "False"
    assert "readinessGates" not in offload.shadow("gated")["spec"]["pod"]  # type: ignore[index]

    status = {"status": {"conditions": [{"type": GATE, "status": "True"}]}}
    must(offload.consumer, "PATCH", f"{pod_path(offload.ns, 'gated')}/status", status,
         content_type="application/strategic-merge-patch+json")  # fmt: skip
    wait_until(lambda: condition("Ready").get("status") == "True", 15, "Ready once the gate is True")
    deadline = time.monotonic() + 3.0
    while time.monotonic() < deadline:  # later status writes keep the controller's condition
        assert condition(GATE).get("status") == "True", "the gate's condition was erased"
        time.sleep(0.2)


def test_a_local_spec_update_is_observed_in_the_local_pods_generation(offload: Offload) -> None:
    """A 1.34+ kubelet reports the generation it acted on; the pool pod's own generation means nothing here."""
    offload.run("generations")
    local = offload.local("generations") or {}
    assert local["metadata"]["generation"] == 1
    wait_until(lambda: ((offload.local("generations") or {}).get("status") or {}).get("observedGeneration") == 1,
               15, "observedGeneration 1")  # fmt: skip
    must(offload.consumer, "PATCH", pod_path(offload.ns, "generations"), {"spec": {"activeDeadlineSeconds": 7200}},
         content_type="application/merge-patch+json")  # fmt: skip
    assert (offload.local("generations") or {})["metadata"]["generation"] == 2

    def observed() -> tuple[Any, ...]:
        status = (offload.local("generations") or {}).get("status") or {}
        ready = next((c for c in status.get("conditions") or [] if c["type"] == "Ready"), {})
        return status.get("observedGeneration"), ready.get("observedGeneration")

    wait_until(lambda: observed() == (2, 2), 15, "the update observed (status and Ready condition)")


def test_an_active_deadline_set_on_a_running_pod_ends_it_deadline_exceeded(offload: Offload) -> None:
    """The ShadowPod went without a deadline and its spec is frozen: the deadline set afterwards is enforced
    at home as the kubelet enforces it (Failed/DeadlineExceeded, its Event), and the pool pod is stopped."""
    offload.run("deadline", command="sleep 3600")
    must(offload.consumer, "PATCH", pod_path(offload.ns, "deadline"), {"spec": {"activeDeadlineSeconds": 3}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(lambda: offload.phase("deadline") == "Failed", 20, "Failed at the deadline")
    status = (offload.local("deadline") or {})["status"]
    assert status["reason"] == "DeadlineExceeded", status
    wait_until(lambda: offload.shadow("deadline") is None, 15, "its ShadowPod deleted")
    wait_until(lambda: any(e.get("reason") == "DeadlineExceeded" for e in offload.events("deadline")), 10,
               "the kubelet's DeadlineExceeded Event")  # fmt: skip
    time.sleep(2.0)
    assert offload.phase("deadline") == "Failed"  # terminal stays terminal


def test_host_users_false_reaches_the_pool_pod(offload: Offload) -> None:
    """``hostUsers: false`` asks for a user namespace: the pool runs the pod with one or fails it visibly,
    never silently without (Liqo v1.2 drops the field)."""
    pod = offload.pod("userns")
    pod["spec"]["hostUsers"] = False
    offload.post(pod)
    wait_until(lambda: offload.shadow("userns") is not None, 15, "its ShadowPod")
    assert offload.shadow("userns")["spec"]["pod"]["hostUsers"] is False  # type: ignore[index]
    remote = wait_until(lambda: offload.remote("userns"), 15, "the pool pod")
    assert remote["spec"]["hostUsers"] is False
