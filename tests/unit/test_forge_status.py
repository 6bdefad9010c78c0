"""Table tests for reflectors.forge.status (LIQO §4.6, §4.7)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import pytest

from reflectors.forge import constants as c
from reflectors.forge.status import (
    forge_local_status,
    infer_additional_restarts,
    overrides_terminal,
    rejected_status,
    restarts_on_remote_change,
    status_equal,
    status_when_remote_missing,
)

NOW = datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=UTC)
NOW_S = "2026-11-29T10:00:00Z"
EARLIER_S = "2026-11-29T09:00:00Z"
VK_IP = "10.244.1.7"


def cs(
    name: str, restarts: int = 0, ready: bool = True, state: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "restartCount": restarts,
        "ready": ready,
        "image": "nginx:1.27",
        "state": state if state is not None else {"running": {"startedAt": EARLIER_S}},
    }


def cond(kind: str, status: str, when: str = EARLIER_S) -> dict[str, Any]:
    return {"type": kind, "status": status, "lastTransitionTime": when}


def running_remote(uid: str = "remote-uid-1", **status: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "phase": "Running",
        "conditions": [cond("Initialized", "True"), cond("Ready", "True"), cond("ContainersReady", "True")],
        "hostIP": "192.168.50.3",
        "hostIPs": [{"ip": "192.168.50.3"}],
        "podIP": "10.96.4.20",
        "podIPs": [{"ip": "10.96.4.20"}, {"ip": "fd00::20"}],
        "startTime": EARLIER_S,
        "qosClass": "Burstable",
        "message": "remote message",
        "containerStatuses": [cs("app", 1), cs("sidecar", 0)],
        "initContainerStatuses": [cs("init", 2, ready=False, state={"terminated": {"exitCode": 0}})],
    }
    base.update(status)
    return {"metadata": {"name": "web-0", "namespace": "team-c-1a2b3c4d", "uid": uid}, "status": base}


def local_pod(labels: dict[str, str] | None = None, **status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-0", "namespace": "team", "uid": "local-uid", "labels": labels or {}},
        "status": {"phase": "Pending", **status},
    }


def forge(local: dict[str, Any], remote: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "restarts": 0,
        "vk_pod_ip": VK_IP,
        "disable_ip_reflection": False,
        "remote_unavailable": False,
    }
    args.update(kwargs)
    return forge_local_status(local, remote, **args)


# --- forge_local_status -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    ["phase", "conditions", "startTime", "qosClass", "message", "initContainerStatuses"],
    ids=lambda f: f"{f}-copied-from-remote",
)
def test_remote_status_fields_are_copied(field: str) -> None:
    remote = running_remote()
    assert forge(local_pod(), remote)[field] == remote["status"][field]


def test_pod_ips_are_reduced_to_the_pod_ip() -> None:
    status = forge(local_pod(), running_remote())
    assert (status["podIP"], status["podIPs"]) == ("10.96.4.20", [{"ip": "10.96.4.20"}])


def test_host_ip_is_the_vkbridge_pod_ip_never_the_pool_node() -> None:
    status = forge(local_pod(), running_remote())
    assert (status["hostIP"], status["hostIPs"]) == (VK_IP, [{"ip": VK_IP}])


def test_missing_vk_pod_ip_clears_pool_host_ips() -> None:
    status = forge(local_pod(), running_remote(), vk_pod_ip="")
    assert (status["hostIP"], status["hostIPs"]) == ("", [])


@pytest.mark.parametrize(
    ("restarts", "expected"),
    [
        pytest.param(0, [1, 0], id="no-offset"),
        pytest.param(3, [4, 3], id="offset-added-to-every-container"),
    ],
)
def test_restart_offset(restarts: int, expected: list[int]) -> None:
    status = forge(local_pod(), running_remote(), restarts=restarts)
    assert [s["restartCount"] for s in status["containerStatuses"]] == expected
    assert status["initContainerStatuses"][0]["restartCount"] == 2  # init containers keep the remote count


def test_missing_restart_count_is_treated_as_zero() -> None:
    remote = running_remote(containerStatuses=[{"name": "app", "ready": True}])
    assert forge(local_pod(), remote, restarts=2)["containerStatuses"][0]["restartCount"] == 2


def test_disable_ip_reflection_clears_pod_ips() -> None:
    status = forge(local_pod(), running_remote(), disable_ip_reflection=True)
    assert (status["podIP"], status["podIPs"]) == ("", [])
    assert status["hostIP"] == VK_IP


def test_remote_without_container_statuses_is_mirrored() -> None:
    remote = {"metadata": {"uid": "u"}, "status": {"phase": "Pending", "qosClass": "BestEffort"}}
    status = forge(local_pod(), remote, restarts=1)
    assert status["phase"] == "Pending"
    assert "containerStatuses" not in status
    assert "podIPs" not in status


def test_terminated_remote_is_mirrored() -> None:
    done = {"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": NOW_S}}
    remote = running_remote(
        phase="Succeeded",
        conditions=[cond("Ready", "False"), cond("ContainersReady", "False")],
        containerStatuses=[cs("app", 0, ready=False, state=done)],
    )
    status = forge(local_pod(), remote)
    assert status["phase"] == "Succeeded"
    assert status["containerStatuses"][0]["state"] == done


@pytest.mark.parametrize(
    ("remote_conditions", "local_conditions", "now", "false_since"),
    [
        pytest.param(
            [cond("Ready", "True")], [cond("Ready", "True")], NOW, NOW_S, id="ready-true-forced-false-at-now"
        ),
        pytest.param(
            [cond("Ready", "True")],
            [cond("Ready", "False", "2026-11-29T09:30:00Z")],
            NOW,
            "2026-11-29T09:30:00Z",
            id="already-false-locally-keeps-its-time-idempotent",
        ),
        pytest.param([cond("Initialized", "True")], [], NOW, NOW_S, id="absent-ready-is-appended"),
        pytest.param([], [], None, None, id="absent-ready-without-now-has-no-time"),
        pytest.param([cond("Ready", "True")], [], None, EARLIER_S, id="without-now-keeps-remote-time"),
        pytest.param(
            [cond("Ready", "False", "2026-11-29T08:00:00Z")],
            [],
            NOW,
            "2026-11-29T08:00:00Z",
            id="remote-already-not-ready-is-untouched",
        ),
    ],
)
def test_remote_unavailable_forces_ready_false(
    remote_conditions: list[dict[str, Any]],
    local_conditions: list[dict[str, Any]],
    now: datetime | None,
    false_since: str | None,
) -> None:
    """Ready is False, with the transition time the row names (none where nothing tells one)."""
    local = local_pod(labels={c.REMOTE_UNAVAILABLE_LABEL: "true"}, conditions=local_conditions)
    status = forge(local, running_remote(conditions=remote_conditions), remote_unavailable=True, now=now)
    ready = [x for x in status["conditions"] if x["type"] == "Ready"]
    expected = cond("Ready", "False", false_since) if false_since else {"type": "Ready", "status": "False"}
    assert ready == [expected]


def test_remote_unavailable_is_stable_across_rounds() -> None:
    remote = running_remote()
    first = forge(local_pod(), remote, remote_unavailable=True, now=NOW)
    local = local_pod()
    local["status"] = first
    second = forge(local, remote, remote_unavailable=True, now=NOW + timedelta(minutes=5))
    assert status_equal(first, second)


def test_remote_available_keeps_ready_true() -> None:
    status = forge(local_pod(), running_remote(), remote_unavailable=False, now=NOW)
    assert cond("Ready", "True") in status["conditions"]


def test_forging_does_not_mutate_the_remote_pod() -> None:
    remote = running_remote()
    before = copy.deepcopy(remote)
    forge(local_pod(), remote, restarts=5, disable_ip_reflection=True, remote_unavailable=True, now=NOW)
    assert remote == before


# --- restart accounting -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("local_statuses", "remote_statuses", "expected"),
    [
        pytest.param([cs("app", 5)], [cs("app", 2)], 3, id="fresh-start-infers-difference"),
        pytest.param([cs("app", 1)], [cs("app", 4)], 0, id="fresh-start-never-negative"),
        pytest.param([], [cs("app", 4)], 0, id="fresh-start-no-local-container-statuses"),
        pytest.param([cs("app", 5)], [cs("other", 1)], 0, id="fresh-start-no-matching-container"),
        pytest.param(
            [cs("app", 5), cs("b", 9)], [cs("b", 0), cs("app", 5)], 0, id="only-first-local-container"
        ),
    ],
)
def test_restarts_from_a_fresh_start(
    local_statuses: list[dict[str, Any]], remote_statuses: list[dict[str, Any]], expected: int
) -> None:
    local = local_pod(containerStatuses=local_statuses)
    remote = running_remote(containerStatuses=remote_statuses)
    assert restarts_on_remote_change(local, remote) == expected
    assert restarts_on_remote_change(local, remote, known_remote_uid="", restarts=7) == expected
    assert infer_additional_restarts(local["status"], remote["status"]) == expected


@pytest.mark.parametrize(
    ("known_uid", "restarts", "expected"),
    [
        pytest.param("remote-uid-1", 2, 2, id="same-remote-uid-keeps-count"),
        pytest.param("remote-uid-0", 2, 3, id="recreated-remote-pod-adds-a-restart"),
    ],
)
def test_restarts_on_remote_change_with_known_uid(known_uid: str, restarts: int, expected: int) -> None:
    local = local_pod(containerStatuses=[cs("app", 40)])
    remote = running_remote(uid="remote-uid-1", containerStatuses=[cs("app", 0)])
    assert restarts_on_remote_change(local, remote, known_remote_uid=known_uid, restarts=restarts) == expected


# --- rejected status ----------------------------------------------------------------------------


def running_local() -> dict[str, Any]:
    return local_pod(
        phase="Running",
        conditions=[cond("Ready", "True"), cond("PodScheduled", "True"), cond("DisruptionTarget", "False")],
        containerStatuses=[cs("app", 0), cs("done", 0, ready=False, state={"terminated": {"exitCode": 3}})],
        initContainerStatuses=[cs("init", 0, ready=True)],
        ephemeralContainerStatuses=[cs("dbg", 0)],
    )


@pytest.mark.parametrize(
    ("phase", "reason", "exit_code"),
    [
        pytest.param("Failed", c.REASON_OFFLOADING_ABORTED, 1, id="failed-terminates-with-exit-1"),
        pytest.param("Succeeded", c.REASON_REMOTE_POD_TERMINATED, 0, id="succeeded-terminates-with-exit-0"),
    ],
)
def test_rejected_terminal_status(phase: str, reason: str, exit_code: int) -> None:
    status = rejected_status(running_local(), phase, reason, NOW)
    assert (status["phase"], status["reason"]) == (phase, reason)
    assert status["conditions"] == [
        {"type": "Ready", "status": "False", "lastTransitionTime": NOW_S, "reason": reason},
        {"type": "PodScheduled", "status": "False", "lastTransitionTime": NOW_S, "reason": reason},
        cond("DisruptionTarget", "False"),
    ]
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        assert all(s["ready"] is False for s in status[key])
    assert status["containerStatuses"][0]["state"] == {
        "terminated": {"exitCode": exit_code, "reason": reason}
    }
    assert status["containerStatuses"][1]["state"] == {
        "terminated": {"exitCode": 3}
    }  # already terminated: kept
    assert status["ephemeralContainerStatuses"][0]["state"]["terminated"]["exitCode"] == exit_code


def test_rejected_pending_status_does_not_terminate_containers() -> None:
    local = local_pod(conditions=[cond("PodScheduled", "True")])
    status = rejected_status(local, "Pending", c.REASON_OFFLOADING_BACKOFF, NOW)
    assert (status["phase"], status["reason"]) == ("Pending", c.REASON_OFFLOADING_BACKOFF)
    assert status["conditions"][0]["status"] == "False"
    assert "containerStatuses" not in status


def test_rejected_status_is_idempotent() -> None:
    first = rejected_status(running_local(), "Failed", c.REASON_OFFLOADING_ABORTED, NOW)
    local = running_local()
    local["status"] = first
    second = rejected_status(local, "Failed", c.REASON_OFFLOADING_ABORTED, NOW + timedelta(hours=1))
    assert status_equal(first, second)


def test_rejected_status_does_not_mutate_the_local_pod() -> None:
    local = running_local()
    before = copy.deepcopy(local)
    rejected_status(local, "Failed", c.REASON_OFFLOADING_ABORTED, NOW)
    assert local == before


@pytest.mark.parametrize(
    ("shadow", "expected_phase"),
    [
        pytest.param(None, None, id="no-shadow-waits"),
        pytest.param({"status": {"phase": "Running"}}, None, id="running-shadow-waits"),
        pytest.param({"status": {}}, None, id="unknown-shadow-phase-waits"),
        pytest.param({"status": {"phase": "Succeeded"}}, "Succeeded", id="succeeded-shadow-terminates-local"),
        pytest.param({"status": {"phase": "Failed"}}, "Failed", id="failed-shadow-terminates-local"),
    ],
)
def test_status_when_remote_missing(shadow: dict[str, Any] | None, expected_phase: str | None) -> None:
    status = status_when_remote_missing(running_local(), shadow, NOW)
    if expected_phase is None:
        assert status is None
    else:
        assert status is not None
        assert (status["phase"], status["reason"]) == (expected_phase, c.REASON_REMOTE_POD_TERMINATED)


# --- status_equal -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        pytest.param({"phase": "Running"}, {"phase": "Running"}, True, id="identical"),
        pytest.param(
            {"phase": "Running", "podIP": ""}, {"phase": "Running"}, True, id="empty-string-is-absent"
        ),
        pytest.param({"podIPs": [], "x": None}, {}, True, id="empty-list-and-null-are-absent"),
        pytest.param(None, {}, True, id="none-equals-empty"),
        pytest.param({"phase": "Running"}, {"phase": "Pending"}, False, id="phase-differs"),
        pytest.param(
            {"containerStatuses": [{"name": "a", "restartCount": 0}]},
            {"containerStatuses": [{"name": "a", "restartCount": 1}]},
            False,
            id="restart-count-differs",
        ),
        pytest.param(
            {"containerStatuses": [{"name": "a", "ready": False}]},
            {"containerStatuses": [{"name": "a"}]},
            False,
            id="false-is-not-absent",
        ),
        pytest.param(
            {"conditions": [cond("A", "True"), cond("B", "True")]},
            {"conditions": [cond("B", "True"), cond("A", "True")]},
            False,
            id="condition-order-matters",
        ),
        pytest.param(
            {"conditions": [cond("Ready", "True", NOW_S)]},
            {"conditions": [cond("Ready", "True", EARLIER_S)]},
            False,
            id="timestamps-matter",
        ),
        pytest.param(
            {"containerStatuses": [{"name": "a", "state": {"waiting": {}}}]},
            {"containerStatuses": [{"name": "a", "state": {}}]},
            False,
            id="empty-struct-is-not-absent",
        ),
        pytest.param(
            MappingProxyType({"phase": "Running", "podIP": "", "podIPs": ({"ip": "10.0.0.1"},)}),
            {"phase": "Running", "podIPs": [{"ip": "10.0.0.1"}]},
            True,
            id="any-mapping-and-tuple-normalize-like-dict-and-list",
        ),
        pytest.param(
            {"phase": "Running", "podIPs": ({"ip": "10.0.0.1"},)},
            {"phase": "Running", "podIPs": [{"ip": "10.0.0.2"}]},
            False,
            id="tuple-contents-count",
        ),
    ],
)
def test_status_equal(a: Any, b: Any, expected: bool) -> None:
    assert status_equal(a, b) is expected
    assert status_equal(b, a) is expected


# --- terminal is final (issue 15 item 10) --------------------------------------------------------


@pytest.mark.parametrize(
    ("local_phase", "new_phase", "overrides"),
    [
        pytest.param("Succeeded", "Running", True, id="succeeded-never-becomes-running"),
        pytest.param("Failed", "Pending", True, id="failed-never-becomes-pending"),
        pytest.param("Failed", "Succeeded", True, id="failed-never-becomes-succeeded"),
        pytest.param("Succeeded", "Succeeded", False, id="same-terminal-phase-may-be-refined"),
        pytest.param("Running", "Succeeded", False, id="running-may-finish"),
        pytest.param("Pending", "Running", False, id="pending-may-start"),
    ],
)
def test_terminal_local_pod_keeps_its_phase_whatever_the_remote_pod_shows(
    local_phase: str, new_phase: str, overrides: bool
) -> None:
    local = {"metadata": {"name": "job"}, "status": {"phase": local_phase}}
    assert overrides_terminal(local, {"phase": new_phase}) is overrides
