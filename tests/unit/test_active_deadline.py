"""``activeDeadlineSeconds`` set or lowered on a running pod is enforced at home (issue 36 point 5).

The ShadowPod carries the value the pod had when it was sent, and its spec is frozen: before, a deadline
set later never ended the pod. Pure parts here; the reflector's part runs on a real plane in
tests/integration/test_pods.py.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from reflectors.forge.deadline import (
    DEADLINE_EXCEEDED,
    DEADLINE_EXCEEDED_MESSAGE,
    deadline_exceeded_status,
    seconds_left,
)

NOW = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def pod(deadline: Any = None, started: str | None = "2026-12-07T11:59:00Z") -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "app"}]}
    if deadline is not None:
        spec["activeDeadlineSeconds"] = deadline
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "PodScheduled", "status": "True"},
            {"type": "example.com/gate", "status": "True"},
        ],
        "containerStatuses": [{"name": "app", "ready": True, "state": {"running": {"startedAt": "x"}}}],
    }
    if started is not None:
        status["startTime"] = started
    return {"metadata": {"name": "job"}, "spec": spec, "status": status}


def test_the_time_left_counts_from_the_pods_start() -> None:
    assert seconds_left(pod(90), NOW) == 30
    assert seconds_left(pod(30), NOW) == -30
    assert seconds_left(pod(30), NOW - timedelta(seconds=30)) == 0


def test_no_deadline_or_no_start_time_is_no_deadline() -> None:
    assert seconds_left(pod(None), NOW) is None
    assert seconds_left(pod(30, started=None), NOW) is None
    assert seconds_left(pod(True), NOW) is None
    assert seconds_left(pod(30, started="not a time"), NOW) is None


def test_a_pod_past_its_deadline_is_failed_with_the_kubelets_reason_and_message() -> None:
    local = pod(30)
    status = deadline_exceeded_status(local, NOW)
    assert (status["phase"], status["reason"], status["message"]) == (
        "Failed",
        DEADLINE_EXCEEDED,
        DEADLINE_EXCEEDED_MESSAGE,
    )
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == "False" and conditions["Ready"]["reason"] == "PodFailed"
    assert conditions["PodScheduled"]["status"] == "True"  # what the kubelet leaves
    assert conditions["example.com/gate"]["status"] == "True"  # someone else's
    (container,) = status["containerStatuses"]
    assert container["ready"] is False and "terminated" in container["state"]
    assert local["status"]["phase"] == "Running"  # the local pod itself is not touched
