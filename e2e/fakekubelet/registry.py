"""The pods this process runs, keyed by UID; turns watch events into pod runtimes."""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any

from .pods import PodContext, PodRuntime, delete_pod
from .podspec import is_terminal

log = logging.getLogger(__name__)

Json = dict[str, Any]


class PodRegistry:
    def __init__(self, contexts: dict[str, PodContext]) -> None:
        self._contexts = contexts
        self.by_uid: dict[str, PodRuntime] = {}
        self._by_name: dict[tuple[str, str], PodRuntime] = {}
        self._ips = itertools.count()
        self._orphan_deletes: set[asyncio.Task[None]] = set()
        self._dying: set[asyncio.Task[None]] = set()

    def _next_ip(self) -> str:
        n = next(self._ips)
        return f"10.244.{(n // 254) % 256}.{n % 254 + 1}"

    def lookup(self, node: str, namespace: str, name: str) -> PodRuntime | None:
        rt = self._by_name.get((namespace, name))
        return rt if rt is not None and rt.node == node else None

    def on_node(self, node: str) -> list[PodRuntime]:
        return [rt for rt in self.by_uid.values() if rt.node == node]

    def handle(self, node: str, etype: str, pod: Json) -> None:
        meta = pod["metadata"]
        meta.pop("managedFields", None)  # the largest part of a pod, and nothing here reads it
        uid = meta["uid"]
        if etype == "DELETED":
            self._forget(uid)
            return
        rt = self.by_uid.get(uid)
        if rt is not None:
            rt.observe(pod)
            return
        if is_terminal(pod):
            if meta.get("deletionTimestamp"):
                self._delete_orphan(pod)
            return
        stale = self._by_name.get((meta["namespace"], meta["name"]))
        if stale is not None:
            self._forget(stale.uid)
        rt = PodRuntime(self._contexts[node], node, pod, self._next_ip())
        self.by_uid[uid] = rt
        self._by_name[(rt.namespace, rt.name)] = rt
        rt.start()

    def resync(self, node: str, pods: list[Json]) -> None:
        """After a (re-)list: pods we run that the list no longer has were deleted meanwhile."""
        present = {p["metadata"]["uid"] for p in pods}
        for rt in self.on_node(node):
            if rt.uid not in present:
                self._forget(rt.uid)
        for pod in pods:
            self.handle(node, "ADDED", pod)

    def _forget(self, uid: str) -> None:
        rt = self.by_uid.pop(uid, None)
        if rt is None:
            return
        if self._by_name.get((rt.namespace, rt.name)) is rt:
            del self._by_name[(rt.namespace, rt.name)]
        rt.kill()
        for task in rt.tasks():  # still winding down (processes exiting); owned here until done
            self._dying.add(task)
            task.add_done_callback(self._dying.discard)

    def _delete_orphan(self, pod: Json) -> None:
        meta = pod["metadata"]
        ctx = next(iter(self._contexts.values()))
        task = asyncio.create_task(delete_pod(ctx.client, meta["namespace"], meta["name"], meta["uid"]))
        self._orphan_deletes.add(task)
        task.add_done_callback(self._orphan_deletes.discard)

    async def stop(self) -> None:
        runtimes = list(self.by_uid.values())
        self.by_uid.clear()
        self._by_name.clear()
        await asyncio.gather(*(rt.stop() for rt in runtimes), return_exceptions=True)
        leftovers = [*self._orphan_deletes, *self._dying]
        for task in leftovers:
            task.cancel()
        await asyncio.gather(*leftovers, return_exceptions=True)
