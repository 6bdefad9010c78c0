"""The ResourceSlice grant is enforced before anything reaches the pool (issue: grant enforcement).

kube-scheduler already fits requests against the node's allocatable (= the grant), so pods that must
be refused by vkbridge itself are bound with spec.nodeName, as a user or another scheduler can do.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.emulator.names import OFFLOADING, OFFLOADING_NAME
from e2e.fixtures_pool import offload_namespace
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import (
    DEFAULT,
    get,
    must,
    pod_path,
    pool_pod,
    set_grant,
    shadow_path,
    wait_until,
)
from tests.support.offload import Offload, wait_node_idle

pytestmark = pytest.mark.integration


@pytest.fixture
def quiet_grant(consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess) -> Iterator[None]:
    """No other pod uses the grant during the test (earlier tests' namespaces are still going away)."""
    wait_node_idle(consumer, bundle.slug)
    set_grant(consumer, bundle, DEFAULT)
    yield
    set_grant(consumer, bundle, DEFAULT)


def run_pods(offload: Offload, names: Sequence[str], **pod: Any) -> None:
    """Create the pods (scheduled as usual), then wait until each one Runs: they start in parallel."""
    for name in names:
        offload.create(name, **pod)
    for name in names:
        offload.wait_running(name)


def held_for_grant(offload: Offload, name: str, text: str = "does not fit in the pool grant",
                   **pod: Any) -> dict[str, Any]:  # fmt: skip
    """Bind the pod to our node past the scheduler; vkbridge's Warning that it waits for the grant."""
    offload.create(name, node_name=offload.bundle.slug, **pod)
    event: dict[str, Any] = wait_until(lambda: offload.warning(name, text), 20,
                                       f"{name} to wait for the grant")  # fmt: skip
    return event


def test_gpu_and_hugepages_pods_never_reach_the_pool(quiet_grant: None, offload: Offload) -> None:
    gpu = offload.pod("gpu", node_name=offload.bundle.slug)
    gpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", "nvidia.com/gpu": "1"},
                                                 "limits": {"nvidia.com/gpu": "1"}}  # fmt: skip
    huge = offload.pod("huge", node_name=offload.bundle.slug)
    huge["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "64Mi", "hugepages-2Mi": "64Mi"},
        "limits": {"memory": "64Mi", "hugepages-2Mi": "64Mi"},
    }
    offload.post(gpu)
    offload.post(huge)
    event = wait_until(lambda: offload.warning("gpu", "the pool grant has no nvidia.com/gpu"), 20,
                       "the GPU event")  # fmt: skip
    assert event["reason"] == "FailedReflection"
    wait_until(lambda: offload.warning("huge", "the pool grant has no hugepages-2Mi"), 20,
               "the hugepages event")  # fmt: skip
    time.sleep(2)
    for name in ("gpu", "huge"):
        assert offload.phase(name) == "Pending"
        assert offload.shadow(name) is None, f"{name} reached the pool"


def test_pod_over_remaining_cpu_waits_then_runs_when_another_completes(
    quiet_grant: None, offload: Offload
) -> None:
    run_pods(offload, ["big"], cpu="3", command="sleep 6", restart="Never")
    event = held_for_grant(offload, "next", cpu="2", restart="Never", command="sleep 1")
    assert "cpu requested 2 free 1" in event["message"], event["message"]
    assert offload.shadow("next") is None
    wait_until(lambda: offload.phase("big") == "Succeeded", 30, "big to complete")
    wait_until(lambda: offload.shadow("next") is not None, 5, "next to be sent once cpu frees")


def test_pods_limit_of_three_fourth_waits_until_one_is_deleted(quiet_grant: None, offload: Offload) -> None:
    set_grant(offload.consumer, offload.bundle, {**DEFAULT, "pods": "3"})
    for i in range(4):
        offload.create(f"p{i}", cpu="10m", node_name=offload.bundle.slug)
        if i < 3:
            wait_until(lambda i=i: offload.shadow(f"p{i}") is not None, 20, f"p{i} sent")
    event = wait_until(lambda: offload.warning("p3", "pods requested 1 free 0"), 20, "the pods event")
    assert event is not None
    assert offload.shadow("p3") is None
    offload.delete("p0")
    wait_until(lambda: offload.phase("p3") == "Running", 30, "p3 Running after p0 was deleted")


def test_grant_reduced_below_usage_keeps_running_pods_and_new_pods_wait(
    quiet_grant: None, offload: Offload
) -> None:
    run_pods(offload, ["a", "b"], cpu="1")
    set_grant(offload.consumer, offload.bundle, {**DEFAULT, "cpu": "1"})
    held_for_grant(offload, "late", cpu="100m")
    time.sleep(2)
    for name in ("a", "b"):
        assert offload.phase(name) == "Running", f"{name} was touched by a smaller grant"
        assert offload.shadow(name) is not None
    assert offload.shadow("late") is None


def test_succeeded_pod_frees_its_share_at_once(quiet_grant: None, offload: Offload) -> None:
    set_grant(offload.consumer, offload.bundle, {**DEFAULT, "cpu": "1"})
    run_pods(offload, ["first"], cpu="1", command="sleep 4", restart="Never")
    held_for_grant(offload, "second", text="does not fit", cpu="1")
    wait_until(lambda: offload.phase("first") == "Succeeded", 30, "first Succeeded")
    t0 = time.monotonic()
    wait_until(lambda: offload.shadow("second") is not None, 2, "second admitted within 2 s")
    print(f"\nnext pod admitted {time.monotonic() - t0:.2f}s after the first one Succeeded")


# ---- issue 15 items 1-5: the ledger after a restart, pod-level resources, un-pairing, the wait gauge ---------


def ledger_cpu(vkbridge: VkbridgeProcess) -> float | None:
    """The ledger's cpu use as /metrics shows it (refreshed every 5 s); None while it does not answer."""
    values = vkbridge.metrics()
    return values.get('vkbridge_grant_used_resources{resource="cpu"}') if values else None


def waiting_gauge(vkbridge: VkbridgeProcess) -> float | None:
    return vkbridge.metrics().get("vkbridge_pods_waiting_for_grant")


def no_pool_refusal(offload: Offload, name: str) -> None:
    """vkbridge held the pod back itself: the pool's quota webhook never had to refuse it."""
    refused = offload.warning(name, "quota usage exceeded")
    assert refused is None, f"{name} was sent and the pool refused it: {refused['message']}"


def test_full_grant_survives_sigkill_and_new_pods_wait(quiet_grant: None, offload: Offload) -> None:
    """Restart safety end to end: the ShadowPods found at start-up are charged what they were admitted
    with (a finished pod nothing), so after a SIGKILL a full 4-CPU grant stays full."""
    vkbridge, ns = offload.vkbridge, offload.ns
    offload.create("done", cpu="1", command="echo done", restart="Never")
    wait_until(lambda: offload.phase("done") == "Succeeded", 30, "done Succeeded")
    run_pods(offload, ["a", "b"], cpu="2")
    wait_until(lambda: ledger_cpu(vkbridge) == 4, 15, "the ledger to hold 4 cpu before the kill")

    vkbridge.kill()  # SIGKILL: nothing is flushed, nothing said goodbye
    mark = len(vkbridge.log_text())
    vkbridge.start()
    vkbridge.wait_for_log(rf"reflection started.*namespace={ns}", 60, start=mark)
    wait_until(lambda: ledger_cpu(vkbridge) == 4, 15, "the restarted ledger to hold the same 4 cpu")

    event = held_for_grant(offload, "late", cpu="1")
    assert "cpu requested 1 free 0" in event["message"], event["message"]
    time.sleep(2)
    assert offload.shadow("late") is None, "late was sent over a full grant"
    no_pool_refusal(offload, "late")
    for name in ("a", "b"):
        assert offload.phase(name) == "Running", f"{name} was disturbed by the restart"
    offload.delete("a")
    wait_until(lambda: offload.phase("late") == "Running", 30, "late Running once a is deleted")


def test_pod_level_resources_reach_the_pool_and_are_charged(quiet_grant: None, offload: Offload) -> None:
    """KEP-2837 pod-level requests are what the grant charges, so they travel to the pool too (else the
    pool runs the pod BestEffort and its quota counts the containers' 100m)."""
    resources = {"requests": {"cpu": "3", "memory": "256Mi"}, "limits": {"memory": "256Mi"}}
    run_pods(offload, ["podlevel"], extra_spec={"resources": resources})
    shadow = offload.shadow("podlevel")
    assert shadow is not None
    assert shadow["spec"]["pod"].get("resources") == resources, "pod-level resources not sent"
    remote = offload.remote("podlevel")
    assert remote is not None and remote["spec"].get("resources") == resources
    wait_until(lambda: ledger_cpu(offload.vkbridge) == 3, 15, "the ledger to charge the pod-level 3 cpu")
    event = held_for_grant(offload, "more", cpu="2")
    assert "cpu requested 2 free 1" in event["message"], event["message"]


def test_unpaired_namespace_frees_its_pods_share(quiet_grant: None, offload: Offload, fresh_ns: Any) -> None:
    consumer, pool, bundle, ns = offload.consumer, offload.pool, offload.bundle, offload.ns
    run_pods(offload, ["a", "b"], cpu="2")
    other = fresh_ns(consumer)
    other_remote = offload_namespace(consumer, pool, other)

    must(consumer, "DELETE", f"/apis/{OFFLOADING}/namespaces/{ns}/namespaceoffloadings/{OFFLOADING_NAME}")
    nm_path = f"/apis/{OFFLOADING}/namespaces/{bundle.tenant_ns}/namespacemaps/{bundle.slug}"

    def unpaired() -> bool:
        nm = get(consumer, nm_path) or {}
        return ns not in ((nm.get("status") or {}).get("currentMapping") or {})

    wait_until(unpaired, 90, f"{ns} to be un-paired")
    wait_until(lambda: ledger_cpu(offload.vkbridge) == 0, 15, "the un-paired pods' 4 cpu to be freed")
    must(consumer, "POST", pod_path(other), pool_pod(bundle.slug, "after", cpu="1", node_name=bundle.slug))
    wait_until(lambda: get(pool, shadow_path(other_remote, "after")) is not None, 20, "after to be sent")


def test_waiting_gauge_drops_when_the_pod_is_admitted(quiet_grant: None, offload: Offload) -> None:
    run_pods(offload, ["big"], cpu="4", command="sleep 5", restart="Never")
    offload.create("next", cpu="1", node_name=offload.bundle.slug)
    wait_until(lambda: waiting_gauge(offload.vkbridge) == 1, 10, "vkbridge_pods_waiting_for_grant 1")
    wait_until(lambda: offload.shadow("next") is not None, 30, "next sent once big ends")
    wait_until(lambda: waiting_gauge(offload.vkbridge) == 0, 3, "vkbridge_pods_waiting_for_grant back to 0")
