"""Things that silently did nothing on the virtual node now say so on the pod (issue 17 item 6)."""

from __future__ import annotations

from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import events_for, get, must, phase, pod_path, pool_pod, wait_until

pytestmark = pytest.mark.integration

SMP = "application/strategic-merge-patch+json"


def warnings(plane: ControlPlane, ns: str, name: str, reason: str) -> list[dict[str, Any]]:
    return [
        e for e in events_for(plane, ns, name) if e.get("reason") == reason and e.get("type") == "Warning"
    ]


def start(consumer: ControlPlane, bundle: Bundle, ns: str, name: str) -> None:
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, name))
    wait_until(lambda: phase(consumer, ns, name) == "Running", 30, f"{name} Running at home")


def test_kubectl_debug_ephemeral_container_gets_one_warning_and_a_waiting_status(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess, offloaded_ns: tuple[str, str]
) -> None:
    ns, _ = offloaded_ns
    start(consumer, bundle, ns, "debugged")
    debugger = {"name": "debugger", "image": "busybox:1.36", "command": ["sh"], "stdin": True, "tty": True,
                "targetContainerName": "hello"}  # fmt: skip
    must(consumer, "PATCH", pod_path(ns, "debugged") + "/ephemeralcontainers",
         {"spec": {"ephemeralContainers": [debugger]}}, content_type=SMP)  # fmt: skip

    def waiting() -> dict[str, Any] | None:
        pod = get(consumer, pod_path(ns, "debugged")) or {}
        statuses = (pod.get("status") or {}).get("ephemeralContainerStatuses") or [{}]
        return (statuses[0].get("state") or {}).get("waiting")

    state = wait_until(waiting, 20, "the ephemeral container's waiting status")
    assert state["reason"] == "EphemeralContainersUnsupported"
    assert "kubectl debug --copy-to" in state["message"]
    wait_until(lambda: warnings(consumer, ns, "debugged", "EphemeralContainerUnsupported"), 20, "the Warning")
    # a second ephemeral container gets its own warning; the first is not repeated
    must(consumer, "PATCH", pod_path(ns, "debugged") + "/ephemeralcontainers",
         {"spec": {"ephemeralContainers": [debugger, {**debugger, "name": "debugger2"}]}},
         content_type=SMP)  # fmt: skip
    wait_until(lambda: len(warnings(consumer, ns, "debugged", "EphemeralContainerUnsupported")) == 2, 20,
               "a Warning for the second ephemeral container")  # fmt: skip
    events = warnings(consumer, ns, "debugged", "EphemeralContainerUnsupported")
    assert sorted(int(e.get("count") or 1) for e in events) == [1, 1], events
    assert phase(consumer, ns, "debugged") == "Running"


def test_in_place_resize_is_reported_infeasible_with_one_warning_and_a_resize_pending_condition(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    start(consumer, bundle, ns, "resized")
    resize = {"spec": {"containers": [{"name": "hello", "resources": {"requests": {"cpu": "200m"}}}]}}
    must(consumer, "PATCH", pod_path(ns, "resized") + "/resize", resize, content_type=SMP)

    def pending() -> dict[str, Any] | None:
        pod = get(consumer, pod_path(ns, "resized")) or {}
        conds = (pod.get("status") or {}).get("conditions") or []
        return next((x for x in conds if x.get("type") == "PodResizePending"), None)

    cond = wait_until(pending, 20, "the PodResizePending condition")
    assert (cond["status"], cond["reason"]) == ("True", "Infeasible"), cond
    assert "container 'hello'" in cond["message"]
    wait_until(lambda: warnings(consumer, ns, "resized", "ResizeInfeasible"), 20, "the Warning")
    remote = get(pool, pod_path(remote_ns, "resized")) or {}
    assert remote["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"  # frozen spec
    # the same resize seen again (any status event) is not warned about twice
    must(consumer, "PATCH", pod_path(ns, "resized"), {"metadata": {"labels": {"touched": "yes"}}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(lambda: ((get(pool, pod_path(remote_ns, "resized")) or {}).get("metadata") or {})
               .get("labels", {}).get("touched") == "yes", 20, "the label on the pool")  # fmt: skip
    events = warnings(consumer, ns, "resized", "ResizeInfeasible")
    assert len(events) == 1 and int(events[0].get("count") or 1) == 1, events


def test_shadowpod_without_remote_pod_gets_one_warning_saying_what_the_pool_said(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    # The pool accepts the ShadowPod (quota counts Pods, not ShadowPods) but can never create its Pod.
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
             "spec": {"hard": {"pods": "0"}}}  # fmt: skip
    must(pool, "POST", f"/api/v1/namespaces/{remote_ns}/resourcequotas", quota)
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "stuck"))
    found = wait_until(lambda: warnings(consumer, ns, "stuck", "RemotePodMissing"), 60,
                       "the RemotePodMissing Warning")  # fmt: skip
    assert len(found) == 1, found
    assert "no remote pod exists after" in found[0]["message"]
    assert "the pool said: nothing" in found[0]["message"]
    assert get(pool, pod_path(remote_ns, "stuck")) is None
    assert phase(consumer, ns, "stuck") == "Pending"
