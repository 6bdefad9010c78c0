"""Events about objects with the longest legal names are stored under a valid name (<= 253 characters).

kube-apiserver v1.36 stores a core/v1 Event under a 270-character name (legacy validation skips the
name), so the old recorder's events were not lost here; the names were still no valid object names,
which events.k8s.io/v1 and name-validating tools refuse."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from e2e.controlplane import ControlPlane
from tests.integration.helpers import must, wait_until
from vkbridge.app import HomeEventWriter
from vkbridge.kube.client import KubeClient
from vkbridge.kube.events import EventRecorder
from vkbridge.kube.kubeconfig import load_kubeconfig_file

pytestmark = pytest.mark.integration


async def test_event_about_a_253_character_pod_is_stored(consumer: ControlPlane, fresh_ns) -> None:  # type: ignore[no-untyped-def]
    ns = fresh_ns(consumer)
    name = ("p" * 62 + ".") * 4 + "q"  # 253 characters: the longest pod name there is
    pod = must(consumer, "POST", f"/api/v1/namespaces/{ns}/pods", {
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    })  # fmt: skip
    async with KubeClient(load_kubeconfig_file(consumer.admin_kubeconfig)) as client:
        recorder = EventRecorder(HomeEventWriter(client), "liqo-pod-reflection", host="vk-node")
        runner = asyncio.create_task(recorder.run())
        recorder.event(pod, "Normal", "SuccessfulReflection", "Successfully reflected object to cluster")
        await recorder.aclose(timeout=10)
        await runner
    assert recorder.dropped == 0, "the API server refused the Event"  # 0 on the old code too

    def stored() -> list[dict[str, Any]]:
        events = must(consumer, "GET", f"/api/v1/namespaces/{ns}/events")["items"]
        ours = (e for e in events if e["source"].get("component") == "liqo-pod-reflection")
        return [e for e in ours if e["involvedObject"]["name"] == name]

    (event,) = wait_until(stored, 10, "the Event to be stored")
    assert len(event["metadata"]["name"]) <= 253
    assert event["reason"] == "SuccessfulReflection"
    assert event["involvedObject"]["uid"] == pod["metadata"]["uid"]
