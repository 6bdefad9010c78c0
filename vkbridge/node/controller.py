"""Keeps the virtual Node as it should be: created, re-created, metadata restored, status applied.

Level-based: every trigger (Node, VirtualNode or ResourceSlice change, pool back, status tick) just
marks the node dirty; one loop compares the cached Node with the desired one and writes the difference.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Mapping
from typing import Any

from vkbridge.grant import grant_of
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import NODES, ApiError, KubeClient
from vkbridge.kube.reachability import PoolState, Reachability
from vkbridge.kube.waiting import wait_event
from vkbridge.logs import get_logger
from vkbridge.node import model
from vkbridge.node.lease import micro_time

log = get_logger("vkbridge.node")

STATUS_FIELD_MANAGER = "vkbridge"


class NodeController:
    """Owns the Node object; the Lease is `LeaseHeartbeat`'s, reachability the pinger's."""

    def __init__(
        self,
        client: KubeClient,
        reach: Reachability,
        *,
        node_cache: Cache,
        virtual_node_cache: Cache,
        resource_slice_cache: Cache,
        base_inputs: Callable[[], model.NodeInputs],
        virtual_node_key: str,
        status_interval: float = 60.0,
    ) -> None:
        self._client, self._reach = client, reach
        self._nodes, self._vns, self._rss = node_cache, virtual_node_cache, resource_slice_cache
        self._base_inputs = base_inputs
        self._vn_key = virtual_node_key
        self._status_interval = status_interval
        self._dirty = asyncio.Event()
        self._status_due = True
        self._last_status: dict[str, Any] | None = None
        self._last_status_at = 0.0
        self._created_once = False
        self.recreations = 0
        for cache in (node_cache, virtual_node_cache, resource_slice_cache):
            cache.subscribe(self._on_change)
        reach.subscribe(self._on_pool)

    @property
    def node_name(self) -> str:
        return self._base_inputs().node_name

    def node_uid(self) -> str | None:
        node = self._nodes.get(self.node_name)
        return None if node is None else (node.get("metadata") or {}).get("uid")

    def _on_change(self, _type: str, _old: Any, _new: Any) -> None:
        self._dirty.set()

    def _on_pool(self, _old: PoolState, new: PoolState) -> None:
        if new is PoolState.CONNECTED:
            self._status_due = True  # Ready again at once, not at the next tick
        self._dirty.set()

    def inputs(self) -> model.NodeInputs:
        base = self._base_inputs()
        vn = self._vns.get(self._vn_key)
        rs = self._rss.get(self._vn_key)
        return dataclasses.replace(base, virtual_node=vn, grant=grant_of(rs, vn))

    async def reconcile(self) -> None:
        inp = self.inputs()
        node = self._nodes.get(inp.node_name)
        if node is None:
            node = await self._create(inp)
        else:
            patch = model.metadata_patch(inp, node)
            if patch is not None:
                node = await self._client.patch(NODES, inp.node_name, patch)
                log.info("node metadata restored", node=inp.node_name, fields=",".join(_patched(patch)))
        if self._reach.connected:
            await self._apply_status(inp, node)

    async def _create(self, inp: model.NodeInputs) -> dict[str, Any]:
        try:
            node = await self._client.create(NODES, model.new_node(inp))
        except ApiError as err:
            if not err.already_exists:
                raise
            node = await self._client.get(NODES, inp.node_name)  # our cache lags: nothing to create
            return node
        if self._created_once:
            self.recreations += 1
            log.warning("node was deleted: re-created it", node=inp.node_name)
        else:
            log.info("node registered", node=inp.node_name, capacity=_fmt(model.capacity(inp)))
        self._created_once = True
        self._status_due = True
        return node

    async def _apply_status(self, inp: model.NodeInputs, node: Mapping[str, Any]) -> None:
        current = ((node.get("status") or {}).get("conditions")) or []
        ready_now = next((c for c in current if c.get("type") == "Ready"), None)
        body = model.status_body(inp, micro_time_seconds(), current)
        comparable = _without_times(body)
        due = (
            self._status_due
            or comparable != self._last_status
            or time.monotonic() - self._last_status_at >= self._status_interval
            or ready_now is None
            or (ready_now.get("status") == "Unknown")
        )
        if not due:
            return
        await self._client.apply(
            NODES, body, field_manager=STATUS_FIELD_MANAGER, force=True, subresource="status"
        )
        if comparable != self._last_status and self._last_status is not None:
            log.info("node status updated", node=inp.node_name, capacity=_fmt(model.capacity(inp)))
        self._last_status, self._last_status_at, self._status_due = comparable, time.monotonic(), False

    async def run(self) -> None:
        backoff = Backoff(0.2, 30.0)
        failures = 0
        while True:
            self._dirty.clear()
            try:
                await self.reconcile()
                if failures:
                    log.info("node reconciled after failures", failures=failures)
                failures = 0
                backoff.reset()
                wait = self._status_interval
            except ApiError as err:
                failures += 1
                wait = backoff.next()
                if err.conflict:
                    wait = 0.05  # someone else wrote the Node: re-read (the cache follows) and retry
                elif failures in (1, 5) or failures % 50 == 0:
                    log.warning("node reconcile failed", error=str(err)[:200], retry_in=f"{wait:.1f}s")
                self._dirty.set() if err.conflict else None
            if self._reach.connected and self._status_interval:
                wait = min(wait, max(0.5, self._status_interval - (time.monotonic() - self._last_status_at)))
            await wait_event(self._dirty, wait)


def micro_time_seconds() -> str:
    """RFC 3339 seconds, as Node condition times are serialised."""
    return micro_time()[:19] + "Z"


def _without_times(body: Mapping[str, Any]) -> dict[str, Any]:
    status = dict(body["status"])
    status["conditions"] = [
        {k: v for k, v in c.items() if k not in ("lastHeartbeatTime", "lastTransitionTime")}
        for c in status["conditions"]
    ]
    return status


def _patched(patch: Mapping[str, Any]) -> list[str]:
    meta = patch.get("metadata") or {}
    fields = [f"label:{k}" for k in meta.get("labels") or {}]
    fields += [f"annotation:{k}" for k in meta.get("annotations") or {} if k != model.LAST_APPLIED_ANNOTATION]
    if "spec" in patch:
        fields.append("taints")
    return fields or ["bookkeeping"]


def _fmt(resources: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(resources.items()))
