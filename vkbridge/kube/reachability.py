"""Pool reachability: one small state machine that every writer to the pool consults.

`node/` owns the pinger that drives it; reflectors read it to pause remote writes while the pool is
away (instead of retrying into a dead tunnel) and subscribe to be told when it returns, so every
parked key is retried at once with its backoff reset.
"""

from __future__ import annotations

import asyncio
import enum
import time
from collections.abc import Callable

from vkbridge.kube.waiting import wait_event
from vkbridge.logs import get_logger

log = get_logger("vkbridge.pool")


class PoolState(enum.Enum):
    UNKNOWN = "Unknown"
    CONNECTED = "Connected"
    LOST = "Lost"
    UNAUTHORIZED = "Unauthorized"


Listener = Callable[[PoolState, PoolState], None]


class Reachability:
    """Current pool state, its transitions, and waiters for `Connected`."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._state = PoolState.UNKNOWN
        self._since = clock()
        self._listeners: list[Listener] = []
        self._connected = asyncio.Event()
        self._check_now = asyncio.Event()
        self.reason = ""

    @property
    def state(self) -> PoolState:
        return self._state

    @property
    def connected(self) -> bool:
        return self._state is PoolState.CONNECTED

    @property
    def since(self) -> float:
        """Monotonic time of the last transition."""
        return self._since

    def subscribe(self, listener: Listener) -> None:
        self._listeners.append(listener)

    def set(self, state: PoolState, reason: str = "") -> bool:
        """Move to `state`; returns True on a transition. Listeners run synchronously on the loop."""
        self.reason = reason
        if state is self._state:
            return False
        old, self._state, self._since = self._state, state, self._clock()
        if state is PoolState.CONNECTED:
            self._connected.set()
        else:
            self._connected.clear()
        for listener in list(self._listeners):
            try:
                listener(old, state)
            except Exception:  # a listener bug must not stop the state machine
                log.exception("pool state listener failed", listener=getattr(listener, "__qualname__", "?"))
        return True

    async def wait_connected(self) -> None:
        await self._connected.wait()

    def report_failure(self) -> None:
        """A writer saw a transport error: ask the pinger to check now rather than at its next tick."""
        self._check_now.set()

    async def wait_check_request(self, timeout: float) -> bool:
        """Used by the pinger: sleep until the next tick or until a writer reports a failure."""
        if not await wait_event(self._check_now, timeout):
            return False
        self._check_now.clear()
        return True
