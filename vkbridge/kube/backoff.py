"""Capped, jittered exponential backoff for reconnect and retry loops (watches, pings, lease renewals).

Pure: it returns delays and never sleeps, so callers decide how to wait and tests need no clock.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

__all__ = ["Backoff"]


@dataclass(eq=False)
class Backoff:
    """Delays ``base, base*factor, ...`` capped at ``cap``, each shortened by up to ``jitter`` (a fraction).

    Jitter only ever shortens a delay, so no delay exceeds ``cap`` and callers that all hit the cap still
    spread out instead of retrying in lockstep.
    """

    base: float
    cap: float
    factor: float = 2.0
    jitter: float = 0.2
    _: KW_ONLY
    rand: Callable[[], float] = random.random
    _current: float = field(init=False, repr=False)
    _attempts: int = field(init=False, repr=False, default=0)

    def __post_init__(self) -> None:
        if not self.base > 0:
            raise ValueError(f"base must be > 0, got {self.base!r}")
        if self.cap < self.base:
            raise ValueError(f"cap ({self.cap!r}) must be >= base ({self.base!r})")
        if self.factor < 1.0:
            raise ValueError(f"factor must be >= 1, got {self.factor!r}")
        if not 0.0 <= self.jitter < 1.0:
            raise ValueError(f"jitter must be in [0, 1), got {self.jitter!r}")
        self._current = self.base

    @property
    def attempts(self) -> int:
        """Delays handed out since the last ``reset()``."""
        return self._attempts

    def next(self) -> float:
        """The next delay: in ``[(1 - jitter) * d, d]`` with ``d = min(cap, base * factor**n)``."""
        delay = self._current
        self._attempts += 1
        self._current = min(self.cap, self._current * self.factor)
        return delay * (1.0 - self.jitter * self.rand())

    def reset(self) -> None:
        """Start again from ``base`` (call after a success)."""
        self._current = self.base
        self._attempts = 0
