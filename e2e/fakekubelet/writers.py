"""Bounded, coalescing API writers: pod status PATCHes and kubelet Events.

A pod marked dirty ten times before a worker reaches it is written once, with its newest state, so 5,000
pods cost one PATCH per visible change and never more than ``concurrency`` requests in flight.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
import logging
import time
from typing import Any, Protocol

from .kubeclient import MERGE, ApiError, KubeClient
from .podstatus import merge_patch
from .timefmt import iso_seconds

log = logging.getLogger(__name__)

Json = dict[str, Any]


class StatusSource(Protocol):
    uid: str
    namespace: str
    name: str
    gone: bool
    last_written: Json | None
    write_lock: asyncio.Lock

    def build_status(self) -> Json: ...


class _Workers(abc.ABC):
    """A writer's ``concurrency`` worker tasks, each running ``_work`` until ``close()`` ends them all."""

    def __init__(self, concurrency: int) -> None:
        self._workers = [asyncio.create_task(self._work()) for _ in range(concurrency)]

    @abc.abstractmethod
    async def _work(self) -> None: ...

    async def close(self) -> None:
        for task in self._workers:
            task.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)


class StatusWriter(_Workers):
    """Workers drain a de-duplicated queue of dirty pods; failures come back with capped backoff."""

    def __init__(self, client: KubeClient, concurrency: int = 20) -> None:
        self._client = client
        self._queue: asyncio.Queue[str] = asyncio.Queue()
        self._items: dict[str, StatusSource] = {}
        self._failures: dict[str, int] = {}
        self._sem = asyncio.Semaphore(concurrency)
        self.patches = 0
        self.skipped = 0
        super().__init__(concurrency)

    def mark(self, pod: StatusSource) -> None:
        if pod.uid in self._items:
            return
        self._items[pod.uid] = pod
        self._queue.put_nowait(pod.uid)

    async def write_now(self, pod: StatusSource) -> None:
        """Used by the termination path, which must see its final status land before the DELETE."""
        await self._write(pod)

    async def _work(self) -> None:
        while True:
            uid = await self._queue.get()
            pod = self._items.pop(uid, None)
            if pod is None:
                continue
            try:
                await self._write(pod)
                self._failures.pop(uid, None)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # retried: the API may be briefly unavailable
                n = self._failures[uid] = self._failures.get(uid, 0) + 1
                delay = min(0.2 * 2**n, 5.0)
                log.warning(
                    "status write for %s/%s failed (%s); retry in %.1fs", pod.namespace, pod.name, exc, delay
                )
                asyncio.get_running_loop().call_later(delay, self.mark, pod)

    async def _write(self, pod: StatusSource) -> None:
        async with pod.write_lock:
            if pod.gone:
                return
            desired = pod.build_status()
            patch = merge_patch(pod.last_written, desired)
            if not patch:
                self.skipped += 1
                return
            body = {"metadata": {"uid": pod.uid}, "status": patch}
            async with self._sem:
                try:
                    await self._client.request(
                        "PATCH",
                        f"/api/v1/namespaces/{pod.namespace}/pods/{pod.name}/status",
                        body=body,
                        content_type=MERGE,
                    )
                except ApiError as exc:
                    if exc.status in (404, 409):  # deleted, or replaced by a pod with another UID
                        pod.gone = True
                        return
                    raise
            self.patches += 1
            pod.last_written = desired


EVENT_LEVELS = ("all", "warnings", "none")


class EventRecorder(_Workers):
    """core/v1 Events as the kubelet's legacy recorder writes them; dropped, not queued, when swamped.

    Fewer workers than the status writer: events are best effort and must not delay pod status.
    ``level`` lets benchmarks drop the Normal events (three per container start).
    """

    def __init__(
        self, client: KubeClient, level: str = "all", concurrency: int = 6, backlog: int = 20000
    ) -> None:
        if level not in EVENT_LEVELS:
            raise ValueError(f"event level must be one of {EVENT_LEVELS}")
        self._client = client
        self._level = level
        self._queue: asyncio.Queue[Json] = asyncio.Queue(maxsize=backlog)
        self._seq = itertools.count()
        self.dropped = 0
        self.posted = 0
        super().__init__(concurrency)

    def emit(
        self, node: str, pod: Json, reason: str, message: str, field_path: str = "", warning: bool = False
    ) -> None:
        if self._level == "none" or (self._level == "warnings" and not warning):
            return
        meta = pod["metadata"]
        now = iso_seconds()
        ref: Json = {
            "kind": "Pod",
            "apiVersion": "v1",
            "namespace": meta["namespace"],
            "name": meta["name"],
            "uid": meta["uid"],
            "resourceVersion": meta.get("resourceVersion", ""),
        }
        if field_path:
            ref["fieldPath"] = field_path
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {
                "name": f"{meta['name']}.{time.time_ns() + next(self._seq):x}",
                "namespace": meta["namespace"],
            },
            "involvedObject": ref,
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "source": {"component": "kubelet", "host": node},
            "reportingComponent": "kubelet",
            "reportingInstance": node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "eventTime": None,
            "count": 1,
        }
        try:
            self._queue.put_nowait(event)
        except asyncio.QueueFull:
            self.dropped += 1

    async def _work(self) -> None:
        while True:
            event = await self._queue.get()
            ns = event["metadata"]["namespace"]
            try:
                await self._client.request("POST", f"/api/v1/namespaces/{ns}/events", body=event)
                self.posted += 1
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # events are best effort, like the kubelet's
                log.debug("event %s dropped: %s", event["reason"], exc)
