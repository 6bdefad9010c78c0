"""List+watch of the pods bound to one node, resuming on resourceVersion and re-listing on 410 Gone."""

from __future__ import annotations

import asyncio
import logging
import random
from typing import Any

import aiohttp

from .kubeclient import ApiError, KubeClient
from .registry import PodRegistry

log = logging.getLogger(__name__)

Json = dict[str, Any]
PAGE = 500


async def list_pods(client: KubeClient, node: str) -> tuple[list[Json], str]:
    items: list[Json] = []
    cont: str | None = None
    while True:
        page = await client.request(
            "GET",
            "/api/v1/pods",
            params={"fieldSelector": f"spec.nodeName={node}", "limit": PAGE, "continue": cont},
        )
        items.extend(page.get("items") or [])
        cont = page.get("metadata", {}).get("continue")
        if not cont:
            return items, page["metadata"]["resourceVersion"]


class _Gone(Exception):
    pass


async def watch_node_pods(
    client: KubeClient, node: str, registry: PodRegistry, synced: asyncio.Event
) -> None:
    """Runs until cancelled; ``synced`` is set after the first full list was handed to the registry."""
    rv: str | None = None
    failures = 0
    while True:
        try:
            if rv is None:
                items, rv = await list_pods(client, node)
                for pod in items:  # lists carry no kind; keep objects self-describing for GET /pods
                    pod.setdefault("kind", "Pod")
                    pod.setdefault("apiVersion", "v1")
                registry.resync(node, items)
                synced.set()
            params = {"fieldSelector": f"spec.nodeName={node}", "resourceVersion": rv, "timeoutSeconds": 300}
            async for event in client.watch("/api/v1/pods", params):
                etype = event.get("type")
                obj = event.get("object") or {}
                if etype == "ERROR":
                    if obj.get("code") == 410:
                        raise _Gone()
                    raise ApiError(int(obj.get("code") or 500), obj, "WATCH", "/api/v1/pods")
                rv = obj.get("metadata", {}).get("resourceVersion", rv)
                if etype in ("ADDED", "MODIFIED", "DELETED"):
                    registry.handle(node, str(etype), obj)
                failures = 0
        except asyncio.CancelledError:
            raise
        except _Gone:
            log.info("node %s: pod watch expired (410); re-listing", node)
            rv = None
            continue
        except ApiError as exc:
            if exc.status == 410:
                rv = None
                continue
            failures += 1
            log.warning("node %s: pod watch failed: %s", node, exc)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            failures += 1
            log.warning("node %s: pod watch interrupted: %s", node, exc)
        if failures:
            await asyncio.sleep(min(0.2 * 2**failures, 5.0) * (0.5 + random.random()))
