"""A scripted client for the Cache's list/watch loop: list pages and one watch feed, set by the test.

Where `tests.support.fakeapi.FakeApi` is a store that answers like an API server, this one answers exactly
what the test scripted (errors, expired watches, stream ends), for the loop's retry and re-list paths.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from vkbridge.kube.cache import Cache
from vkbridge.kube.client import WATCH_OPENED, Resource

Obj = dict[str, Any]

END = object()


class FakeClient:
    """Serves scripted list pages and one shared feed of watch items (events, exceptions, END)."""

    name = "fake"
    generation = 0

    def __init__(self) -> None:
        self.list_results: list[Obj | Exception] = []
        self.list_calls: list[Obj] = []
        self.watch_calls: list[Obj] = []
        self.feed: asyncio.Queue[object] = asyncio.Queue()
        self.open_watches = 0

    async def pause(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def list(self, resource: Resource, namespace: str | None = None, **kw: Any) -> Obj:
        self.list_calls.append({"namespace": namespace, **kw})
        result = self.list_results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    async def watch(
        self, resource: Resource, namespace: str | None = None, **kw: Any
    ) -> AsyncGenerator[Obj, None]:
        self.watch_calls.append({"namespace": namespace, **kw})
        self.open_watches += 1
        try:
            item = await self.feed.get()
            if isinstance(item, BaseException):
                raise item  # the watch never opened (a failed connect)
            if kw.get("announce_open"):
                yield {"type": WATCH_OPENED}
            while True:
                if item is END:
                    return
                if isinstance(item, BaseException):
                    raise item
                assert isinstance(item, dict)
                yield item
                item = await self.feed.get()
        finally:
            self.open_watches -= 1


def page(rv: str, *items: Obj, cont: str | None = None) -> Obj:
    meta: Obj = {"resourceVersion": rv}
    if cont:
        meta["continue"] = cont
    return {"kind": "ConfigMapList", "metadata": meta, "items": list(items)}


def ev(etype: str, o: Obj) -> Obj:
    return {"type": etype, "object": o}


def bookmark(rv: str) -> Obj:
    return ev("BOOKMARK", {"kind": "ConfigMap", "metadata": {"resourceVersion": rv}})


async def start(cache: Cache) -> asyncio.Task[None]:
    task = asyncio.create_task(cache.run())
    assert await cache.wait_synced(3.0)
    return task


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


class DecodeCounter:
    """Counts the objects a compact cache decodes, to prove a read path never decodes what it skips."""

    def __init__(self, cache: Cache) -> None:
        self.count = 0
        self._unpack = cache._unpack
        cache._unpack = self._counting  # type: ignore[method-assign]

    def _counting(self, stored: Any) -> Obj:
        self.count += 1
        return self._unpack(stored)
