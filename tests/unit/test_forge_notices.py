"""Pure notices for what a virtual node silently cannot do (issue 17 item 6)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reflectors.forge import notices as fn

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)


def pod(resources: dict[str, Any], ephemeral: tuple[str, ...] = ()) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {
            "containers": [{"name": "app", "image": "busybox", "resources": resources}],
            "ephemeralContainers": [{"name": n, "image": "busybox:1.36"} for n in ephemeral],
        },
        "status": {},
    }


def shadow_of(local: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"pod": local["spec"]}, "status": status or {}}


def test_kubectl_debug_ephemeral_container_gets_a_waiting_status_that_says_why() -> None:
    local = pod({}, ("debugger",))
    assert fn.ephemeral_names(local) == ["debugger"]
    (st,) = fn.ephemeral_statuses(local)
    assert st["name"] == "debugger" and st["ready"] is False and st["image"] == "busybox:1.36"
    waiting = st["state"]["waiting"]
    assert waiting["reason"] == fn.REASON_EPHEMERAL_UNSUPPORTED
    assert "kubectl debug --copy-to" in waiting["message"] and "kubectl exec" in waiting["message"]


def test_in_place_resize_is_found_per_container_and_pod_level() -> None:
    sent = pod({"requests": {"cpu": "100m"}})
    local = pod({"requests": {"cpu": "200m"}})
    assert fn.resized(local, shadow_of(sent)) == ["app"]
    assert fn.resized(sent, shadow_of(sent)) == []
    local["spec"]["resources"] = {"requests": {"cpu": "1"}}
    assert fn.resized(local, shadow_of(sent)) == ["", "app"]
    assert "pod-level resources, container 'app'" in fn.resize_infeasible_msg(["", "app"])


def test_in_place_resize_sets_pod_resize_pending_infeasible_and_keeps_its_transition_time() -> None:
    local = pod({})
    msg = fn.resize_infeasible_msg(["app"])
    new = fn.with_notices({"conditions": [{"type": "Ready", "status": "True"}]}, local, msg, NOW)
    cond = new["conditions"][-1]
    assert (cond["type"], cond["status"], cond["reason"]) == ("PodResizePending", "True", "Infeasible")
    assert new["conditions"][0]["type"] == "Ready"
    local["status"]["conditions"] = [{**cond, "lastTransitionTime": "2026-11-30T00:00:00Z"}]
    later = fn.with_notices({"conditions": []}, local, msg, NOW)
    assert later["conditions"][0]["lastTransitionTime"] == "2026-11-30T00:00:00Z"
    assert fn.with_notices({"phase": "Running"}, pod({}), None, NOW) == {"phase": "Running"}


def test_shadowpod_without_remote_pod_message_says_what_the_pool_said_or_that_it_said_nothing() -> None:
    local = pod({})
    silent = fn.remote_pod_missing_msg(shadow_of(local), 31.2)
    assert "after 31s" in silent and "the pool said: nothing" in silent
    said = fn.remote_pod_missing_msg(
        shadow_of(local, {"phase": "Pending", "conditions": [
            {"type": "Admitted", "status": "False", "reason": "Quota", "message": "pods=0"}]}),
        30,
    )  # fmt: skip
    assert "phase Pending" in said and "condition Admitted=False (Quota: pods=0)" in said
