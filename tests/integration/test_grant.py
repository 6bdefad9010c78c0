"""The ResourceSlice grant is enforced before anything reaches the pool (issue: grant enforcement).

kube-scheduler already fits requests against the node's allocatable (= the grant), so pods that must
be refused by vkbridge itself are bound with spec.nodeName, as a user or another scheduler can do.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
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
    node_pods_active,
    phase,
    pod_path,
    pool_pod,
    set_grant,
    shadow_path,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture
def quiet_grant(consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess) -> Iterator[None]:
    """No other pod uses the grant during the test (earlier tests' namespaces are still going away)."""
    wait_until(lambda: not node_pods_active(consumer, bundle.slug), 90, "earlier tests' pods to be gone",
               interval=0.5)  # fmt: skip
    set_grant(consumer, bundle, DEFAULT)
    yield
    set_grant(consumer, bundle, DEFAULT)


def warning_with(consumer: ControlPlane, ns: str, name: str, text: str) -> dict[str, Any] | None:
    for e in events_for(consumer, ns, name):
        if e["type"] == "Warning" and text in e["message"]:
            return e
    return None


def test_gpu_and_hugepages_pods_never_reach_the_pool(
    consumer: ControlPlane,
    pool: ControlPlane,
    bundle: Bundle,
    quiet_grant: None,
    offloaded_ns: tuple[str, str],
) -> None:
    ns, remote_ns = offloaded_ns
    gpu = pool_pod(bundle.slug, "gpu", node_name=bundle.slug)
    gpu["spec"]["containers"][0]["resources"] = {"requests": {"cpu": "100m", "nvidia.com/gpu": "1"},
                                                 "limits": {"nvidia.com/gpu": "1"}}  # fmt: skip
    huge = pool_pod(bundle.slug, "huge", node_name=bundle.slug)
    huge["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "100m", "memory": "64Mi", "hugepages-2Mi": "64Mi"},
        "limits": {"memory": "64Mi", "hugepages-2Mi": "64Mi"},
    }
    must(consumer, "POST", pod_path(ns), gpu)
    must(consumer, "POST", pod_path(ns), huge)
    event = wait_until(lambda: warning_with(consumer, ns, "gpu", "the pool grant has no nvidia.com/gpu"), 20,
                       "the GPU event")  # fmt: skip
    assert event["reason"] == "FailedReflection"
    wait_until(lambda: warning_with(consumer, ns, "huge", "the pool grant has no hugepages-2Mi"), 20,
               "the hugepages event")  # fmt: skip
    time.sleep(2)
    for name in ("gpu", "huge"):
        assert phase(consumer, ns, name) == "Pending"
        assert get(pool, shadow_path(remote_ns, name)) is None, f"{name} reached the pool"


def test_pod_over_remaining_cpu_waits_then_runs_when_another_completes(
    consumer: ControlPlane,
    pool: ControlPlane,
    bundle: Bundle,
    quiet_grant: None,
    offloaded_ns: tuple[str, str],
) -> None:
    ns, remote_ns = offloaded_ns
    must(
        consumer,
        "POST",
        pod_path(ns),
        pool_pod(bundle.slug, "big", cpu="3", command="sleep 6", restart="Never"),
    )
    wait_until(lambda: phase(consumer, ns, "big") == "Running", 30, "big Running")
    must(
        consumer,
        "POST",
        pod_path(ns),
        pool_pod(bundle.slug, "next", cpu="2", restart="Never", command="sleep 1", node_name=bundle.slug),
    )
    event = wait_until(lambda: warning_with(consumer, ns, "next", "does not fit in the pool grant"), 20,
                       "the does-not-fit event")  # fmt: skip
    assert "cpu requested 2 free 1" in event["message"], event["message"]
    assert get(pool, shadow_path(remote_ns, "next")) is None
    wait_until(lambda: phase(consumer, ns, "big") == "Succeeded", 30, "big to complete")
    wait_until(
        lambda: get(pool, shadow_path(remote_ns, "next")) is not None, 5, "next to be sent once cpu frees"
    )


def test_pods_limit_of_three_fourth_waits_until_one_is_deleted(
    consumer: ControlPlane,
    pool: ControlPlane,
    bundle: Bundle,
    quiet_grant: None,
    offloaded_ns: tuple[str, str],
) -> None:
    ns, remote_ns = offloaded_ns
    set_grant(consumer, bundle, {**DEFAULT, "pods": "3"})
    for i in range(4):
        must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, f"p{i}", cpu="10m", node_name=bundle.slug))
        if i < 3:
            wait_until(lambda i=i: get(pool, shadow_path(remote_ns, f"p{i}")) is not None, 20, f"p{i} sent")
    event = wait_until(
        lambda: warning_with(consumer, ns, "p3", "pods requested 1 free 0"), 20, "the pods event"
    )
    assert event is not None
    assert get(pool, shadow_path(remote_ns, "p3")) is None
    must(consumer, "DELETE", pod_path(ns, "p0"))
    wait_until(lambda: phase(consumer, ns, "p3") == "Running", 30, "p3 Running after p0 was deleted")


def test_grant_reduced_below_usage_keeps_running_pods_and_new_pods_wait(
    consumer: ControlPlane,
    pool: ControlPlane,
    bundle: Bundle,
    quiet_grant: None,
    offloaded_ns: tuple[str, str],
) -> None:
    ns, remote_ns = offloaded_ns
    for name in ("a", "b"):
        must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, name, cpu="1"))
    for name in ("a", "b"):
        wait_until(lambda name=name: phase(consumer, ns, name) == "Running", 30, f"{name} Running")
    set_grant(consumer, bundle, {**DEFAULT, "cpu": "1"})
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "late", cpu="100m", node_name=bundle.slug))
    wait_until(lambda: warning_with(consumer, ns, "late", "does not fit in the pool grant"), 20, "late waits")
    time.sleep(2)
    for name in ("a", "b"):
        assert phase(consumer, ns, name) == "Running", f"{name} was touched by a smaller grant"
        assert get(pool, shadow_path(remote_ns, name)) is not None
    assert get(pool, shadow_path(remote_ns, "late")) is None


def test_succeeded_pod_frees_its_share_at_once(
    consumer: ControlPlane,
    pool: ControlPlane,
    bundle: Bundle,
    quiet_grant: None,
    offloaded_ns: tuple[str, str],
) -> None:
    ns, remote_ns = offloaded_ns
    set_grant(consumer, bundle, {**DEFAULT, "cpu": "1"})
    must(
        consumer,
        "POST",
        pod_path(ns),
        pool_pod(bundle.slug, "first", cpu="1", command="sleep 4", restart="Never"),
    )
    wait_until(lambda: phase(consumer, ns, "first") == "Running", 30, "first Running")
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "second", cpu="1", node_name=bundle.slug))
    wait_until(lambda: warning_with(consumer, ns, "second", "does not fit"), 20, "second waits")
    wait_until(lambda: phase(consumer, ns, "first") == "Succeeded", 30, "first Succeeded")
    t0 = time.monotonic()
    wait_until(
        lambda: get(pool, shadow_path(remote_ns, "second")) is not None, 2, "second admitted within 2 s"
    )
    print(f"\nnext pod admitted {time.monotonic() - t0:.2f}s after the first one Succeeded")
