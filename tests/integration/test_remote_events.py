"""Remote pod Events on the local pod (issue "Remote events"; DESIGN §1, LIQO §5 "Event (remote→local)").

The pool's fake kubelet posts Pulled/Created/Started (component "kubelet") for a pod it runs, and a
Warning for a pod annotated ``fake.vkbridge.io/fail-start``; the pool's scheduler posts Scheduled.
vkbridge must show them on the LOCAL pod (the pool kubelet's as our node's kubelet's: source ``kubelet`` on
the virtual node, as ``--field-selector source=kubelet`` finds them), and follow the remote Events
as they are aggregated or deleted. Rate limiting is covered by tests/unit/test_remote_events.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.integration.helpers import get, must, wait_until
from tests.support.offload import Offload

pytestmark = pytest.mark.integration

KUBELET = "kubelet"


def remote_copies(offload: Offload, name: str) -> dict[str, dict[str, Any]]:
    """Local Events on the pod that came from the pool, by reason."""
    return {
        e["reason"]: e
        for e in offload.events(name)
        if "offloading.liqo.io/origin" in ((e.get("metadata") or {}).get("labels") or {})
    }


def event_path(ns: str, name: str) -> str:
    return f"/api/v1/namespaces/{ns}/events/{name}"


def test_pool_kubelet_events_show_on_the_local_pod(offload: Offload) -> None:
    ns, bundle = offload.ns, offload.bundle
    offload.run("ev-run")
    local_pod = offload.local("ev-run")
    assert local_pod is not None

    copies = wait_until(
        lambda: (c := remote_copies(offload, "ev-run")).keys() >= {"Pulled", "Created", "Started"} and c,
        30,
        "Pulled/Created/Started from the pool on the local pod",
    )
    remote_names = {e["metadata"]["name"] for e in offload.remote_events("ev-run")}
    for reason in ("Pulled", "Created", "Started"):
        event = copies[reason]
        assert event["source"] == {"component": KUBELET, "host": bundle.slug}  # never the pool worker
        assert event["reportingComponent"] == KUBELET
        assert event["type"] == "Normal"
        assert event["involvedObject"]["kind"] == "Pod"
        assert event["involvedObject"]["namespace"] == ns
        assert event["involvedObject"]["uid"] == local_pod["metadata"]["uid"]
        assert event["metadata"]["namespace"] == ns
        assert event["metadata"]["name"] in remote_names  # same name: idempotent across restarts
        labels = event["metadata"]["labels"]
        assert labels["offloading.liqo.io/origin"] == bundle.consumer_id
        assert labels["offloading.liqo.io/destination"] == bundle.slug

    # The pool scheduler's Scheduled names a pool worker the user cannot reach, and the local pod has its
    # own (naming the virtual node): it is not copied home (one consumer write per pod saved).
    assert any(e["reason"] == "Scheduled" for e in offload.remote_events("ev-run")), "premise"
    assert "Scheduled" not in remote_copies(offload, "ev-run")
    # Our own reflection events stay as they are, next to the copies.
    assert "SuccessfulReflection" in {e["reason"] for e in offload.events("ev-run")}


def test_fail_start_warning_shows_on_the_local_pod(offload: Offload) -> None:
    offload.create("ev-pull", annotations={"fake.vkbridge.io/fail-start": "ImagePullBackOff"})
    warning = wait_until(
        lambda: next(
            (
                e
                for e in remote_copies(offload, "ev-pull").values()
                if e["type"] == "Warning" and "ImagePullBackOff" in e.get("message", "")
            ),
            None,
        ),
        30,
        "the pool kubelet's ImagePullBackOff warning on the local pod",
    )
    assert warning["source"]["component"] == KUBELET
    assert warning["reason"] == "Failed"
    local_pod = offload.local("ev-pull")
    assert local_pod is not None
    assert warning["involvedObject"]["uid"] == local_pod["metadata"]["uid"]
    assert any(e["type"] == "Warning" for e in offload.remote_events("ev-pull"))
    assert offload.phase("ev-pull") == "Pending"


def test_local_copy_follows_the_remote_event_and_goes_with_it(offload: Offload) -> None:
    consumer, pool, ns, remote_ns = offload.consumer, offload.pool, offload.ns, offload.remote_ns
    offload.create("ev-follow")
    started = wait_until(
        lambda: remote_copies(offload, "ev-follow").get("Started"), 30, "Started on the local pod"
    )
    name = started["metadata"]["name"]
    first = started["firstTimestamp"]

    # The pool aggregates a repeat (count, lastTimestamp, message): the local copy follows, same object.
    must(pool, "PATCH", event_path(remote_ns, name),
         {"count": 4, "message": "Started container hello (again)", "lastTimestamp": "2030-01-01T00:00:00Z"},
         content_type="application/merge-patch+json")  # fmt: skip
    updated = wait_until(
        lambda: (e := get(consumer, event_path(ns, name))) and e.get("count") == 4 and e,
        15,
        "the local copy's count to follow",
    )
    assert updated["message"] == "Started container hello (again)"
    assert updated["lastTimestamp"] == "2030-01-01T00:00:00Z"
    assert updated["firstTimestamp"] == first
    assert updated["metadata"]["uid"] == started["metadata"]["uid"]

    # The remote Event goes: so does our copy, and only ours.
    must(pool, "DELETE", event_path(remote_ns, name))
    wait_until(lambda: get(consumer, event_path(ns, name)) is None, 15, "the local copy to be deleted")
    reasons = {e["reason"] for e in offload.events("ev-follow")}
    assert "SuccessfulReflection" in reasons
    assert "Pulled" in reasons
