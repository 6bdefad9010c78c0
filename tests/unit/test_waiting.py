"""The one wait helper of the harness and the tests (e2e.waiting): what it returns, when it gives up."""

from __future__ import annotations

import itertools

import pytest

from e2e.waiting import eventually, wait_until
from vkbridge.kube.client import ApiError


def test_wait_until_returns_the_first_truthy_answer() -> None:
    answers = iter([None, 0, "", "ready"])
    assert wait_until(lambda: next(answers), 1.0, "an answer", interval=0.001) == "ready"


def test_wait_until_names_what_it_waited_for() -> None:
    with pytest.raises(TimeoutError, match=r"timed out after 0\.1s waiting for the moon"):
        wait_until(lambda: False, 0.1, "the moon", interval=0.01)


async def test_eventually_awaits_async_and_plain_conditions() -> None:
    count = itertools.count()

    async def later() -> int | None:
        n = next(count)
        return n if n >= 2 else None

    assert await eventually(later, 1.0, "the third call", interval=0.001) == 2
    assert await eventually(lambda: "plain", 1.0, "a plain answer") == "plain"


async def test_eventually_treats_not_yet_errors_as_not_yet_and_reports_the_last_one() -> None:
    def refused() -> None:
        raise ApiError(503, "ServiceUnavailable", "starting")

    with pytest.raises(TimeoutError, match=r"waiting for the API; last: .*starting"):
        await eventually(refused, 0.05, "the API", interval=0.01, not_yet=(ApiError,))


async def test_eventually_lets_other_errors_through_at_once() -> None:
    def broken() -> None:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        await eventually(broken, 5.0, "anything", not_yet=(ApiError,))
