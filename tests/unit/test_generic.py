"""What every reflector shares (reflectors.generic): the pool guard, the pair lifecycle, one writer per key;
and the grant ledger's wait-list as the engine subscribes to it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import pytest

from reflectors.generic import KeyLocks, Pair, PairReflector, PoolUnavailable, pool_failure, require_pool
from vkbridge.grant import Admission, Grant
from vkbridge.kube.client import ApiError, TransportError
from vkbridge.kube.reachability import PoolState, Reachability


async def test_only_a_transport_failure_parks_the_key_and_asks_the_pinger() -> None:
    reach = Reachability()
    reach.set(PoolState.CONNECTED)
    gone = pool_failure(
        reach, TransportError("POST /x: ClientConnectorError: refused"), "create Secret ns/db"
    )
    assert isinstance(gone, PoolUnavailable) and str(gone) == "create Secret ns/db"
    assert await reach.wait_check_request(0.01), "the pinger was not asked to look now"
    quiet = Reachability()
    for answer in (ApiError(500, "InternalError", "boom"), ApiError(0, "TransportError", "not by type")):
        assert pool_failure(quiet, answer) is None, "an answer of the API server is not the pool going away"
    assert not await quiet.wait_check_request(0.01)


def test_require_pool_parks_while_the_pool_is_not_connected() -> None:
    reach = Reachability()
    with pytest.raises(PoolUnavailable, match=reach.state.value):
        require_pool(reach)
    reach.set(PoolState.CONNECTED)
    require_pool(reach)


@dataclass(kw_only=True)
class _Pair(Pair):
    prepared: list[str] = field(default_factory=list)


class _Reflector(PairReflector[_Pair]):
    name = "test"

    def __init__(self) -> None:
        super().__init__()
        self.forgotten: list[tuple[str, str]] = []

    def _new_pair(self, local: str, remote: str) -> _Pair:
        return _Pair(local=local, remote=remote)

    async def _prepare(self, pair: _Pair) -> None:
        pair.prepared.append(pair.remote)
        await asyncio.Event().wait()  # runs until the pair stops

    def _forget_pair(self, pair: _Pair) -> None:
        self.forgotten.append((pair.local, pair.remote))


async def test_a_pair_starts_once_per_remote_and_a_new_remote_replaces_it() -> None:
    refl = _Reflector()
    async with asyncio.TaskGroup() as tg:
        names: list[str] = []

        def factory(coro: Any, *, name: str) -> asyncio.Task[Any]:
            names.append(name)
            return tg.create_task(coro, name=name)

        refl.start_pair("team", "team-pool", factory)
        refl.start_pair("team", "team-pool", factory)  # the same pair again: nothing new
        first = refl.pairs["team"]
        await asyncio.sleep(0)
        assert names == ["test-sync-team"] and first.prepared == ["team-pool"]
        assert refl.synced("team") and await refl.wait_synced("team")  # no caches: synced at once
        refl.start_pair("team", "team-elsewhere", factory)
        await asyncio.sleep(0)
        assert first.tasks[0].cancelled() and refl.forgotten == [("team", "team-pool")]
        assert refl.pairs["team"].remote == "team-elsewhere"
        refl.stop_pair("team")
        refl.stop_pair("team")  # stopping twice is harmless
        assert refl.forgotten == [("team", "team-pool"), ("team", "team-elsewhere")]
        assert not refl.synced("team") and not await refl.wait_synced("team")
        assert refl.caches_of("team") == []


async def test_key_locks_let_one_writer_in_at_a_time_and_forget_idle_keys() -> None:
    locks: KeyLocks[str] = KeyLocks()
    order: list[str] = []

    async def write(who: str) -> None:
        async with locks.hold("ns/db"):
            order.append(f"{who} in")
            await asyncio.sleep(0.01)
            order.append(f"{who} out")

    await asyncio.gather(write("a"), write("b"))
    assert order == ["a in", "a out", "b in", "b out"]
    assert len(locks) == 0


def test_the_ledger_tells_its_subscriber_only_when_a_freed_charge_meets_waiters() -> None:
    ledger = Admission(Grant.from_resource_list({"cpu": "1", "memory": "1Gi", "pods": "10"}))
    told: list[int] = []
    ledger.on_freed(lambda: told.append(len(ledger.waiters)))
    ledger.force_charge("uid-a", {"cpu": ledger.grant.resources["cpu"]})
    assert ledger.release("uid-a") and told == []  # nobody waits: nothing to tell
    ledger.force_charge("uid-a", {"cpu": ledger.grant.resources["cpu"]})
    ledger.wait("team/b", "2026-12-01T10:00:00Z")
    assert not ledger.release("uid-never") and told == []  # nothing freed
    assert ledger.release("uid-a") and told == [1]
