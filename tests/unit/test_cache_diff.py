"""The cache's pure diff, and its list/watch loop against an in-memory fake client (no I/O)."""

from __future__ import annotations

import copy
import functools
import json
import logging
import tracemalloc
from collections.abc import AsyncGenerator, Sequence
from pathlib import Path
from typing import Any

import pytest

import vkbridge
from e2e.waiting import eventually
from tests.support.scripted import END, DecodeCounter, FakeClient, bookmark, ev, page, start, stop
from vkbridge.kube.cache import Cache, diff_stores, object_key
from vkbridge.kube.client import CONFIGMAPS, ApiError, TransportError, WatchExpired

Obj = dict[str, Any]


def obj(name: str, rv: str, uid: str | None = None, ns: str | None = "ns", **data: str) -> Obj:
    meta: Obj = {"name": name, "resourceVersion": rv, "uid": uid or f"uid-{name}"}
    if ns is not None:
        meta["namespace"] = ns
    return {"metadata": meta, "data": data}


def store(*objs: Obj) -> dict[str, Obj]:
    return {object_key(o): o for o in objs}


def rvs(changes: Sequence[tuple[str, Obj | None, Obj | None]]) -> list[tuple[str, str | None, str | None]]:
    def rv(o: Obj | None) -> str | None:
        return None if o is None else f"{o['metadata']['name']}@{o['metadata']['resourceVersion']}"

    return [(t, rv(a), rv(b)) for t, a, b in changes]


# ---------------------------------------------------------------------------------------------- diff_stores


def test_object_key() -> None:
    assert object_key(obj("a", "1")) == "ns/a"
    assert object_key(obj("node1", "1", ns=None)) == "node1"


def test_diff_empty_to_full_and_back() -> None:
    full = store(obj("a", "1"), obj("b", "2"))
    assert rvs(diff_stores({}, full)) == [("ADDED", None, "a@1"), ("ADDED", None, "b@2")]
    assert rvs(diff_stores(full, {})) == [("DELETED", "a@1", None), ("DELETED", "b@2", None)]
    assert diff_stores(full, dict(full)) == []


def test_diff_by_resource_version_only() -> None:
    old = store(obj("same", "5"), obj("changed", "6"), obj("gone", "7"))
    new = store(obj("same", "5", extra="ignored"), obj("changed", "9"), obj("new", "10"))
    assert rvs(diff_stores(old, new)) == [
        ("DELETED", "gone@7", None),
        ("MODIFIED", "changed@6", "changed@9"),
        ("ADDED", None, "new@10"),
    ]


def test_diff_recreated_object_is_delete_then_add() -> None:
    old = store(obj("a", "1", uid="u1"), obj("b", "2"))
    new = store(obj("a", "8", uid="u2"), obj("b", "2"))
    changes = diff_stores(old, new)
    assert rvs(changes) == [("DELETED", "a@1", None), ("ADDED", None, "a@8")]
    assert changes[0][1] is old["ns/a"] and changes[1][2] is new["ns/a"]


# ---------------------------------------------------------------------------------------------- Cache loop

# Polled finely: some conditions hold only between two of the cache's retries.
until = functools.partial(eventually, interval=0.002)


class Recorder:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache
        self.seen: list[tuple[str, str | None, str | None, Obj | None]] = []

    def __call__(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        key = object_key(new or old or {})
        # The store must already reflect the change when we are called (level-based handlers).
        self.seen.append((*rvs([(etype, old, new)])[0], self.cache.get(key)))

    @property
    def events(self) -> list[tuple[str, str | None, str | None]]:
        return [s[:3] for s in self.seen]


@pytest.fixture
async def rig() -> AsyncGenerator[tuple[FakeClient, Cache, Recorder], None]:
    fake = FakeClient()
    client: Any = fake
    cache = Cache(
        client,
        CONFIGMAPS,
        "ns",
        label_selector="app=x",
        name="test",
        inactivity_timeout=5.0,
        backoff_base=0.01,
    )
    rec = Recorder(cache)
    cache.subscribe(rec)
    yield fake, cache, rec


async def test_paginated_list_then_watch_from_list_rv(rig: tuple[FakeClient, Cache, Recorder]) -> None:
    fake, cache, rec = rig
    a = obj("a", "1")
    a["metadata"]["managedFields"] = [{"manager": "kubectl"}]
    fake.list_results = [page("", a, cont="tok"), page("10", obj("b", "2"))]
    assert not cache.synced
    task = await start(cache)
    await until(lambda: len(fake.watch_calls) == 1, 3.0, "the first watch")
    assert [c["limit"] for c in fake.list_calls] == [500, 500]
    assert [c["continue_token"] for c in fake.list_calls] == [None, "tok"]
    assert fake.list_calls[0]["label_selector"] == "app=x"
    assert fake.watch_calls[0]["resource_version"] == "10"
    assert fake.watch_calls[0]["allow_bookmarks"] is True
    assert rec.events == [("ADDED", None, "a@1"), ("ADDED", None, "b@2")]
    assert sorted(cache.keys()) == ["ns/a", "ns/b"]
    assert "managedFields" not in cache.get("ns/a")["metadata"]  # type: ignore[index]
    assert cache.last_sync_time is not None and cache.state == "watching"
    await stop(task)
    assert fake.open_watches == 0 and cache.state == "idle"
    assert sorted(cache.keys()) == ["ns/a", "ns/b"]  # the store survives the task


async def test_watch_events_update_store_before_subscribers(rig: tuple[FakeClient, Cache, Recorder]) -> None:
    fake, cache, rec = rig
    fake.list_results = [page("10", obj("a", "1"))]
    task = await start(cache)
    fake.feed.put_nowait(ev("MODIFIED", obj("a", "11", v="2")))
    fake.feed.put_nowait(ev("ADDED", obj("b", "12")))
    fake.feed.put_nowait(ev("DELETED", obj("a", "13")))
    await until(lambda: len(rec.seen) == 4, 3.0, "four changes seen")
    assert rec.events[1:] == [("MODIFIED", "a@1", "a@11"), ("ADDED", None, "b@12"), ("DELETED", "a@13", None)]
    assert rec.seen[1][3] is not None and rec.seen[1][3]["data"] == {"v": "2"}
    assert rec.seen[3][3] is None  # already gone from the store when DELETED is delivered
    assert cache.keys() == ["ns/b"] and cache.resource_version == "13"
    await stop(task)


async def test_410_relists_and_emits_missed_changes(rig: tuple[FakeClient, Cache, Recorder]) -> None:
    fake, cache, rec = rig
    fake.list_results = [
        page("10", obj("a", "1"), obj("b", "2"), obj("c", "3")),
        page("50", obj("b", "40"), obj("c", "3"), obj("d", "45")),
    ]
    task = await start(cache)
    fake.feed.put_nowait(WatchExpired("too old"))
    await until(lambda: len(fake.watch_calls) == 2, 3.0, "a second watch")
    assert len(fake.list_calls) == 2 and cache.relists == 1
    assert rec.events[3:] == [("DELETED", "a@1", None), ("MODIFIED", "b@2", "b@40"), ("ADDED", None, "d@45")]
    assert fake.watch_calls[1]["resource_version"] == "50"
    assert sorted(cache.keys()) == ["ns/b", "ns/c", "ns/d"]
    await stop(task)


async def test_transport_error_rewatches_from_bookmark_without_relist(
    rig: tuple[FakeClient, Cache, Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    fake, cache, rec = rig
    fake.list_results = [page("10", obj("a", "1"))]
    task = await start(cache)
    caplog.set_level(logging.INFO, logger="vkbridge.kube.cache")
    fake.feed.put_nowait(bookmark("20"))
    for _ in range(3):  # one outage, several failed retries
        fake.feed.put_nowait(TransportError("connection reset"))
    fake.feed.put_nowait(ev("ADDED", obj("b", "21")))
    await until(lambda: cache.get("ns/b") is not None, 3.0, "ns/b in the cache")
    assert len(fake.list_calls) == 1
    assert [c["resource_version"] for c in fake.watch_calls] == ["10", "20", "20", "20"]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "connection reset" in str(getattr(warnings[0], "kv", {}).get("detail"))
    assert any(
        r.getMessage() == "reconnected" and r.kv["rv"] == "20" for r in caplog.records if hasattr(r, "kv")
    )
    assert rec.events == [("ADDED", None, "a@1"), ("ADDED", None, "b@21")]
    await stop(task)


async def test_inactivity_timeout_rewatches(rig: tuple[FakeClient, Cache, Recorder]) -> None:
    fake, cache, _ = rig
    cache.inactivity_timeout = 0.05
    fake.list_results = [page("10")]
    task = await start(cache)
    await until(lambda: len(fake.watch_calls) >= 3, 3.0, "a third watch")
    assert {c["resource_version"] for c in fake.watch_calls} == {"10"}
    assert fake.open_watches <= 1 and len(fake.list_calls) == 1
    await stop(task)


async def test_server_closing_the_stream_rewatches_at_once(rig: tuple[FakeClient, Cache, Recorder]) -> None:
    fake, cache, _ = rig
    fake.list_results = [page("10")]
    task = await start(cache)
    fake.feed.put_nowait(bookmark("15"))
    fake.feed.put_nowait(END)
    await until(lambda: len(fake.watch_calls) == 2, 3.0, "a second watch")
    assert fake.watch_calls[1]["resource_version"] == "15"
    await stop(task)


async def test_list_failure_retries_then_syncs(rig: tuple[FakeClient, Cache, Recorder]) -> None:
    fake, cache, rec = rig
    fake.list_results = [ApiError(403, "Forbidden", "nope"), page("10", obj("a", "1"))]
    task = await start(cache)
    assert len(fake.list_calls) == 2 and rec.events == [("ADDED", None, "a@1")]
    await stop(task)


async def test_wait_synced_times_out(rig: tuple[FakeClient, Cache, Recorder]) -> None:
    _, cache, _ = rig
    assert await cache.wait_synced(0.01) is False


async def test_failing_subscriber_does_not_stop_others(rig: tuple[FakeClient, Cache, Recorder]) -> None:
    fake, cache, rec = rig

    def boom(etype: str, old: Obj | None, new: Obj | None) -> None:
        raise RuntimeError("handler bug")

    unsubscribe = cache.subscribe(boom)
    fake.list_results = [page("10", obj("a", "1"))]
    task = await start(cache)
    unsubscribe()
    fake.feed.put_nowait(ev("ADDED", obj("b", "11")))
    await until(lambda: len(rec.seen) == 2, 3.0, "two changes seen")
    await stop(task)


async def test_restarted_run_resumes_the_watch_and_relists_on_410(
    rig: tuple[FakeClient, Cache, Recorder],
) -> None:
    fake, cache, rec = rig
    fake.list_results = [page("10", obj("a", "1")), page("30", obj("b", "25"))]
    await stop(await start(cache))
    fake.feed.put_nowait(WatchExpired("too old"))
    task = await start(cache)
    await until(lambda: len(fake.watch_calls) == 3, 3.0, "a third watch")
    assert [c["resource_version"] for c in fake.watch_calls] == ["10", "10", "30"]
    assert cache.expirations == 1 and cache.relists == 1
    assert rec.events == [("ADDED", None, "a@1"), ("DELETED", "a@1", None), ("ADDED", None, "b@25")]
    await stop(task)


async def test_credential_swap_reconnects_quietly(
    rig: tuple[FakeClient, Cache, Recorder], caplog: pytest.LogCaptureFixture
) -> None:
    fake, cache, _ = rig
    cache.backoff_base = 20.0  # a backoff sleep would time the test out
    fake.list_results = [page("10")]
    task = await start(cache)
    caplog.set_level(logging.INFO, logger="vkbridge.kube.cache")
    await until(lambda: len(fake.watch_calls) == 1, 3.0, "the first watch")
    fake.generation += 1
    fake.feed.put_nowait(TransportError("Connector is closed"))
    await until(lambda: len(fake.watch_calls) == 2, 3.0, "a second watch")
    assert fake.watch_calls[1]["resource_version"] == "10"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert cache.state == "watching"
    await stop(task)


async def test_compact_cache_reads_equal_private_copies_and_diffs_relists() -> None:
    """Kept as JSON bytes: every read is the object as stored, a copy a reader may change freely, and a
    410 re-list still emits exactly the missed changes."""
    fake = FakeClient()
    client: Any = fake
    cache = Cache(
        client, CONFIGMAPS, "ns", name="compact", inactivity_timeout=5.0, backoff_base=0.01, compact=True
    )
    rec = Recorder(cache)
    cache.subscribe(rec)
    fake.list_results = [page("10", obj("a", "1", k="v")), page("30", obj("b", "25"))]
    task = await start(cache)
    fake.feed.put_nowait(ev("MODIFIED", obj("a", "20", k="w")))
    await until(
        lambda: (cache.get("ns/a") or {}).get("data") == {"k": "w"}, 3.0, "the watched update in the cache"
    )
    got = cache.get("ns/a")
    assert got == obj("a", "20", k="w")
    assert got is not None and got is not cache.get("ns/a")
    got["data"]["k"] = "changed by a reader"
    assert cache.list() == [obj("a", "20", k="w")]
    fake.feed.put_nowait(WatchExpired("too old"))
    await until(lambda: cache.relists == 1, 3.0, "one relist")
    assert rec.events[-2:] == [("DELETED", "a@20", None), ("ADDED", None, "b@25")]
    assert cache.keys() == ["ns/b"]
    await stop(task)


async def test_compact_cache_decodes_the_old_object_of_a_change_only_for_a_subscriber_that_reads_it() -> None:
    """Most subscribers only ask whether there was an old object: a MODIFIED must not decode it for them,
    and one that reads it gets exactly the object as it was stored, once decoded for all."""
    fake = FakeClient()
    client: Any = fake
    cache = Cache(client, CONFIGMAPS, "ns", name="compact", inactivity_timeout=5.0, compact=True)
    olds: list[Any] = []
    cache.subscribe(lambda _t, old, _new: olds.append(old))
    fake.list_results = [page("10", obj("a", "1", k="v"))]
    task = await start(cache)
    decoded = DecodeCounter(cache)
    fake.feed.put_nowait(ev("MODIFIED", obj("a", "2", k="w")))
    fake.feed.put_nowait(ev("MODIFIED", obj("a", "3", k="x")))
    await until(lambda: len(olds) == 3, 3.0, "two changes seen")
    assert olds[0] is None and decoded.count == 0  # ADDED by the list; two MODIFIED, nothing decoded yet
    first, second = olds[1:]
    assert first == obj("a", "1", k="v") and dict(first) == obj("a", "1", k="v")
    assert first["metadata"]["resourceVersion"] == "1" and first.get("data") == {"k": "v"}
    assert decoded.count == 1
    assert first["data"] is first["data"] and decoded.count == 1  # decoded once, shared by every reader
    assert second == obj("a", "2", k="w") and decoded.count == 2
    assert copy.deepcopy(second) == obj("a", "2", k="w") and type(copy.deepcopy(second)) is dict
    fake.feed.put_nowait(ev("DELETED", obj("a", "4", k="x")))
    await until(lambda: len(olds) == 4, 3.0, "the delete seen")
    assert olds[3] == obj("a", "4", k="x") and decoded.count == 2  # a DELETED hands the event's object
    await stop(task)


async def test_compact_cache_holds_about_the_json_size_of_each_object() -> None:
    """orjson hands back its grown write buffer (4-32 KB for a 2 KB pod); the cache must keep only the
    bytes of the object, or its memory per pod is several times what the figures promise."""
    fake = FakeClient()
    client: Any = fake
    cache = Cache(client, CONFIGMAPS, "ns", name="compact", inactivity_timeout=5.0, compact=True)
    objects = [obj(f"o{i:04d}", str(100 + i), k="v" * 2100) for i in range(300)]
    fake.list_results = [page("10")]
    task = await start(cache)
    # Only what vkbridge's own code allocated (orjson's buffers count against the cache line that called
    # it): in a full session, threads of the integration tests' fixtures allocate during the window too.
    product = [tracemalloc.Filter(True, str(Path(vkbridge.__file__).parent / "*"))]
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot().filter_traces(product)
        for o in objects:
            fake.feed.put_nowait(ev("ADDED", o))
        await until(lambda: len(cache) == len(objects), 3.0, "every object listed")
        after = tracemalloc.take_snapshot().filter_traces(product)
    finally:
        tracemalloc.stop()
    await stop(task)
    held = sum(stat.size_diff for stat in after.compare_to(before, "filename"))
    json_bytes = sum(len(json.dumps(o, separators=(",", ":"))) for o in objects)
    assert held < 1.3 * json_bytes, (
        f"{held / len(objects):.0f} bytes held per object of ~{json_bytes / 300:.0f}"
    )


async def test_one_namespace_is_listed_without_decoding_the_others_and_json_without_decoding_any() -> None:
    """A pair start reads one namespace's pods and ``/pods`` serves the stored JSON: neither may decode
    the whole compact cache on the event loop (~0.9 s per 10,000 pods)."""
    fake = FakeClient()
    client: Any = fake
    cache = Cache(client, CONFIGMAPS, name="all", inactivity_timeout=5.0, backoff_base=0.01, compact=True)
    fake.list_results = [
        page(
            "10", obj("a", "1", ns="x"), obj("b", "2", ns="y"), obj("c", "3", ns="x"), obj("n", "4", ns=None)
        ),
        page("30", obj("b", "25", ns="y"), obj("d", "26", ns="z")),
    ]
    task = await start(cache)
    fake.feed.put_nowait(ev("ADDED", obj("e", "11", ns="y")))
    fake.feed.put_nowait(ev("DELETED", obj("c", "12", ns="x")))
    await until(lambda: "x/c" not in cache, 3.0, "x/c gone from the cache")
    decoded = DecodeCounter(cache)
    assert cache.list("x") == [obj("a", "1", ns="x")] and decoded.count == 1
    assert cache.list("y") == [obj("b", "2", ns="y"), obj("e", "11", ns="y")] and decoded.count == 3
    assert cache.list("nowhere") == [] and decoded.count == 3
    blobs = cache.list_json()
    assert decoded.count == 3  # the JSON as stored
    assert [json.loads(b) for b in blobs] == cache.list()
    fake.feed.put_nowait(WatchExpired("too old"))
    await until(lambda: cache.relists == 1, 3.0, "one relist")
    assert cache.list("x") == [] and cache.list("y") == [obj("b", "25", ns="y")]
    assert cache.list("z") == [obj("d", "26", ns="z")]
    await stop(task)
