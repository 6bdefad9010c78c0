"""The virtual node (issue: node registration, heartbeat, pool reachability, re-creation)."""

from __future__ import annotations

import signal
import time
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeProcess
from tests.fixtures_vkbridge import node_ready
from tests.integration.helpers import get, must, pod_path, pool_pod, wait_until

pytestmark = pytest.mark.integration

GRACE = 20.0  # the planes' --node-monitor-grace-period


def node(consumer: ControlPlane, bundle: Bundle) -> dict[str, Any]:
    n = get(consumer, f"/api/v1/nodes/{bundle.slug}")
    assert n is not None
    return n


def test_node_is_ready_with_expected_labels_taints_capacity_and_conditions(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess
) -> None:
    n = node(consumer, bundle)
    labels = n["metadata"]["labels"]
    assert labels["multicloud.io/pool"] == bundle.slug
    assert labels["liqo.io/type"] == "virtual-node"
    assert labels["liqo.io/remote-cluster-id"] == bundle.slug
    assert labels["kubernetes.io/hostname"] == bundle.slug
    expected = {
        ("virtual-node.liqo.io/not-allowed", "true", "NoExecute"),
        ("multicloud.io/pool", bundle.slug, "NoSchedule"),
    }

    def taints() -> set[tuple[str, str | None, str]]:
        return {
            (t["key"], t.get("value"), t["effect"])
            for t in node(consumer, bundle)["spec"].get("taints") or []
        }

    # kube-controller-manager lifts its node.kubernetes.io/not-ready taint a moment after Ready.
    wait_until(lambda: taints() == expected, 15, f"exactly our taints (have {taints()})")
    rs = get(
        consumer,
        f"/apis/authentication.liqo.io/v1beta1/namespaces/{bundle.tenant_ns}/resourceslices/{bundle.slug}",
    )
    assert rs is not None
    granted = rs["status"]["resources"]
    assert n["status"]["capacity"] == granted
    assert n["status"]["allocatable"] == granted
    conds = {c["type"]: c for c in n["status"]["conditions"]}
    assert conds["Ready"]["status"] == "True" and conds["Ready"]["reason"] == "KubeletReady"
    for pressure in ("MemoryPressure", "DiskPressure", "PIDPressure"):
        assert conds[pressure]["status"] == "False"
    assert "NetworkUnavailable" not in conds
    assert n["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert n["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == vkbridge.opts.listen_port
    lease = wait_until(
        lambda: get(
            consumer, f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{bundle.slug}"
        ),
        10,
        "the node Lease",
    )
    assert lease["spec"]["holderIdentity"] == bundle.slug
    assert lease["metadata"]["ownerReferences"][0]["uid"] == n["metadata"]["uid"]


def test_scheduler_places_only_tolerating_pods_on_the_virtual_node(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess, offloaded_ns: tuple[str, str]
) -> None:
    ns, _ = offloaded_ns
    ok = pool_pod(bundle.slug, "tolerates")
    must(consumer, "POST", pod_path(ns), ok)
    intolerant = pool_pod(bundle.slug, "no-toleration")
    intolerant["spec"].pop("tolerations")
    must(consumer, "POST", pod_path(ns), intolerant)
    anywhere = pool_pod(bundle.slug, "no-selector-no-toleration")
    anywhere["spec"].pop("tolerations")
    anywhere["spec"].pop("nodeSelector")
    must(consumer, "POST", pod_path(ns), anywhere)

    placed = wait_until(lambda: (get(consumer, pod_path(ns, "tolerates")) or {}).get("spec", {}).get("nodeName"),
                        30, "the tolerating pod to be scheduled")  # fmt: skip
    assert placed == bundle.slug

    def unschedulable(name: str) -> bool:
        pod = get(consumer, pod_path(ns, name)) or {}
        conds = (pod.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)

    wait_until(lambda: unschedulable("no-toleration"), 30, "the intolerant pod to be reported unschedulable")
    for name in ("no-toleration", "no-selector-no-toleration"):
        assert (get(consumer, pod_path(ns, name)) or {}).get("spec", {}).get("nodeName") in (None, ""), name


def test_blackholed_tunnel_makes_node_notready_and_restoring_makes_it_ready(
    consumer: ControlPlane, bundle: Bundle, tunnel: TunnelProxy, vkbridge: VkbridgeProcess
) -> None:
    assert node_ready(consumer, bundle.slug) == "True"
    mark = len(vkbridge.log_text())
    t0 = time.monotonic()
    tunnel.blackhole()
    try:
        wait_until(lambda: node_ready(consumer, bundle.slug) not in ("True", None), GRACE + 15,
                   "the node to go NotReady", interval=0.5)  # fmt: skip
        notready_after = time.monotonic() - t0
        vkbridge.wait_for_log("pool unreachable", 5, start=mark)
    finally:
        tunnel.restore()
    t1 = time.monotonic()
    wait_until(lambda: node_ready(consumer, bundle.slug) == "True", 15, "the node to be Ready again")
    ready_after = time.monotonic() - t1
    vkbridge.wait_for_log("pool reachable again.*outage=", 5, start=mark)
    print(f"\nnode NotReady {notready_after:.1f}s after black-hole; Ready {ready_after:.1f}s after restore")
    lost_lines = vkbridge.log_text()[mark:].count("pool unreachable")
    assert lost_lines == 1, "one line per transition, not one per failed ping"


def test_deleted_node_is_recreated_within_5s(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess
) -> None:
    old_uid = node(consumer, bundle)["metadata"]["uid"]
    must(consumer, "DELETE", f"/api/v1/nodes/{bundle.slug}")
    t0 = time.monotonic()

    def recreated() -> bool:
        n = get(consumer, f"/api/v1/nodes/{bundle.slug}")
        return n is not None and n["metadata"]["uid"] != old_uid

    wait_until(recreated, 5, "the node to be re-created")
    print(f"\nnode re-created in {time.monotonic() - t0:.2f}s")
    wait_until(lambda: node_ready(consumer, bundle.slug) == "True", 15, "the re-created node to be Ready")


def test_removed_pool_taint_is_restored_within_5s_and_foreign_taints_kept(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess
) -> None:
    n = node(consumer, bundle)
    taints = [t for t in n["spec"]["taints"] if t["key"] != "multicloud.io/pool"]
    taints.append({"key": "example.com/other", "value": "x", "effect": "PreferNoSchedule"})
    must(consumer, "PATCH", f"/api/v1/nodes/{bundle.slug}", {"spec": {"taints": taints}},
         content_type="application/merge-patch+json")  # fmt: skip
    t0 = time.monotonic()

    def restored() -> bool:
        keys = {t["key"] for t in node(consumer, bundle)["spec"].get("taints") or []}
        return "multicloud.io/pool" in keys

    wait_until(restored, 5, "the pool taint to be restored")
    print(f"\ntaint restored in {time.monotonic() - t0:.2f}s")
    keys = {t["key"] for t in node(consumer, bundle)["spec"]["taints"]}
    assert "example.com/other" in keys
    # clean up the foreign taint so other tests see the expected set
    n = node(consumer, bundle)
    taints = [t for t in n["spec"]["taints"] if t["key"] != "example.com/other"]
    must(consumer, "PATCH", f"/api/v1/nodes/{bundle.slug}", {"spec": {"taints": taints}},
         content_type="application/merge-patch+json")  # fmt: skip


def test_grant_change_updates_node_capacity_within_2s(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess
) -> None:
    path = f"/apis/authentication.liqo.io/v1beta1/namespaces/{bundle.tenant_ns}/resourceslices/{bundle.slug}"
    rs = get(consumer, path)
    assert rs is not None
    before = dict(rs["status"]["resources"])
    new_cpu = "7" if before.get("cpu") != "7" else "6"
    must(consumer, "PATCH", path, {"spec": {"resources": {"cpu": new_cpu}}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(lambda: (get(consumer, path) or {}).get("status", {}).get("resources", {}).get("cpu") == new_cpu,
               30, "the pool to grant the new cpu")  # fmt: skip
    t0 = time.monotonic()
    wait_until(lambda: node(consumer, bundle)["status"]["capacity"].get("cpu") == new_cpu, 2,
               "the node capacity to follow the grant")  # fmt: skip
    print(f"\ncapacity followed the grant in {time.monotonic() - t0:.2f}s")


def test_sigterm_stops_within_5s_and_leaves_the_node(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess
) -> None:
    t0 = time.monotonic()
    try:
        code = vkbridge.stop(timeout=10)
        took = time.monotonic() - t0
        assert code == 0, vkbridge.tail(20)
        assert took < 5, f"SIGTERM took {took:.1f}s"
        assert get(consumer, f"/api/v1/nodes/{bundle.slug}") is not None, "the Node must stay"
        vkbridge.wait_for_log("shutting down", 1)
        print(f"\nSIGTERM -> exit in {took:.2f}s")
    finally:
        mark = len(vkbridge.log_text())
        vkbridge.start()  # the session's vkbridge serves the tests after this one
        # the Node may still read Ready from before: wait for the new process itself
        vkbridge.wait_for_log("vkbridge running", 60, start=mark)
        wait_until(lambda: node_ready(consumer, bundle.slug) == "True", 60, "Ready again after restart")


def test_sigusr1_logs_every_asyncio_task_and_keeps_running(vkbridge: VkbridgeProcess) -> None:
    """A process that does not stop or progress is diagnosed from its log: SIGUSR1 lists where each task
    waits (the resilience suite sends it before killing a vkbridge that ignored SIGTERM)."""
    started = max(0, vkbridge.log_text().rfind("---- start"))
    vkbridge.wait_for_log("vkbridge running", 60, start=started)  # its handlers are installed by then
    mark = len(vkbridge.log_text())
    assert vkbridge.proc is not None
    vkbridge.proc.send_signal(signal.SIGUSR1)
    vkbridge.wait_for_log("SIGUSR1: dumping asyncio tasks", 10, start=mark)
    wait_until(lambda: "waits_in=" in vkbridge.log_text()[mark:], 10, "a task line")
    assert vkbridge.alive()


def test_virtualnode_label_change_reaches_the_node_within_2s(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess
) -> None:
    vn = f"/apis/offloading.liqo.io/v1beta1/namespaces/{bundle.tenant_ns}/virtualnodes/{bundle.slug}"
    must(consumer, "PATCH", vn, {"spec": {"labels": {"example.com/team": "blue"}}},
         content_type="application/merge-patch+json")  # fmt: skip
    try:
        t0 = time.monotonic()
        wait_until(lambda: node(consumer, bundle)["metadata"]["labels"].get("example.com/team") == "blue", 2,
                   "the new VirtualNode label on the node")  # fmt: skip
        print(f"\nVirtualNode label reached the node in {time.monotonic() - t0:.2f}s")
    finally:
        must(consumer, "PATCH", vn, {"spec": {"labels": {"example.com/team": None}}},
             content_type="application/merge-patch+json")  # fmt: skip
    wait_until(lambda: "example.com/team" not in node(consumer, bundle)["metadata"]["labels"], 2,
               "the removed VirtualNode label to leave the node")  # fmt: skip
