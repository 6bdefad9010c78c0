"""Pool reachability: ping the pool API through the tunnel and drive the `Reachability` state.

One info line per transition (with the outage length on return), never one per failed ping: a pool
that hibernates for hours must not flood the log.
"""

from __future__ import annotations

import time
from typing import Protocol

from vkbridge.kube.reachability import PoolState, Reachability
from vkbridge.logs import get_logger
from vkbridge.metrics import Metrics

log = get_logger("vkbridge.pool")

UNAUTHORIZED_FIX = (
    "the pool rejects our credential (revoked, expired or rotated): fetch the peering's new bundle and "
    "apply it (user guide section 5, 'Rotate the credentials'); vkbridge picks it up without a restart"
)


# A single late answer is not an outage: a loaded host (or pool API server) answers a ping late now and
# then, and declaring the pool Lost parks every write and re-queues every pod on return (a re-sync storm
# that makes the next ping later still). Lost needs this many misses in a row, re-checked quickly.
LOSE_AFTER_MISSES = 3
RECHECK_SECONDS = 0.5


class PingClient(Protocol):
    """`KubeClient` in production (see `KubeClient.ping` for its timeouts)."""

    async def ping(self, path: str, timeout: float) -> int:
        """GET `path`; return the HTTP status; raise on transport failure or timeout."""
        ...


def classify(status: int | None) -> PoolState:
    if status is not None and 200 <= status < 300:
        return PoolState.CONNECTED
    if status in (401, 403):
        return PoolState.UNAUTHORIZED
    return PoolState.LOST


class Pinger:
    """Pings every `interval` (or at once when a writer reports a failure)."""

    def __init__(
        self,
        client: PingClient,
        reach: Reachability,
        *,
        interval: float,
        timeout: float,
        metrics: Metrics | None = None,
        path: str = "/livez",
    ) -> None:
        self._client, self._reach = client, reach
        self._interval = interval if interval > 0 else 10.0
        self._disabled = interval <= 0
        self._timeout, self._metrics, self._path = timeout, metrics, path
        self._lost_at: float | None = None
        self._misses = 0
        self._rejected_generation = -1

    async def ping_once(self) -> PoolState:
        if self._disabled:
            state, detail = PoolState.CONNECTED, "ping disabled (--node-ping-interval=0)"
        else:
            try:
                status: int | None = await self._client.ping(self._path, self._timeout)
                detail = f"HTTP {status}"
            except TimeoutError:
                status, detail = None, f"no answer within {self._timeout:g}s"
            except Exception as exc:  # transport errors of every kind mean "not reachable"
                status, detail = None, _short(exc)
            state = classify(status)
        if state is PoolState.LOST and self._reach.state is PoolState.CONNECTED:
            self._misses += 1
            if self._misses < LOSE_AFTER_MISSES:
                log.debug("pool ping missed", detail=detail, misses=self._misses)
                return PoolState.CONNECTED
        else:
            self._misses = 0
        self._transition(state, detail)
        return state

    def _transition(self, state: PoolState, detail: str) -> None:
        old = self._reach.state
        generation = getattr(self._client, "generation", 0)  # bumped by every credential swap
        if not self._reach.set(state, detail):
            if state is PoolState.UNAUTHORIZED and generation != self._rejected_generation:
                # Still rejected, but with another credential (a second bad bundle applied while the
                # first was rejected): the operator must read that the new one fails too.
                self._rejected_generation = generation
                log.error("pool rejects our new credential too: " + UNAUTHORIZED_FIX, detail=detail)
            return
        if state is PoolState.UNAUTHORIZED:
            self._rejected_generation = generation
        now = time.monotonic()
        if self._metrics is not None:
            for s in PoolState:
                self._metrics.pool_state.labels(state=s.value).set(1 if s is state else 0)
        if state is PoolState.CONNECTED:
            if self._lost_at is not None:
                outage = now - self._lost_at
                if self._metrics is not None:
                    self._metrics.pool_outage_seconds.inc(outage)
                log.info("pool reachable again", outage=f"{outage:.1f}s", previous=old.value)
            else:
                log.info("pool reachable", via=self._path)
            self._lost_at = None
        elif state is PoolState.UNAUTHORIZED:
            self._lost_at = self._lost_at or now
            log.error("pool rejects our credential: " + UNAUTHORIZED_FIX, detail=detail)
        else:
            self._lost_at = self._lost_at or now
            log.warning(
                "pool unreachable: the node stops renewing its Lease and goes NotReady; "
                "remote writes pause until the pool answers",
                detail=detail,
            )

    async def run(self) -> None:
        while True:
            await self.ping_once()
            await self._reach.wait_check_request(RECHECK_SECONDS if self._misses else self._interval)


def _short(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= 200 else text[:200] + "..."
