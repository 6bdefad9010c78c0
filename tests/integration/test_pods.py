"""Pod reflection (issue: ShadowPods out, status back, deletion, fallback, refusals)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import (
    DEFAULT,
    events_for,
    get,
    must,
    phase,
    pod_path,
    pool_pod,
    set_grant,
    shadow_path,
    wait_until,
)

pytestmark = pytest.mark.integration


def running(plane: ControlPlane, ns: str, name: str) -> bool:
    return phase(plane, ns, name) == "Running"


def active_pods(consumer: ControlPlane, node: str) -> list[str]:
    body = must(consumer, "GET", f"/api/v1/pods?fieldSelector=spec.nodeName={node}")
    return [
        p["metadata"]["name"]
        for p in body["items"]
        if p["status"].get("phase") not in ("Succeeded", "Failed")
    ]


def restart_count(pod: dict[str, Any]) -> int:
    statuses = (pod.get("status") or {}).get("containerStatuses") or [{}]
    return int(statuses[0].get("restartCount") or 0)


def test_burst_hello_runs_on_the_pool_and_status_is_mirrored(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    pod = pool_pod(bundle.slug, "burst-hello", command="echo hello from the pool; uname -n; sleep 30",
                   restart="Never")  # fmt: skip
    must(consumer, "POST", pod_path(ns), pod)
    wait_until(lambda: running(consumer, ns, "burst-hello"), 30, "burst-hello Running at home")
    local = get(consumer, pod_path(ns, "burst-hello"))
    remote = get(pool, pod_path(remote_ns, "burst-hello"))
    assert local is not None and remote is not None
    assert local["spec"]["nodeName"] == bundle.slug
    assert local["status"]["startTime"] == remote["status"]["startTime"]
    assert (
        local["status"]["containerStatuses"][0]["state"] == remote["status"]["containerStatuses"][0]["state"]
    )
    assert local["status"]["hostIP"] == "127.0.0.1"
    assert local["metadata"]["labels"]["liqo.io/shadowPod"] == "true"
    shadow = get(pool, shadow_path(remote_ns, "burst-hello"))
    assert shadow is not None
    labels = shadow["metadata"]["labels"]
    assert labels["offloading.liqo.io/origin"] == bundle.consumer_id
    assert labels["offloading.liqo.io/destination"] == bundle.slug
    assert labels["offloading.liqo.io/nodename"] == bundle.slug
    assert any(m.get("manager") == "reflection.liqo.io" for m in shadow["metadata"]["managedFields"])
    reasons = {e["reason"] for e in events_for(consumer, ns, "burst-hello")}
    assert "SuccessfulReflection" in reasons
    vkbridge.wait_for_log(f"local pod Running.*pod={ns}/burst-hello", 5)
    # The kubelet API listens once kube-controller-manager signed vkbridge's serving certificate.
    logs = wait_until(
        lambda: (r := consumer.kubectl("-n", ns, "logs", "burst-hello", check=False)).returncode == 0 and r,
        60,
        "kubectl logs to work",
        interval=1.0,
    )
    assert "hello from the pool" in logs.stdout


def test_remote_pod_deleted_is_recreated_and_restart_count_grows(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "web"))
    wait_until(lambda: running(consumer, ns, "web"), 30, "web Running")
    old_uid = get(pool, pod_path(remote_ns, "web"))["metadata"]["uid"]  # type: ignore[index]
    must(pool, "DELETE", pod_path(remote_ns, "web") + "?gracePeriodSeconds=0")
    wait_until(lambda: (get(pool, pod_path(remote_ns, "web")) or {"metadata": {"uid": old_uid}})["metadata"]["uid"]
               != old_uid, 30, "the pool to re-create the pod")  # fmt: skip
    wait_until(lambda: restart_count(get(consumer, pod_path(ns, "web")) or {}) == 1 and running(consumer, ns, "web"),
               30, "local restartCount 1 and Running")  # fmt: skip


def test_deleted_shadowpod_is_recreated(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "api"))
    wait_until(lambda: running(consumer, ns, "api"), 30, "api Running")
    old = get(pool, shadow_path(remote_ns, "api"))
    assert old is not None
    must(pool, "DELETE", shadow_path(remote_ns, "api"))
    wait_until(lambda: (get(pool, shadow_path(remote_ns, "api")) or old)["metadata"]["uid"] != old["metadata"]["uid"],
               30, "the ShadowPod to be re-created")  # fmt: skip
    wait_until(lambda: running(consumer, ns, "api"), 30, "api Running again")


def test_local_delete_removes_remote_then_local_within_5s(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "gone"))
    wait_until(lambda: running(consumer, ns, "gone"), 30, "gone Running")
    t0 = time.monotonic()
    must(consumer, "DELETE", pod_path(ns, "gone"))
    wait_until(lambda: get(consumer, pod_path(ns, "gone")) is None, 5, "the local pod to be gone")
    elapsed = time.monotonic() - t0
    assert get(pool, shadow_path(remote_ns, "gone")) is None
    assert get(pool, pod_path(remote_ns, "gone")) is None
    print(f"\nlocal delete -> remote gone -> local gone in {elapsed:.2f}s")


def test_completed_pod_is_succeeded_and_never_recreated(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "job", command="echo done", restart="Never"))
    wait_until(lambda: phase(consumer, ns, "job") == "Succeeded", 30, "job Succeeded at home")
    shadow = get(pool, shadow_path(remote_ns, "job"))
    assert shadow is not None
    must(pool, "DELETE", shadow_path(remote_ns, "job"))
    wait_until(lambda: get(pool, shadow_path(remote_ns, "job")) is None, 10, "the ShadowPod to be gone")
    time.sleep(3)  # give a buggy reflector time to re-create it (liqo#3096)
    assert get(pool, shadow_path(remote_ns, "job")) is None
    assert phase(consumer, ns, "job") == "Succeeded"


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


def test_pool_quota_refusal_is_reported_and_pod_runs_once_quota_frees(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    wait_until(
        lambda: not active_pods(consumer, bundle.slug), 90, "earlier tests' pods to be gone", interval=0.5
    )
    # Another virtual node of the same consumer holds most of the pool quota: our grant ledger cannot
    # see it (other node label), so only the pool's webhook can refuse our ShadowPod.
    grant = get(
        consumer,
        f"/apis/authentication.liqo.io/v1beta1/namespaces/{bundle.tenant_ns}/resourceslices/{bundle.slug}",
    )
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
    must(pool, "POST", shadow_path(remote_ns), hog)
    try:
        must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "refused", cpu="500m"))

        def refused_event() -> dict[str, Any] | None:
            for e in events_for(consumer, ns, "refused"):
                if e["reason"] == "FailedReflection" and "quota" in e["message"]:
                    return e
            return None

        event = wait_until(refused_event, 30, "a FailedReflection event with the pool's quota message")
        assert "exceeded" in event["message"]
        assert phase(consumer, ns, "refused") == "Pending"
    finally:
        must(pool, "DELETE", shadow_path(remote_ns, "hog"))
    # The retry backoff has grown meanwhile; the reflection-touch kick (GUIDE §7.4) re-queues at once.
    must(consumer, "PATCH", pod_path(ns, "refused"), {"metadata": {"annotations": {"multicloud.io/reflection-touch": "1"}}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(
        lambda: running(consumer, ns, "refused"),
        10,
        "the refused pod to run once quota frees and it is touched",
    )


def test_burst_of_200_survives_sigkill_mid_burst_without_duplicates_or_losses(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    from concurrent.futures import ThreadPoolExecutor

    ns, remote_ns = offloaded_ns
    n = 200
    set_grant(consumer, bundle, {**DEFAULT, "pods": "400"})
    try:
        names = [f"b{i:03d}" for i in range(n)]
        t0 = time.monotonic()
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(lambda name: must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, name, cpu="5m",
                                                                                memory="4Mi")), names))  # fmt: skip

        def shadows() -> list[dict[str, Any]]:
            return list(must(pool, "GET", shadow_path(remote_ns)).get("items") or [])

        wait_until(
            lambda: len(shadows()) >= n // 3, 60, "a third of the burst to reach the pool", interval=0.2
        )
        vkbridge.kill()
        killed_with = len(shadows())
        vkbridge.start()

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
