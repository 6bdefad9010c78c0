"""Rate limiters (client-go semantics) and the capped backoff."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest

from tests.support.clock import FakeClock
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.ratelimit import (
    BucketRateLimiter,
    ItemExponentialLimiter,
    MaxOfLimiter,
    TokenBucket,
    default_controller_rate_limiter,
)

# -- TokenBucket ---------------------------------------------------------------------------------------


def test_bucket_starts_full_then_refills_at_qps() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=2.0, burst=3, clock=clock)
    assert [bucket.try_acquire() for _ in range(4)] == [True, True, True, False]
    clock.advance(0.25)
    assert not bucket.try_acquire()
    clock.advance(0.25)
    assert bucket.try_acquire()
    assert not bucket.try_acquire()


def test_bucket_never_exceeds_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10.0, burst=2, clock=clock)
    clock.advance(3600)
    assert bucket.tokens == 2
    assert [bucket.try_acquire() for _ in range(3)] == [True, True, False]


def test_bucket_when_reserves_and_spaces_callers() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=10.0, burst=2, clock=clock)
    delays = [bucket.when() for _ in range(5)]
    assert delays[:2] == [0.0, 0.0]
    assert delays[2:] == pytest.approx([0.1, 0.2, 0.3])
    # reservations are owed: nothing free until they are paid back
    clock.advance(0.3)
    assert not bucket.try_acquire()
    clock.advance(0.1)
    assert bucket.try_acquire()


def test_bucket_try_acquire_does_not_reserve() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=1.0, burst=1, clock=clock)
    assert bucket.try_acquire()
    for _ in range(10):
        assert not bucket.try_acquire()
    clock.advance(1.0)
    assert bucket.try_acquire()


def test_bucket_infinite_qps_never_limits() -> None:
    bucket = TokenBucket(qps=math.inf, burst=1, clock=FakeClock())
    assert all(bucket.try_acquire() for _ in range(1000))
    assert bucket.when() == 0.0


@pytest.mark.parametrize(("qps", "burst"), [(0.0, 1), (-1.0, 1), (1.0, 0)])
def test_bucket_rejects_bad_parameters(qps: float, burst: int) -> None:
    with pytest.raises(ValueError):
        TokenBucket(qps=qps, burst=burst)


async def test_acquire_waits_for_the_next_token() -> None:
    bucket = TokenBucket(qps=20.0, burst=2)
    loop = asyncio.get_running_loop()
    start = loop.time()
    await bucket.acquire()
    await bucket.acquire()
    assert loop.time() - start < 0.03
    await bucket.acquire()
    assert loop.time() - start >= 0.045  # one token per 50 ms (loop clock granularity aside)


async def test_cancelled_acquire_returns_its_reservation() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=1.0, burst=1, clock=clock)
    assert bucket.try_acquire()
    waiter = asyncio.create_task(bucket.acquire())  # reserves the next token, then sleeps ~1 s
    await asyncio.sleep(0)
    assert bucket.tokens == pytest.approx(-1.0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    clock.advance(1.0)
    assert bucket.try_acquire()  # without the refund the token would still be owed


# -- per-item and combined limiters ------------------------------------------------------------------


def test_item_exponential_doubles_and_caps() -> None:
    limiter = ItemExponentialLimiter(base=0.005, cap=1000.0)
    delays = [limiter.when("a") for _ in range(20)]
    assert delays[:5] == pytest.approx([0.005, 0.01, 0.02, 0.04, 0.08])
    assert delays[17] == pytest.approx(655.36)
    assert delays[18:] == [1000.0, 1000.0]
    assert limiter.num_requeues("a") == 20
    assert limiter.when("b") == pytest.approx(0.005)  # keys are independent


def test_item_exponential_forget_and_huge_counts() -> None:
    limiter = ItemExponentialLimiter(base=0.001, cap=5.0)
    for _ in range(2000):  # no OverflowError past 2**1023
        assert limiter.when("k") <= 5.0
    assert limiter.when("k") == 5.0
    limiter.forget("k")
    assert limiter.num_requeues("k") == 0
    assert len(limiter) == 0
    assert limiter.when("k") == pytest.approx(0.001)
    limiter.forget("never-seen")


def test_bucket_rate_limiter_has_no_per_item_state() -> None:
    limiter = BucketRateLimiter(TokenBucket(qps=1.0, burst=1, clock=FakeClock()))
    assert limiter.when("a") == 0.0
    assert limiter.when("b") == pytest.approx(1.0)
    assert limiter.num_requeues("a") == 0
    limiter.forget("a")


def test_max_of_asks_every_limiter() -> None:
    clock = FakeClock()
    bucket = TokenBucket(qps=1.0, burst=1, clock=clock)
    limiter = MaxOfLimiter(ItemExponentialLimiter(base=0.5, cap=100.0), BucketRateLimiter(bucket))
    assert limiter.when("a") == pytest.approx(0.5)  # item limiter wins, the bucket token is taken anyway
    assert limiter.when("a") == pytest.approx(1.0)  # both say 1.0
    assert limiter.when("b") == pytest.approx(2.0)  # the bucket is owed two tokens: it wins
    assert limiter.num_requeues("a") == 2
    limiter.forget("a")
    assert limiter.num_requeues("a") == 0
    with pytest.raises(ValueError):
        MaxOfLimiter()


def test_default_controller_rate_limiter_matches_client_go() -> None:
    clock = FakeClock()
    limiter = default_controller_rate_limiter(clock=clock)
    assert limiter.when("x") == pytest.approx(0.005)
    assert limiter.when("x") == pytest.approx(0.01)
    # 100 burst tokens; 2 used above. The next 98 distinct keys are immediate-ish (item base 5 ms)...
    assert all(limiter.when(f"k{i}") == pytest.approx(0.005) for i in range(98))
    # ...then the global 10 qps bucket dominates.
    assert limiter.when("late") == pytest.approx(0.1)
    assert limiter.when("later") == pytest.approx(0.2)
    for _ in range(30):
        limiter.when("x")
    assert limiter.when("x") == 1000.0


# -- Backoff --------------------------------------------------------------------------------------------


def test_backoff_sequence_without_jitter() -> None:
    backoff = Backoff(base=0.1, cap=1.0, factor=2.0, jitter=0.0)
    assert [backoff.next() for _ in range(6)] == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0])
    assert backoff.attempts == 6
    backoff.reset()
    assert backoff.attempts == 0
    assert backoff.next() == pytest.approx(0.1)


def test_backoff_jitter_only_shortens_and_never_exceeds_cap() -> None:
    draws = iter([0.0, 0.999999, 0.5] * 20)
    backoff = Backoff(base=1.0, cap=8.0, factor=3.0, jitter=0.2, rand=lambda: next(draws))
    delays = [backoff.next() for _ in range(6)]
    assert delays[0] == pytest.approx(1.0)
    assert delays[1] == pytest.approx(3.0 * 0.8, rel=1e-5)
    assert delays[2] == pytest.approx(8.0 * 0.9)
    assert all(d <= 8.0 for d in delays)
    assert all(d >= 0.8 * min(8.0, 3.0**i) for i, d in enumerate(delays))


def test_backoff_default_rand_stays_in_bounds() -> None:
    backoff = Backoff(base=0.5, cap=30.0)
    for _ in range(200):
        d = backoff.next()
        assert 0.4 <= d <= 30.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"base": 0.0, "cap": 1.0},
        {"base": 2.0, "cap": 1.0},
        {"base": 1.0, "cap": 2.0, "factor": 0.5},
        {"base": 1.0, "cap": 2.0, "jitter": 1.0},
        {"base": 1.0, "cap": 2.0, "jitter": -0.1},
    ],
)
def test_backoff_rejects_bad_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        Backoff(**kwargs)
