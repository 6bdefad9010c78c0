"""Table tests for reflectors.forge.events (remote pod Events -> local pod, DESIGN §1)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import Any

import pytest

from reflectors.forge import constants as c
from reflectors.forge.events import aggregation_digest, forge_local_event

LOCAL_ID = "c-1a2b3c4d"
REMOTE_ID = "c0123456789ab"
NOW = datetime(2026, 11, 29, 10, 0, tzinfo=UTC)
LOCAL_POD = {"metadata": {"name": "web-0", "namespace": "team", "uid": "local-uid"}}


def remote_event(**overrides: Any) -> dict[str, Any]:
    event: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": "web-0.18a1b2c3d4e5f6a7",
            "namespace": "team-c-1a2b3c4d",
            "uid": "remote-event-uid",
            "resourceVersion": "991",
            "labels": {"x": "1", c.ORIGIN_LABEL: "spoofed"},
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": "web-0",
            "namespace": "team-c-1a2b3c4d",
            "uid": "remote-pod-uid",
            "resourceVersion": "55",
            "fieldPath": "spec.containers{app}",
        },
        "reason": "BackOff",
        "message": "Back-off restarting failed container app",
        "type": "Warning",
        "source": {"component": "kubelet", "host": "pool-worker-3"},
        "firstTimestamp": "2026-11-29T09:00:00Z",
        "lastTimestamp": "2026-11-29T09:05:00Z",
        "count": 4,
        "reportingComponent": "kubelet",
        "reportingInstance": "pool-worker-3",
    }
    event.update(overrides)
    return event


def forge(event: dict[str, Any], local: dict[str, Any] | None = LOCAL_POD) -> dict[str, Any] | None:
    return forge_local_event(event, local, local_id=LOCAL_ID, remote_id=REMOTE_ID, now=NOW)


def test_pod_event_is_re_pointed_to_the_local_pod() -> None:
    event = forge(remote_event())
    assert event is not None
    assert event["metadata"] == {
        "name": "web-0.18a1b2c3d4e5f6a7",
        "namespace": "team",
        "labels": {"x": "1", c.ORIGIN_LABEL: LOCAL_ID, c.DESTINATION_LABEL: REMOTE_ID},
        "annotations": {},
    }
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": "web-0",
        "namespace": "team",
        "uid": "local-uid",
        "fieldPath": "spec.containers{app}",
    }
    assert event["source"] == {"component": "kubelet (remote)", "host": "pool-worker-3"}
    assert (event["reason"], event["type"], event["count"]) == ("BackOff", "Warning", 4)
    assert (event["firstTimestamp"], event["lastTimestamp"]) == (
        "2026-11-29T09:00:00Z",
        "2026-11-29T09:05:00Z",
    )


def test_shadowpod_event_lands_on_the_pod() -> None:
    involved = {"apiVersion": "offloading.liqo.io/v1beta1", "kind": "ShadowPod", "name": "web-0", "uid": "s"}
    event = forge(remote_event(involvedObject=involved))
    assert event is not None
    assert (event["involvedObject"]["kind"], event["involvedObject"]["apiVersion"]) == ("Pod", "v1")
    assert "fieldPath" not in event["involvedObject"]


@pytest.mark.parametrize(
    ("involved", "local"),
    [
        pytest.param(
            {"apiVersion": "v1", "kind": "Service", "name": "web-0"}, LOCAL_POD, id="service-event-skipped"
        ),
        pytest.param(
            {"apiVersion": "v1", "kind": "Node", "name": "pool-worker-3"}, LOCAL_POD, id="node-event"
        ),
        pytest.param({"apiVersion": "apps/v1", "kind": "Pod", "name": "web-0"}, LOCAL_POD, id="wrong-group"),
        pytest.param({"apiVersion": "v1", "kind": "Pod", "name": "web-0"}, None, id="no-local-pod"),
        pytest.param({"apiVersion": "v1", "kind": "Pod", "name": "web-1"}, LOCAL_POD, id="other-pod-name"),
        pytest.param(
            {"apiVersion": "v1", "kind": "Pod", "name": "web-0"},
            {"metadata": {"name": "web-0", "namespace": "team"}},
            id="local-pod-without-uid",
        ),
    ],
)
def test_events_not_about_the_local_pod_are_not_reflected(involved: dict[str, Any], local: Any) -> None:
    assert forge(remote_event(involvedObject=involved), local) is None


def test_reflection_is_idempotent_and_pure() -> None:
    remote = remote_event()
    before = copy.deepcopy(remote)
    assert forge(remote) == forge(remote)
    assert remote == before


@pytest.mark.parametrize(
    ("source", "reporting", "expected"),
    [
        pytest.param(
            {"component": "default-scheduler"}, None, "default-scheduler (remote)", id="component-suffixed"
        ),
        pytest.param({}, "kubelet", "kubelet (remote)", id="reporting-component-used-when-source-empty"),
        pytest.param({}, None, "(remote)", id="no-component-at-all"),
    ],
)
def test_source_component(source: dict[str, str], reporting: str | None, expected: str) -> None:
    remote = remote_event(source=source)
    remote.pop("reportingComponent")
    if reporting is not None:
        remote["reportingComponent"] = reporting
    event = forge(remote)
    assert event is not None
    assert event["source"]["component"] == expected
    assert "host" not in event["source"]


@pytest.mark.parametrize(
    ("times", "expected_first"),
    [
        pytest.param({}, "2026-11-29T10:00:00Z", id="no-time-at-all-uses-now"),
        pytest.param({"eventTime": "2026-11-29T09:00:00.000000Z"}, None, id="event-time-only-keeps-it"),
        pytest.param({"lastTimestamp": "2026-11-29T09:05:00Z"}, None, id="remote-time-kept"),
    ],
)
def test_now_only_fills_missing_times(times: dict[str, str], expected_first: str | None) -> None:
    remote = remote_event()
    for key in ("firstTimestamp", "lastTimestamp"):
        remote.pop(key)
    remote.update(times)
    event = forge(remote)
    assert event is not None
    assert event.get("firstTimestamp") == expected_first
    for key, value in times.items():
        assert event[key] == value


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param({}, False, id="same-event"),
        pytest.param({"count": 5, "lastTimestamp": "2026-11-29T09:06:00Z"}, True, id="aggregated-count"),
        pytest.param({"message": "other"}, True, id="message-changed"),
        pytest.param(
            {"series": {"count": 2, "lastObservedTime": "2026-11-29T09:06:00.000000Z"}}, True, id="series"
        ),
        pytest.param({"lastTimestamp": "2026-11-29T09:59:00Z"}, False, id="timestamp-alone-is-not-a-change"),
    ],
)
def test_aggregation_digest_moves_with_the_aggregated_fields_only(
    change: dict[str, Any], expected: bool
) -> None:
    existing = forge(remote_event())
    desired = forge(remote_event(**change))
    assert existing is not None and desired is not None
    assert (aggregation_digest(existing) != aggregation_digest(desired)) is expected


def test_aggregation_digest_ignores_key_order_and_fields_it_does_not_track() -> None:
    series = {"count": 2, "lastObservedTime": "2026-11-29T09:06:00.000000Z"}
    one = {"reason": "BackOff", "message": "m", "count": 2, "series": series, "metadata": {"name": "a"}}
    other = {"series": dict(reversed(series.items())), "count": 2, "message": "m", "reason": "BackOff"}
    assert aggregation_digest(one) == aggregation_digest(other)
