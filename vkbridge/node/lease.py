"""The node Lease heartbeat in kube-node-lease, renewed only while the pool answers.

Not renewing is how a virtual kubelet says "NotReady" the Kubernetes way: kube-controller-manager
marks the node Unknown after its grace period, exactly as for a real node that lost its kubelet.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable
from typing import Any

from reflectors.forge.timefmt import rfc3339_micro
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.client import ApiError, KubeClient
from vkbridge.kube.reachability import Reachability
from vkbridge.kube.waiting import wait_event
from vkbridge.logs import get_logger

log = get_logger("vkbridge.node")

CONFLICT_TRIES = 5  # a 409 means someone else wrote the Lease: re-read and retry, but not for ever


class LeaseConflict(Exception):
    """The Lease changed under every one of our writes (another writer holds it); `run()` backs off."""


def micro_time(now: dt.datetime | None = None) -> str:
    """MicroTime as the API server parses it (always six fractional digits and a Z)."""
    return rfc3339_micro(now or dt.datetime.now(dt.UTC))


def lease_body(node_name: str, duration: int, node_uid: str | None, rv: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": node_name, "namespace": "kube-node-lease"}
    if rv:
        meta["resourceVersion"] = rv
    if node_uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "Node",
                "name": node_name,
                "uid": node_uid,
                "blockOwnerDeletion": False,
            }
        ]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": meta,
        "spec": {"holderIdentity": node_name, "leaseDurationSeconds": duration, "renewTime": micro_time()},
    }


class LeaseHeartbeat:
    """Renews `kube-node-lease/<node>` every `renew_interval` while the pool is Connected."""

    def __init__(
        self,
        client: KubeClient,
        node_name: str,
        reach: Reachability,
        *,
        duration: float,
        renew_interval: float | None = None,
        node_uid: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._client, self._node, self._reach = client, node_name, reach
        self._duration = max(1, int(duration))
        self._interval = renew_interval or max(1.0, duration / 4)
        self._node_uid = node_uid
        self._lease: dict[str, Any] | None = None
        self._wake = asyncio.Event()
        self._conflict_backoff = Backoff(0.05, 1.0)
        self.renewals = 0
        self.conflicts = 0
        reach.subscribe(lambda _old, new: self._wake.set() if reach.connected else None)

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self._node}"

    async def renew_once(self) -> bool:
        """One renewal; False when the Node does not exist yet (the Lease is owned by it).

        A conflict (or a Lease deleted under us) is re-read and retried up to CONFLICT_TRIES times with
        a capped backoff; then LeaseConflict, which `run()` retries with its own backoff.
        """
        uid = self._node_uid()
        if uid is None:
            return False
        backoff = self._conflict_backoff
        backoff.reset()
        for attempt in range(1, CONFLICT_TRIES + 1):
            if await self._write(uid):
                return True
            self.conflicts += 1
            if attempt < CONFLICT_TRIES:
                await asyncio.sleep(backoff.next())
        raise LeaseConflict(
            f"kube-node-lease/{self._node} changed under each of {CONFLICT_TRIES} writes: another writer?"
        )

    async def _write(self, uid: str) -> bool:
        """One create or update; False on a conflict or a Lease deleted meanwhile (re-read next time)."""
        if self._lease is None:
            try:
                self._lease = await self._client.request("GET", self.path)
            except ApiError as err:
                if not err.not_found:
                    raise
                body = lease_body(self._node, self._duration, uid)
                self._lease = await self._client.request(
                    "POST", "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", body=body
                )
                self.renewals += 1
                return True
        rv = (self._lease.get("metadata") or {}).get("resourceVersion")
        body = lease_body(self._node, self._duration, uid, rv)
        try:
            self._lease = await self._client.request("PUT", self.path, body=body)
            self.renewals += 1
        except ApiError as err:
            self._lease = None  # re-read on the next attempt (conflict or the Lease was deleted)
            if not (err.conflict or err.not_found):
                raise
            return False
        return True

    async def run(self) -> None:
        backoff = Backoff(0.1, 7.0)
        while True:
            if not self._reach.connected:
                self._wake.clear()
                await self._reach.wait_connected()
            try:
                renewed = await self.renew_once()
                backoff.reset()
                delay = self._interval if renewed else 0.2
            except Exception as exc:  # retried with a capped backoff; the node goes NotReady meanwhile
                delay = backoff.next()
                if backoff.attempts in (1, 10) or backoff.attempts % 60 == 0:
                    log.warning("node lease renewal failed", error=str(exc)[:200], retry_in=f"{delay:.1f}s")
            self._wake.clear()
            await wait_event(self._wake, delay)
