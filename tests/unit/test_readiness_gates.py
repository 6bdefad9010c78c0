"""Readiness gates and the conditions others set, as a kubelet keeps them (issue 36 point 5).

Before, the remote status was copied whole: a condition a consumer-side controller set on the local pod
(a readiness gate's) was erased by the next status write, and the gates went to the pool, where nothing
sets them, so the pod never became Ready. Now the local pod keeps every condition that is not a
kubelet's, and Ready is computed with the gates at home, with the kubelet's reason and messages.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from reflectors.forge.status import forge_local_status, merged_conditions, status_equal, with_readiness_gates

NOW = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)
NOW_S = "2026-12-07T12:00:00Z"
EARLIER_S = "2026-12-07T11:00:00Z"
GATE = "example.com/lb-ready"


def cond(kind: str, status: str = "True", at: str = EARLIER_S, **kw: Any) -> dict[str, Any]:
    return {"type": kind, "status": status, "lastTransitionTime": at, **kw}


def remote_running(*extra: dict[str, Any]) -> dict[str, Any]:
    conditions = [cond("Initialized"), cond("Ready"), cond("ContainersReady"), cond("PodScheduled"), *extra]
    return {"status": {"phase": "Running", "podIP": "10.0.0.9", "conditions": conditions}}


def local_pod(
    conditions: list[dict[str, Any]] | None = None, gates: tuple[str, ...] = (GATE,)
) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "app", "uid": "u1", "resourceVersion": "7"},
        "spec": {"readinessGates": [{"conditionType": g} for g in gates]},
        "status": {"phase": "Running", "conditions": conditions or []},
    }


def forged(local: dict[str, Any], remote: dict[str, Any]) -> dict[str, Any]:
    status = forge_local_status(
        local, remote, restarts=0, vk_pod_ip="10.1.1.1", disable_ip_reflection=False, remote_unavailable=False
    )
    return with_readiness_gates(status, local, NOW)


def by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


def test_a_condition_a_controller_set_on_the_local_pod_survives_the_pools_status() -> None:
    local = local_pod([cond(GATE, "True"), cond("example.com/other", "False")])
    conditions = by_type(forged(local, remote_running()))
    assert conditions[GATE]["status"] == "True"
    assert conditions["example.com/other"]["status"] == "False"


def test_a_missing_gate_condition_keeps_the_pod_not_ready_with_the_kubelets_reason() -> None:
    ready = by_type(forged(local_pod(), remote_running()))["Ready"]
    assert ready["status"] == "False"
    assert ready["reason"] == "ReadinessGatesNotReady"
    assert ready["message"] == f'corresponding condition of pod readiness gate "{GATE}" does not exist.'
    assert ready["lastTransitionTime"] == NOW_S  # True on the pool, False here: the transition is ours


def test_a_false_gate_condition_is_named_as_the_kubelet_names_it() -> None:
    local = local_pod([cond(GATE, "False")], gates=(GATE, "example.com/b"))
    ready = by_type(forged(local, remote_running()))["Ready"]
    assert ready["message"] == (
        f'the status of pod readiness gate "{GATE}" is not "True", but False, '
        'corresponding condition of pod readiness gate "example.com/b" does not exist.'
    )


def test_the_pod_turns_ready_when_its_gate_does_and_the_transition_is_stamped_then() -> None:
    local = local_pod(
        [cond("Ready", "False", at=EARLIER_S, reason="ReadinessGatesNotReady"), cond(GATE, "True")]
    )
    ready = by_type(forged(local, remote_running()))["Ready"]
    assert ready["status"] == "True" and "reason" not in ready
    assert ready["lastTransitionTime"] == NOW_S


def test_forging_again_over_what_was_written_changes_nothing() -> None:
    local = local_pod([cond(GATE, "False")])
    first = forged(local, remote_running())
    local["status"] = first
    later = with_readiness_gates(
        forge_local_status(
            local, remote_running(), restarts=0, vk_pod_ip="10.1.1.1", disable_ip_reflection=False,
            remote_unavailable=False,
        ),
        local,
        datetime(2026, 12, 7, 13, 0, 0, tzinfo=UTC),
    )  # fmt: skip
    assert status_equal(first, later)


def test_a_pod_not_ready_on_the_pool_stays_as_the_pool_says() -> None:
    remote = remote_running()
    for c in remote["status"]["conditions"]:
        if c["type"] == "Ready":
            c.update(status="False", reason="ContainersNotReady")
    ready = by_type(forged(local_pod([cond(GATE, "True")]), remote))["Ready"]
    assert ready["status"] == "False" and ready["reason"] == "ContainersNotReady"


def test_a_pod_without_gates_is_ready_as_the_pool_says() -> None:
    ready = by_type(forged(local_pod(gates=()), remote_running()))["Ready"]
    assert ready == cond("Ready")


def test_a_pool_side_condition_of_no_kubelet_is_not_brought_home_and_a_local_disruption_target_wins() -> None:
    remote = remote_running(cond("pool.example.com/x"), cond("DisruptionTarget", "True", reason="Pool"))
    local = local_pod([cond("DisruptionTarget", "True", reason="TerminationByKubelet")], gates=())
    conditions = merged_conditions(remote["status"]["conditions"], local)
    kinds = [c["type"] for c in conditions]
    assert "pool.example.com/x" not in kinds
    assert kinds.count("DisruptionTarget") == 1
    assert by_type({"conditions": conditions})["DisruptionTarget"]["reason"] == "TerminationByKubelet"
