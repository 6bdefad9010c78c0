"""One fake clock for unit tests: a callable returning seconds, moved only by the test."""

from __future__ import annotations


class FakeClock:
    """Stands in for ``time.monotonic`` (or any ``() -> float`` clock) where the code takes one."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
