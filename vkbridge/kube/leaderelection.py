"""Lease-based leader election, with client-go's semantics, so two replicas never both write.

One active vkbridge per virtual node (LIQO §1 step 3): the Lease `<nodename>` in the tenant namespace,
identity = the pod name. A candidate takes the Lease when it is free or expired, the leader renews it
every retry period, and a leader that cannot renew within the renew deadline steps down (the caller
exits, as Liqo's virtual kubelet does, and Kubernetes restarts it as a standby).

Every attempt is cut at the renew deadline, as client-go bounds each try by its context: a request that
hangs (the client's own timeout is 60 s) cannot keep a leader leading while a standby takes the Lease.
The deadline counts from the *start* of the last successful attempt, before which the API server cannot
have stored our renewTime: a standby sees that record change no earlier, so it waits at least
``lease_duration`` from there, and the leader has stopped ``lease_duration - renew_deadline`` before.
A deadline that passed (the process did not run: frozen, starved; or the API server was slow) gets one
last conditional attempt, bounded by half of ``lease_duration - renew_deadline``, as client-go's next renew
cycle would make: stepping down at once restarted a lone leader for nothing (and a test session's
vkbridge with it); the leader still stops half that margin before a standby may take over.

Expiry is judged as client-go judges it: by how long ago *we saw the record change* on our own
monotonic clock, never by the holder's `renewTime` against our wall clock. Two machines' clocks may
differ by more than a lease duration; with the observed time a skewed clock can neither make a live
leader look expired (two leaders) nor a dead one look alive for ever.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Awaitable, Callable
from typing import Any, Final

from reflectors.forge.timefmt import rfc3339_micro
from vkbridge.kube.client import LEASES, ApiError, KubeClient
from vkbridge.logs import get_logger

log = get_logger("vkbridge.leader")

# Handing the Lease over on shutdown: within the pod's grace (30 s) with room for the rest of it; a
# conflict (a renewal of ours the shutdown cut short) is retried on a fresh read.
RELEASE_TIMEOUT: Final = 3.0
RELEASE_ATTEMPTS: Final = 3


def _record(lease: dict[str, Any]) -> tuple[Any, ...]:
    """What client-go compares as the "raw record": any change in it means the holder is alive."""
    spec = lease.get("spec") or {}
    return tuple(spec.get(k) for k in ("holderIdentity", "renewTime", "acquireTime", "leaseDurationSeconds",
                                        "leaseTransitions"))  # fmt: skip


class LeaseObserver:
    """client-go's observedRecord/observedTime: when, on our monotonic clock, the record last changed."""

    def __init__(self, monotonic: Callable[[], float] = time.monotonic) -> None:
        self._monotonic = monotonic
        self._record: tuple[Any, ...] | None = None
        self._at = 0.0

    def observe(self, lease: dict[str, Any]) -> None:
        record = _record(lease)
        if record != self._record:
            self._record, self._at = record, self._monotonic()

    def held_by_other(self, lease: dict[str, Any], identity: str) -> bool:
        """Another identity holds it and we saw its record change less than its duration ago."""
        spec = lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if not holder or holder == identity:
            return False
        duration = float(spec.get("leaseDurationSeconds") or 0)
        return self._monotonic() < self._at + duration


class LeaderElector:
    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: float = 15.0,
        renew_deadline: float = 10.0,
        retry_period: float = 5.0,
        clock: Callable[[], dt.datetime] = lambda: dt.datetime.now(dt.UTC),
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._client = client
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self._clock = clock
        self._observer = LeaseObserver(monotonic)
        self._lease: dict[str, Any] | None = None
        self._renewed_at: float | None = None  # loop time when the last successful attempt started
        self.is_leader = False

    @property
    def holder(self) -> str | None:
        """The holder in the record we saw last (None before the first look)."""
        return ((self._lease or {}).get("spec") or {}).get("holderIdentity") or None

    def _body(self, now: dt.datetime, transitions: int, acquire: str | None) -> dict[str, Any]:
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if self._lease is not None:
            meta["resourceVersion"] = self._lease["metadata"]["resourceVersion"]
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": meta,
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": max(1, round(self.lease_duration)),
                "acquireTime": acquire or rfc3339_micro(now),
                "renewTime": rfc3339_micro(now),
                "leaseTransitions": transitions,
            },
        }

    async def try_acquire_or_renew(self) -> bool:
        now = self._clock()
        try:
            self._lease = await self._client.get(LEASES, self.name, self.namespace)
        except ApiError as err:
            if not err.not_found:
                raise
            self._lease = None
            creation = self._client.create(LEASES, self._body(now, 0, None), self.namespace)
            return await self._write(creation, lambda e: e.already_exists or e.conflict)
        self._observer.observe(self._lease)
        spec = self._lease.get("spec") or {}
        holder = spec.get("holderIdentity") or ""
        if self._observer.held_by_other(self._lease, self.identity):
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire = spec.get("acquireTime") if holder == self.identity else None
        if holder != self.identity:
            transitions += 1
        update = self._client.replace(LEASES, self._body(now, transitions, acquire), self.namespace)
        return await self._write(update, lambda e: e.conflict or e.not_found)

    async def _write(self, write: Awaitable[dict[str, Any]], lost: Callable[[ApiError], bool]) -> bool:
        """Await a create or update of the Lease: False when ``lost`` says another writer won the race."""
        try:
            self._lease = await write
        except ApiError as err:
            if lost(err):
                return False
            raise
        self._observer.observe(self._lease)
        return True

    async def acquire(self) -> None:
        """Block until we lead (Liqo logs the wait; so do we, every 30 s).

        Each attempt is cut at the renew deadline: an answer later than that may come from a write the
        API server stored long ago, a Lease a standby may already have taken as expired.
        """
        loop = asyncio.get_running_loop()
        last_log = 0.0
        while True:
            started = loop.time()
            try:
                async with asyncio.timeout(self.renew_deadline):
                    won = await self.try_acquire_or_renew()
                if won:
                    self._renewed_at = started
                    self.is_leader = True
                    log.info("elected leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)
                    return
            except ApiError as err:
                log.debug("leader election attempt failed", error=str(err)[:200])
            except TimeoutError:
                log.debug("leader election attempt got no answer", within_seconds=self.renew_deadline)
            if time.monotonic() - last_log > 30:
                last_log = time.monotonic()
                log.info(
                    "waiting to be elected leader", lease=f"{self.namespace}/{self.name}", holder=self.holder
                )
            await asyncio.sleep(self.retry_period)

    async def hold(self) -> None:
        """Renew every retry period; return (the caller must stop writing) at the renew deadline.

        The deadline is ``renew_deadline`` after the start of the last successful attempt, and every
        attempt is cut there, so the return never waits on a hung request. A renewal that finds another
        holder in the Lease returns at once: that one already thinks it leads.
        """
        loop = asyncio.get_running_loop()
        if self._renewed_at is None:  # not through acquire(): count from now
            self._renewed_at = loop.time()
        last_chance = False
        while True:
            deadline = self._renewed_at + self.renew_deadline
            nap = max(0.0, min(self.retry_period, deadline - loop.time()))
            planned = loop.time() + nap
            await asyncio.sleep(nap)
            late = loop.time() - planned
            if loop.time() >= deadline and not last_chance:
                # The deadline passed without a renewal: the API server was slow, or this process did
                # not run (SIGSTOP, a starved CPU: ``late``, or an attempt cut when the loop resumed).
                # One last attempt, as client-go's next renew cycle would make, bounded by half the
                # margin a standby leaves (it waits lease_duration from our last renewal): the write is
                # conditional on the Lease we read, so it succeeds only if no one took the Lease, and a
                # standby that did is found as its holder.
                last_chance = True
                deadline = loop.time() + (self.lease_duration - self.renew_deadline) / 2
                log.warning("leader lease not renewed by its deadline: one last attempt",
                            late_seconds=round(late, 1))  # fmt: skip
            elif loop.time() >= deadline:
                reason = f"not renewed within {self.renew_deadline:g} s"
                break
            started = loop.time()
            try:
                async with asyncio.timeout_at(deadline):
                    ok = await self.try_acquire_or_renew()
            except ApiError as err:
                ok = False
                log.warning("leader lease renewal failed", error=str(err)[:200])
            except TimeoutError:
                ok = False
                log.warning("leader lease renewal got no answer before the renew deadline")
            if ok:
                self._renewed_at = started
                last_chance = False
            elif self.holder not in (None, self.identity):
                reason = f"held by {self.holder}"
                break
        self.is_leader = False
        log.error("lost leadership: stopping so a standby takes over", identity=self.identity, reason=reason)

    async def release(self) -> bool:
        """On a clean shutdown, hand the Lease over at once, else the successor waits for it to expire.

        Re-read first: our last renewal may have been cut short after the API server applied it (the
        shutdown cancels it), and the resourceVersion we hold would then be refused. Bounded by
        ``RELEASE_TIMEOUT``; says in the log when it could not. True when the Lease is not ours now.
        """
        if not self.is_leader:
            return True
        why = "no answer"
        try:
            async with asyncio.timeout(RELEASE_TIMEOUT):
                for _ in range(RELEASE_ATTEMPTS):
                    why = await self._try_release()
                    if not why:
                        return True
        except TimeoutError:
            why = f"no answer within {RELEASE_TIMEOUT:g} s"
        finally:
            self.is_leader = False
        log.warning("leader Lease not released: a successor waits for it to expire",
                    lease=f"{self.namespace}/{self.name}", reason=why)  # fmt: skip
        return False

    async def _try_release(self) -> str:
        """One attempt; "" when the Lease is not ours any more, else why not (a conflict is retried)."""
        try:
            self._lease = await self._client.get(LEASES, self.name, self.namespace)
            spec = self._lease.get("spec") or {}
            if (spec.get("holderIdentity") or "") != self.identity:
                return ""
            body = self._body(self._clock(), int(spec.get("leaseTransitions") or 0), None)
            body["spec"]["holderIdentity"] = ""
            body["spec"]["leaseDurationSeconds"] = 1
            self._lease = await self._client.replace(LEASES, body, self.namespace)
        except ApiError as err:
            if err.not_found:
                return ""
            return str(err)[:200]
        return ""
