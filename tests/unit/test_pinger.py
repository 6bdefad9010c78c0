"""Pinger state logic with a scripted ping client (no I/O): when a late answer becomes an outage."""

from __future__ import annotations

import logging
from collections.abc import Iterable

import pytest

from vkbridge.kube.reachability import PoolState, Reachability
from vkbridge.node.pinger import LOSE_AFTER_MISSES, Pinger


class Script:
    """Answers pings from a list: an int is an HTTP status, None a timeout."""

    def __init__(self, answers: Iterable[int | None]) -> None:
        self.answers = list(answers)
        self.generation = 0

    async def ping(self, path: str, timeout: float) -> int:
        answer = self.answers.pop(0)
        if answer is None:
            raise TimeoutError
        return answer


async def states(answers: list[int | None]) -> list[PoolState]:
    reach = Reachability()
    pinger = Pinger(Script(answers), reach, interval=10, timeout=1)
    out = []
    for _ in answers:
        await pinger.ping_once()
        out.append(reach.state)
    return out


async def test_a_connected_pool_is_lost_only_after_three_misses_in_a_row() -> None:
    got = await states([200] + [None] * LOSE_AFTER_MISSES)
    assert got == [PoolState.CONNECTED] * LOSE_AFTER_MISSES + [PoolState.LOST]


async def test_an_answer_between_misses_resets_the_count() -> None:
    got = await states([200, None, None, 200, None, None, 200])
    assert PoolState.LOST not in got


async def test_at_start_one_miss_is_enough_to_say_lost() -> None:
    """Nothing was ever reached: there is no healthy state to protect from a false alarm."""
    assert await states([None]) == [PoolState.LOST]


async def test_unauthorized_is_not_debounced() -> None:
    """A 401 is an answer, not a late one: the fix must be logged at once."""
    assert await states([200, 401]) == [PoolState.CONNECTED, PoolState.UNAUTHORIZED]


async def test_a_lost_pool_returns_on_the_first_answer() -> None:
    got = await states([200, None, None, None, 200])
    assert got[-2:] == [PoolState.LOST, PoolState.CONNECTED]


async def test_a_second_rejected_credential_is_logged_again(caplog: pytest.LogCaptureFixture) -> None:
    """Bad bundle A rejected, bad bundle B applied before any ping saw a good one: B's rejection is news."""
    client = Script([401, 401, 401])
    client.generation = 1
    pinger = Pinger(client, Reachability(), interval=10, timeout=1)
    with caplog.at_level(logging.ERROR, logger="vkbridge.pool"):
        await pinger.ping_once()
        await pinger.ping_once()  # same credential: no second line
        client.generation = 2  # swapped
        await pinger.ping_once()
    lines = [r.getMessage() for r in caplog.records if "rejects" in r.getMessage()]
    assert len(lines) == 2 and "new credential too" in lines[1]
