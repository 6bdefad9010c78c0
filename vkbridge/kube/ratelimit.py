"""Rate limiters with client-go semantics (``k8s.io/client-go/util/workqueue`` and ``x/time/rate``).

The work queue asks a limiter ``when(key)`` to retry a failed key; the answer is a delay in seconds,
never a sleep, so limiters stay pure and testable with an injected clock.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable, Hashable
from typing import Protocol

__all__ = [
    "BucketRateLimiter",
    "Clock",
    "ItemExponentialLimiter",
    "MaxOfLimiter",
    "RateLimiter",
    "TokenBucket",
    "default_controller_rate_limiter",
]

Clock = Callable[[], float]

# Float slack so that exactly 1/qps seconds yields a whole token despite rounding.
_EPS = 1e-9


class RateLimiter(Protocol):
    """The three calls client-go's ``RateLimiter`` interface makes."""

    def when(self, item: Hashable) -> float:
        """Delay in seconds before ``item`` may be retried; records one more failure."""
        ...

    def forget(self, item: Hashable) -> None:
        """Drop the failure history of ``item`` (it succeeded)."""
        ...

    def num_requeues(self, item: Hashable) -> int:
        """Failures recorded for ``item`` since the last ``forget``."""
        ...


class TokenBucket:
    """Token bucket of ``burst`` tokens refilled at ``qps``; starts full, like ``rate.NewLimiter``.

    ``when()`` reserves a token even if it is not there yet (tokens go negative), so successive callers
    are spaced 1/qps apart: that is what ``BucketRateLimiter`` relies on. ``qps=math.inf`` never limits.
    """

    def __init__(self, qps: float, burst: int, clock: Clock = time.monotonic) -> None:
        if not qps > 0:
            raise ValueError(f"qps must be > 0 (math.inf for unlimited), got {qps!r}")
        if burst < 1:
            raise ValueError(f"burst must be >= 1, got {burst!r}")
        self._qps = float(qps)
        self._burst = int(burst)
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    @property
    def qps(self) -> float:
        return self._qps

    @property
    def burst(self) -> int:
        return self._burst

    @property
    def tokens(self) -> float:
        """Tokens available now (negative while reservations are outstanding)."""
        self._advance()
        return self._tokens

    def _advance(self) -> None:
        now = self._clock()
        if now > self._last:
            self._tokens = min(float(self._burst), self._tokens + (now - self._last) * self._qps)
            self._last = now

    def try_acquire(self) -> bool:
        """Take a token if one is available now; never reserves."""
        if math.isinf(self._qps):
            return True
        self._advance()
        if self._tokens >= 1.0 - _EPS:
            self._tokens -= 1.0
            return True
        return False

    def when(self) -> float:
        """Reserve a token and return how long to wait until it is ours (0.0 if available now)."""
        if math.isinf(self._qps):
            return 0.0
        self._advance()
        self._tokens -= 1.0
        if self._tokens >= -_EPS:
            return 0.0
        return -self._tokens / self._qps

    def _cancel_reservation(self) -> None:
        self._advance()
        self._tokens = min(float(self._burst), self._tokens + 1.0)

    async def acquire(self) -> None:
        """Wait (one sleep, no polling) until a token is ours; a cancelled wait gives the token back."""
        delay = self.when()
        if delay <= 0.0:
            return
        try:
            await asyncio.sleep(delay)
        except asyncio.CancelledError:
            self._cancel_reservation()
            raise


class BucketRateLimiter:
    """Adapts a ``TokenBucket`` to ``RateLimiter``: one global rate for all keys, no per-key state."""

    def __init__(self, bucket: TokenBucket) -> None:
        self.bucket = bucket

    def when(self, item: Hashable) -> float:
        return self.bucket.when()

    def forget(self, item: Hashable) -> None:
        return None

    def num_requeues(self, item: Hashable) -> int:
        return 0


class ItemExponentialLimiter:
    """Per-key exponential backoff: ``base * 2**failures`` capped at ``cap`` (client-go defaults)."""

    def __init__(self, base: float = 0.005, cap: float = 1000.0) -> None:
        if not base > 0:
            raise ValueError(f"base must be > 0, got {base!r}")
        if cap < base:
            raise ValueError(f"cap ({cap!r}) must be >= base ({base!r})")
        self.base = float(base)
        self.cap = float(cap)
        self._failures: dict[Hashable, int] = {}

    def when(self, item: Hashable) -> float:
        exp = self._failures.get(item, 0)
        self._failures[item] = exp + 1
        if exp >= 1023:  # 2.0**1024 overflows; long past any cap anyway
            return self.cap
        return min(self.cap, self.base * 2.0**exp)

    def forget(self, item: Hashable) -> None:
        self._failures.pop(item, None)

    def num_requeues(self, item: Hashable) -> int:
        return self._failures.get(item, 0)

    def __len__(self) -> int:
        """Keys with a failure history (memory accounting)."""
        return len(self._failures)


class MaxOfLimiter:
    """The longest delay of several limiters; every limiter is asked so each records the attempt."""

    def __init__(self, *limiters: RateLimiter) -> None:
        if not limiters:
            raise ValueError("MaxOfLimiter needs at least one limiter")
        self.limiters: tuple[RateLimiter, ...] = limiters

    def when(self, item: Hashable) -> float:
        return max([limiter.when(item) for limiter in self.limiters])

    def forget(self, item: Hashable) -> None:
        for limiter in self.limiters:
            limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return max(limiter.num_requeues(item) for limiter in self.limiters)


def default_controller_rate_limiter(clock: Clock = time.monotonic) -> MaxOfLimiter:
    """client-go ``DefaultControllerRateLimiter``: max(5 ms * 2^n up to 1000 s, bucket 10 qps burst 100)."""
    return MaxOfLimiter(
        ItemExponentialLimiter(base=0.005, cap=1000.0),
        BucketRateLimiter(TokenBucket(qps=10.0, burst=100, clock=clock)),
    )
