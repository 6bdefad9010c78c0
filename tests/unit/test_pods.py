"""PodReflector.handle, the hot path (DESIGN §2, invariants 1, 6), on the shared in-memory API.

Real caches, real grant ledger, real forge; the clients are `tests.support.fakeapi.FakeApi` and the
configuration reflector is a stand-in that finds every reference present. Behaviour against the API
servers is tests/integration/test_pods.py and test_grant.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from fractions import Fraction
from typing import Any, cast

import pytest

from e2e.waiting import eventually
from reflectors.forge import constants as c
from reflectors.generic import PoolUnavailable
from reflectors.pairs import NamespacePair, new_pair, remote_selector
from reflectors.pods import PodInfo, PodReflector, already_written
from tests.support.fakeapi import FakeApi, FakeRecorder, caught_up
from tests.support.reflection import LOCAL_ID, REMOTE_ID, reflection_context
from tests.support.reflection import local_pod as pod
from vkbridge.grant import Admission, Grant
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import PODS
from vkbridge.kube.reachability import PoolState
from vkbridge.kube.workqueue import RequeueAfter

NS = "team"
REMOTE_NS = f"team-{LOCAL_ID}"
KEY = f"{NS}/web"
GRANT = {"cpu": "1", "memory": "1Gi", "pods": "10"}


class AllPresent:
    """The configuration reflector as `PodReflector` sees it (`ConfigurationPort`): nothing is missing."""

    def __init__(self) -> None:
        self.released: list[str] = []

    async def ensure_for_pod(self, pair_local: str, pod: Mapping[str, Any]) -> list[str]:
        return []

    def track_pod(self, pair_local: str, pod: Mapping[str, Any]) -> None:
        pass

    def release_pod(self, pod_key: str) -> None:
        self.released.append(pod_key)

    def missing_message(self, missing: Iterable[str]) -> str:
        return "missing " + ", ".join(missing)

    def absent_references(self, pod_key: str) -> tuple[Any, ...]:
        return ()


class Env:
    def __init__(self, grant: Mapping[str, str]) -> None:
        self.home, self.pool, self.recorder = FakeApi("consumer"), FakeApi("pool"), FakeRecorder()
        self.ctx = reflection_context(self.home, self.pool, recorder=self.recorder)
        self.local_pods = Cache(
            cast(Any, self.home), PODS, field_selector=f"spec.nodeName={REMOTE_ID}", name="consumer/pods"
        )
        self.admission = Admission(Grant.from_resource_list(grant))
        self.refl = PodReflector(self.ctx, self.local_pods, self.admission, configuration=AllPresent())
        self.queued: list[str] = []
        selector = remote_selector(REMOTE_ID, LOCAL_ID, REMOTE_ID)
        self.pair: NamespacePair = new_pair(
            cast(Any, self.pool), NS, REMOTE_NS, selector, self.queued.append, 60.0
        )
        self.fed = [(self.local_pods, self.home), *((cc, self.pool) for cc in self.pair.caches())]

    async def handle(self, key: str = KEY) -> Any:
        """Once every cache shows what the stores hold, as a worker would find them."""
        await eventually(lambda: all(caught_up(cc, api) for cc, api in self.fed), 2.0, "caches caught up")
        return await self.refl.handle(key, self.pair)

    def shadow(self, name: str = "web") -> dict[str, Any] | None:
        return self.pool.obj("shadowpods", REMOTE_NS, name)

    def used(self) -> dict[str, Fraction]:
        return dict(self.admission.used())


@contextlib.asynccontextmanager
async def env(grant: Mapping[str, str] = GRANT) -> AsyncIterator[Env]:
    e = Env(grant)
    tasks = [asyncio.create_task(cache.run()) for cache, _ in e.fed]
    try:
        for cache, _ in e.fed:
            await asyncio.wait_for(cache.wait_synced(), 2)
        yield e
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


# ------------------------------------------------------------------------------------------ handle


async def test_a_new_pod_gets_its_shadowpod_and_its_share_of_the_grant() -> None:
    async with env() as e:
        local = e.home.put("pods", pod())
        assert await e.handle() is None
        shadow = e.shadow()
        assert shadow is not None
        labels = shadow["metadata"]["labels"]
        assert (labels[c.ORIGIN_LABEL], labels[c.DESTINATION_LABEL], labels[c.NODENAME_LABEL]) == (
            LOCAL_ID, REMOTE_ID, REMOTE_ID,
        )  # fmt: skip
        assert shadow["metadata"]["annotations"][c.LOCAL_POD_UID_ANNOTATION] == local["metadata"]["uid"]
        assert shadow["spec"]["pod"]["containers"][0]["resources"]["requests"] == {
            "cpu": "500m",
            "memory": "256Mi",
        }
        assert e.used() == {"cpu": Fraction(1, 2), "memory": Fraction(256 * 2**20), "pods": Fraction(1)}
        assert e.refl.charged[KEY] == local["metadata"]["uid"]
        assert c.EVENT_SUCCESSFUL_REFLECTION in e.recorder.reasons("web")
        # the next handle finds it in the cache: no second create, no second charge; it waits for the
        # remote pod the pool makes of it (a Warning if none comes)
        assert isinstance(await e.handle(), RequeueAfter)
        assert [v for v, *_ in e.pool.writes("shadowpods")] == ["create"]
        assert e.used()["pods"] == 1


async def test_a_pod_over_the_grant_waits_with_a_notice_and_nothing_is_sent() -> None:
    async with env() as e:
        e.home.put("pods", pod(cpu="1500m"))
        assert await e.handle() is None
        assert e.pool.writes() == [] and e.shadow() is None
        assert e.used() == {} and KEY not in e.refl.charged
        assert list(e.admission.waiters) == [KEY], "it waits in the ledger's wait-list"
        notices = [ev for ev in e.recorder.events if ev[3] == c.EVENT_FAILED_REFLECTION]
        assert len(notices) == 1 and notices[0][2] == "Warning" and "cpu" in notices[0][4]
        await e.handle()  # still too big: one notice per reason, not per handle
        assert len([ev for ev in e.recorder.events if ev[3] == c.EVENT_FAILED_REFLECTION]) == 1


async def test_pool_unavailable_parks_the_pod_and_nothing_is_lost_when_it_returns() -> None:
    async with env() as e:
        e.home.put("pods", pod())
        e.ctx.reach.set(PoolState.LOST)
        with pytest.raises(PoolUnavailable):
            await e.handle()
        assert e.pool.writes() == [] and e.shadow() is None
        e.ctx.reach.set(PoolState.CONNECTED)
        assert await e.handle() is None
        assert e.shadow() is not None
        assert e.used()["pods"] == 1  # charged once, whatever the parked attempt did


async def test_a_terminating_local_pod_deletes_its_shadowpod_then_goes() -> None:
    async with env() as e:
        local = e.home.put("pods", pod())
        await e.handle()
        shadow = e.shadow()
        assert shadow is not None
        e.home.put(
            "pods", {**local, "metadata": {**local["metadata"], "deletionTimestamp": "2026-12-01T12:05:00Z"}}
        )
        assert await e.handle() is None
        assert ("shadowpods", "web", shadow["metadata"]["uid"]) in e.pool.deletes  # UID precondition
        assert e.shadow() is None
        # nothing left on the pool: the local pod is removed, its share freed
        assert await e.handle() is None
        assert e.home.obj("pods", NS, "web") is None
        assert ("pods", "web", local["metadata"]["uid"]) in e.home.deletes
        assert e.used() == {} and KEY not in e.refl.charged


async def test_a_gone_local_pod_takes_its_shadowpod_and_then_its_share_with_it() -> None:
    async with env() as e:
        e.home.put("pods", pod())
        await e.handle()
        shadow = e.shadow()
        e.home.remove("pods", NS, "web")
        assert await e.handle() is None
        assert e.shadow() is None and KEY not in e.refl.infos
        assert e.used()["pods"] == 1, "the pool counts it until it shows the ShadowPod gone"
        e.refl.charges.release_gone(KEY, shadow)  # the engine, on the ShadowPod's DELETED event
        assert e.used() == {} and KEY not in e.refl.charged


# ------------------------------------------------------------------------------------------ status memo
# A handle that runs before the consumer watch brings our own write back must not write the same status
# again (bench.apicalls: 1.14 status patches per pod without it).

RUNNING: dict[str, Any] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
PENDING: dict[str, Any] = {"phase": "Pending"}


def test_nothing_written_yet_means_not_written() -> None:
    assert not already_written(PodInfo(), "10", RUNNING)


def test_same_status_over_a_stale_cache_is_not_written_again() -> None:
    info = PodInfo(status_written=("10", dict(RUNNING)))
    assert already_written(info, "10", dict(RUNNING))
    assert info.status_written is not None  # kept until the cache shows the write


def test_a_different_status_over_a_stale_cache_is_written() -> None:
    info = PodInfo(status_written=("10", dict(PENDING)))
    assert not already_written(info, "10", RUNNING)


def test_the_memory_is_dropped_once_the_cache_moved_past_the_write() -> None:
    info = PodInfo(status_written=("10", dict(RUNNING)))
    assert not already_written(info, "11", RUNNING)  # judged against the cache again from now on
    assert info.status_written is None
