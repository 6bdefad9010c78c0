"""Event recorder: client-go spam filter, aggregation into count patches, bounded backlog, error handling."""

from __future__ import annotations

import asyncio
import logging
import re
from typing import Any

import pytest

from tests.support.clock import FakeClock
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.events import EventRecorder, SpamFilter, event_name

T0_NS = 1_767_225_600_123_456_789  # 2026-01-01T00:00:00.123456789Z


class ApiError(Exception):
    def __init__(self, status: int | None) -> None:
        super().__init__(f"status {status}")
        self.status = status


class FakeWriter:
    def __init__(self) -> None:
        self.created: list[tuple[str, dict[str, Any]]] = []
        self.patched: list[tuple[str, str, dict[str, Any]]] = []
        self.create_errors: list[Exception] = []
        self.patch_errors: list[Exception] = []
        self._changed = asyncio.Event()

    async def wait_writes(self, n: int) -> None:
        """Wait (bounded) until ``n`` events were created or patched in total."""
        async with asyncio.timeout(2.0):
            while len(self.created) + len(self.patched) < n:
                self._changed.clear()
                await self._changed.wait()

    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        if self.create_errors:
            raise self.create_errors.pop(0)
        self.created.append((namespace, body))
        self._changed.set()
        return {**body, "metadata": {**body["metadata"], "resourceVersion": "1"}}

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> object:
        if self.patch_errors:
            raise self.patch_errors.pop(0)
        self.patched.append((namespace, name, patch))
        self._changed.set()
        return {}


def pod(name: str = "web-0", ns: str = "app", uid: str = "uid-1") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": uid, "resourceVersion": "42"},
        "spec": {"containers": []},
    }


def make(
    writer: FakeWriter, clock: FakeClock | None = None, **kwargs: Any
) -> tuple[EventRecorder, FakeClock, list[int]]:
    clock = clock or FakeClock()
    wall = [T0_NS]
    recorder = EventRecorder(
        writer,
        "liqo-pod-reflection",
        "vk-node-1",
        clock=clock,
        wall_clock_ns=lambda: wall[0],
        retry_backoff=Backoff(base=0.001, cap=0.002, jitter=0.0),
        **kwargs,
    )
    return recorder, clock, wall


async def flush(recorder: EventRecorder) -> None:
    """Run the recorder until its backlog is written."""
    task = asyncio.create_task(recorder.run())
    await recorder.aclose(timeout=2.0)
    await task


# -- SpamFilter ------------------------------------------------------------------------------------------


def test_spam_filter_burst_25_then_one_per_300s() -> None:
    clock = FakeClock()
    spam = SpamFilter(clock=clock)
    assert all(spam.allow("obj") for _ in range(25))
    assert not spam.allow("obj")
    clock.advance(299.0)
    assert not spam.allow("obj")
    clock.advance(1.0)
    assert spam.allow("obj")
    assert not spam.allow("obj")
    assert spam.allow("other")  # per key


def test_spam_filter_refill_is_capped_at_burst() -> None:
    clock = FakeClock()
    spam = SpamFilter(clock=clock)
    for _ in range(25):
        spam.allow("obj")
    clock.advance(300.0 * 1000)
    assert sum(spam.allow("obj") for _ in range(40)) == 25


def test_spam_filter_is_lru_bounded() -> None:
    clock = FakeClock()
    spam = SpamFilter(burst=1, clock=clock, max_keys=2)
    assert spam.allow("a")
    assert spam.allow("b")
    assert not spam.allow("a")  # touch a: b is now the oldest
    assert spam.allow("c")  # evicts b
    assert len(spam) == 2
    assert spam.allow("b")  # b forgotten: a fresh bucket
    assert not spam.allow("c")


# -- event body ------------------------------------------------------------------------------------------


async def test_event_body_matches_client_go() -> None:
    writer = FakeWriter()
    recorder, _, _ = make(writer)
    recorder.event(pod(), "Normal", "SuccessfulReflection", 'Successfully reflected object to cluster "c1"')
    await flush(recorder)
    assert len(writer.created) == 1
    namespace, body = writer.created[0]
    assert namespace == "app"
    assert body == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"web-0.{T0_NS:x}", "namespace": "app"},
        "involvedObject": {
            "kind": "Pod",
            "namespace": "app",
            "name": "web-0",
            "uid": "uid-1",
            "apiVersion": "v1",
            "resourceVersion": "42",
        },
        "reason": "SuccessfulReflection",
        "message": 'Successfully reflected object to cluster "c1"',
        "type": "Normal",
        "source": {"component": "liqo-pod-reflection", "host": "vk-node-1"},
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
        "count": 1,
        "reportingComponent": "liqo-pod-reflection",
        "reportingInstance": "vk-node-1",
    }


async def test_cluster_scoped_object_kind_override_and_long_message() -> None:
    writer = FakeWriter()
    recorder = EventRecorder(writer, "liqo-node", None)
    node = {"metadata": {"name": "c0123456789ab", "uid": "n-1"}}  # list items carry no kind
    recorder.event(node, "Warning", "Lost", "x" * 5000, kind="Node", api_version="v1")
    await flush(recorder)
    namespace, body = writer.created[0]
    assert namespace == "default"
    assert body["metadata"]["namespace"] == "default"
    assert body["involvedObject"] == {
        "kind": "Node",
        "name": "c0123456789ab",
        "uid": "n-1",
        "apiVersion": "v1",
    }
    assert len(body["message"]) == 1024
    assert body["source"] == {"component": "liqo-node"}
    assert body["reportingInstance"] == ""


async def test_unsupported_type_is_dropped() -> None:
    writer = FakeWriter()
    recorder, _, _ = make(writer)
    recorder.event(pod(), "Bogus", "R", "m")  # type: ignore[arg-type]
    assert recorder.backlog == 0


# -- aggregation -----------------------------------------------------------------------------------------


async def repeat_event(
    writer: FakeWriter, recorder: EventRecorder, clock: FakeClock, wall: list[int], delays: list[float]
) -> None:
    """Record one Warning, then the same again after each delay; each is written before time moves on."""
    task = asyncio.create_task(recorder.run())
    for n, delay in enumerate([0.0, *delays], start=1):
        clock.advance(delay)
        wall[0] += round(delay * 10**9)
        recorder.event(pod(), "Warning", "FailedReflection", "boom")
        await writer.wait_writes(n)
    await recorder.aclose()
    await task


async def test_identical_events_patch_the_count() -> None:
    writer = FakeWriter()
    recorder, clock, wall = make(writer)
    await repeat_event(writer, recorder, clock, wall, [60.0, 60.0])
    assert len(writer.created) == 1
    name = writer.created[0][1]["metadata"]["name"]
    assert writer.patched == [
        ("app", name, {"count": 2, "lastTimestamp": "2026-01-01T00:01:00Z", "message": "boom"}),
        ("app", name, {"count": 3, "lastTimestamp": "2026-01-01T00:02:00Z", "message": "boom"}),
    ]


async def test_aggregation_in_one_run() -> None:
    writer = FakeWriter()
    recorder, _, _ = make(writer)
    for _ in range(3):
        recorder.event(pod(), "Warning", "FailedReflection", "boom")
    recorder.event(pod(), "Warning", "FailedReflection", "different")
    recorder.event(pod(), "Normal", "FailedReflection", "boom")
    recorder.event(pod(uid="uid-2", name="web-1"), "Warning", "FailedReflection", "boom")
    await flush(recorder)
    assert len(writer.created) == 4
    assert [p[2]["count"] for p in writer.patched] == [2, 3]


async def test_identical_event_after_10_minutes_creates_a_new_event() -> None:
    writer = FakeWriter()
    recorder, clock, wall = make(writer)
    # the second 599 s after the first is a patch; the window slides from the last sighting, so the third
    # 601 s after the second is a new event
    await repeat_event(writer, recorder, clock, wall, [599.0, 601.0])
    assert len(writer.created) == 2
    assert len(writer.patched) == 1


async def test_patch_of_a_vanished_event_falls_back_to_create() -> None:
    writer = FakeWriter()
    recorder, _, _ = make(writer)
    writer.patch_errors.append(ApiError(404))
    recorder.event(pod(), "Warning", "FailedReflection", "boom")
    recorder.event(pod(), "Warning", "FailedReflection", "boom")
    await flush(recorder)
    assert len(writer.created) == 2
    assert writer.created[1][1]["count"] == 1


# -- spam filter in the recorder ---------------------------------------------------------------------------


async def test_recorder_applies_the_spam_filter_per_object() -> None:
    writer = FakeWriter()
    recorder, _, _ = make(writer)
    for i in range(30):
        recorder.event(pod(), "Normal", "R", f"m{i}")
    for i in range(3):
        recorder.event(pod(name="other", uid="uid-9"), "Normal", "R", f"m{i}")
    await flush(recorder)
    assert [b["message"] for _, b in writer.created[:25]] == [f"m{i}" for i in range(25)]
    assert sum(1 for _, b in writer.created if b["involvedObject"]["name"] == "other") == 3
    assert len(writer.created) == 28
    assert recorder.dropped == 5


# -- backlog and errors ------------------------------------------------------------------------------------


async def test_backlog_is_bounded_and_event_never_blocks(caplog: pytest.LogCaptureFixture) -> None:
    writer = FakeWriter()
    recorder, _, _ = make(writer, maxsize=3)
    with caplog.at_level(logging.DEBUG, logger="vkbridge.events"):
        for i in range(5):
            recorder.event(pod(name=f"p{i}", uid=f"u{i}"), "Normal", "R", "m")
    assert recorder.backlog == 3
    assert recorder.dropped == 2
    assert any("backlog full" in r.getMessage() for r in caplog.records)
    await flush(recorder)
    assert [b["involvedObject"]["name"] for _, b in writer.created] == ["p0", "p1", "p2"]


@pytest.mark.parametrize(
    ("errors", "kwargs", "created", "dropped"),
    [
        pytest.param(
            [ApiError(None), ApiError(503), ApiError(429)],
            {},
            ["a", "b"],
            0,
            id="transient-errors-are-retried",
        ),
        # e.g. namespace terminating
        pytest.param([ApiError(403)], {}, ["b"], 1, id="client-errors-are-dropped"),
        pytest.param(
            [ConnectionError("down")] * 3, {"max_tries": 3}, ["b"], 1, id="gives-up-after-max-tries"
        ),
    ],
)
async def test_write_errors_retry_or_drop_the_event(
    errors: list[Exception], kwargs: dict[str, Any], created: list[str], dropped: int
) -> None:
    """The first of two events meets the errors; the second is written whatever became of the first."""
    writer = FakeWriter()
    recorder, _, _ = make(writer, **kwargs)
    writer.create_errors = list(errors)
    recorder.event(pod(name="a", uid="a"), "Normal", "R", "m")
    recorder.event(pod(name="b", uid="b"), "Normal", "R", "m")
    await flush(recorder)
    assert [b["involvedObject"]["name"] for _, b in writer.created] == created
    assert recorder.dropped == dropped


async def test_run_waits_for_events_and_aclose_stops_it() -> None:
    writer = FakeWriter()
    recorder, _, _ = make(writer)
    task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0)
    recorder.event(pod(), "Normal", "R", "m")
    await writer.wait_writes(1)
    assert not task.done()
    await recorder.aclose()
    assert task.done()
    recorder.event(pod(), "Normal", "R", "after close")
    assert recorder.backlog == 0


async def test_aclose_timeout_cancels_a_stuck_writer() -> None:
    class StuckWriter(FakeWriter):
        async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
            await asyncio.sleep(3600)
            raise AssertionError("unreachable")

    recorder, _, _ = make(StuckWriter())
    recorder.event(pod(), "Normal", "R", "m")
    recorder.event(pod(), "Normal", "R", "m2")
    task = asyncio.create_task(recorder.run())
    await asyncio.sleep(0)
    await asyncio.wait_for(recorder.aclose(timeout=0.05), 2.0)
    assert task.cancelled()
    assert recorder.dropped == 1  # the one still queued; the in-flight one is cut off


# -- event names (issue 15 item 22) --------------------------------------------------------------------

DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


async def test_event_for_a_253_character_pod_has_a_valid_name_of_at_most_253() -> None:
    writer = FakeWriter()
    recorder, _, _ = make(writer)
    long_name = ("a" * 62 + ".") * 4 + "b"  # 253 characters, a valid pod name
    assert len(long_name) == 253
    recorder.event(pod(long_name), "Normal", "SuccessfulReflection", "ok")
    await flush(recorder)
    ((_, body),) = writer.created
    name = body["metadata"]["name"]
    assert len(name) <= 253 and DNS_SUBDOMAIN.match(name), name
    assert name.endswith(f".{T0_NS:x}")
    assert body["involvedObject"]["name"] == long_name


@pytest.mark.parametrize(
    ("object_name", "expected_base"),
    [
        ("web-0", "web-0"),  # short names keep client-go's exact form
        ("x" * 235 + "-tail", "x" * 235),  # cut after a dash: the dash goes too
        ("y" * 235 + ".z" + "q" * 20, "y" * 235),  # cut after a dot: the dot goes too
        ("", "event"),
    ],
)
def test_event_name_cuts_the_object_part_and_keeps_the_suffix(object_name: str, expected_base: str) -> None:
    name = event_name(object_name, T0_NS)
    assert name == f"{expected_base}.{T0_NS:x}"
    assert len(name) <= 253 and DNS_SUBDOMAIN.match(name)
