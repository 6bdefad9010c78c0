"""Things that silently did nothing on the virtual node now say so on the pod (issue 17 item 6)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.helpers import must, pod_path, wait_until
from tests.support.offload import Offload

pytestmark = pytest.mark.integration

SMP = "application/strategic-merge-patch+json"


def warnings(offload: Offload, name: str, reason: str) -> list[dict[str, Any]]:
    return [e for e in offload.events(name) if e.get("reason") == reason and e.get("type") == "Warning"]


def test_kubectl_debug_ephemeral_container_gets_one_warning_and_a_waiting_status(offload: Offload) -> None:
    consumer, ns = offload.consumer, offload.ns
    offload.run("debugged")
    debugger = {"name": "debugger", "image": "busybox:1.36", "command": ["sh"], "stdin": True, "tty": True,
                "targetContainerName": "hello"}  # fmt: skip
    must(consumer, "PATCH", pod_path(ns, "debugged") + "/ephemeralcontainers",
         {"spec": {"ephemeralContainers": [debugger]}}, content_type=SMP)  # fmt: skip

    def waiting() -> dict[str, Any] | None:
        pod = offload.local("debugged") or {}
        statuses = (pod.get("status") or {}).get("ephemeralContainerStatuses") or [{}]
        return (statuses[0].get("state") or {}).get("waiting")

    state = wait_until(waiting, 20, "the ephemeral container's waiting status")
    assert state["reason"] == "EphemeralContainersUnsupported"
    assert "kubectl debug --copy-to" in state["message"]
    wait_until(lambda: warnings(offload, "debugged", "EphemeralContainerUnsupported"), 20, "the Warning")
    # a second ephemeral container gets its own warning; the first is not repeated
    must(consumer, "PATCH", pod_path(ns, "debugged") + "/ephemeralcontainers",
         {"spec": {"ephemeralContainers": [debugger, {**debugger, "name": "debugger2"}]}},
         content_type=SMP)  # fmt: skip
    wait_until(lambda: len(warnings(offload, "debugged", "EphemeralContainerUnsupported")) == 2, 20,
               "a Warning for the second ephemeral container")  # fmt: skip
    events = warnings(offload, "debugged", "EphemeralContainerUnsupported")
    assert sorted(int(e.get("count") or 1) for e in events) == [1, 1], events
    assert offload.running("debugged")


def test_in_place_resize_is_reported_infeasible_with_one_warning_and_a_resize_pending_condition(
    offload: Offload,
) -> None:
    consumer, ns = offload.consumer, offload.ns
    offload.run("resized")
    resize = {"spec": {"containers": [{"name": "hello", "resources": {"requests": {"cpu": "200m"}}}]}}
    must(consumer, "PATCH", pod_path(ns, "resized") + "/resize", resize, content_type=SMP)

    def pending() -> dict[str, Any] | None:
        pod = offload.local("resized") or {}
        conds = (pod.get("status") or {}).get("conditions") or []
        return next((x for x in conds if x.get("type") == "PodResizePending"), None)

    cond = wait_until(pending, 20, "the PodResizePending condition")
    assert (cond["status"], cond["reason"]) == ("True", "Infeasible"), cond
    assert "container 'hello'" in cond["message"]
    wait_until(lambda: warnings(offload, "resized", "ResizeInfeasible"), 20, "the Warning")
    remote = offload.remote("resized") or {}
    assert remote["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "100m"  # frozen spec
    # the same resize seen again (any status event) is not warned about twice
    must(consumer, "PATCH", pod_path(ns, "resized"), {"metadata": {"labels": {"touched": "yes"}}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(lambda: ((offload.remote("resized") or {}).get("metadata") or {})
               .get("labels", {}).get("touched") == "yes", 20, "the label on the pool")  # fmt: skip
    events = warnings(offload, "resized", "ResizeInfeasible")
    assert len(events) == 1 and int(events[0].get("count") or 1) == 1, events


def test_shadowpod_without_remote_pod_gets_one_warning_saying_what_the_pool_said(offload: Offload) -> None:
    # The pool accepts the ShadowPod (quota counts Pods, not ShadowPods) but can never create its Pod.
    quota = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "no-pods"},
             "spec": {"hard": {"pods": "0"}}}  # fmt: skip
    must(offload.pool, "POST", f"/api/v1/namespaces/{offload.remote_ns}/resourcequotas", quota)
    offload.create("stuck")
    found = wait_until(lambda: warnings(offload, "stuck", "RemotePodMissing"), 60,
                       "the RemotePodMissing Warning")  # fmt: skip
    assert len(found) == 1, found
    assert "no remote pod exists after" in found[0]["message"]
    assert "the pool said: nothing" in found[0]["message"]
    assert offload.remote("stuck") is None
    assert offload.phase("stuck") == "Pending"
