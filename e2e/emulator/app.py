"""Wiring: caches first, then controllers, then the webhook; everything owned by one TaskGroup."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from . import rbac
from .context import Env
from .csrapprover import CsrApprover
from .grant import Grant
from .namespaces import ProviderNamespaces
from .offloading import Offloading
from .pod_webhook import PodWebhook
from .quota_webhook import QuotaWebhook
from .renew import Renewals
from .replicator import Replicator
from .runtime import Controller, wait_synced
from .shadowpods import ShadowPods

log = logging.getLogger(__name__)

# Name -> component; --controllers picks a subset (e.g. a second emulator that only signs).
COMPONENTS: dict[str, Callable[[Env], Any]] = {
    "offloading": Offloading,
    "csrapprover": CsrApprover,
    "replicator": Replicator,
    "namespacemap": ProviderNamespaces,
    "shadowpod": ShadowPods,
    "resourceslice": Grant,
    "renew": Renewals,
}
ALL = (*COMPONENTS, "webhook", "podwebhook")


async def run(
    env: Env, *, enabled: tuple[str, ...] = ALL, on_ready: Callable[[dict[str, Any]], None] | None = None
) -> None:
    """Run until cancelled; on_ready(info) is called once caches are synced and the webhooks registered."""
    unknown = set(enabled) - set(ALL)
    if unknown:
        raise ValueError(f"unknown controllers {sorted(unknown)}; known: {', '.join(ALL)}")
    await rbac.ensure_vk_clusterrole(env.pool)
    await rbac.ensure_pool_tenant(env.pool, env.cfg.consumer_id, env.cfg.slug)
    components = [COMPONENTS[name](env) for name in COMPONENTS if name in enabled]
    webhook = QuotaWebhook(env) if "webhook" in enabled else None
    pod_webhook = PodWebhook(env) if "podwebhook" in enabled else None
    controllers: list[Controller] = [c for comp in components for c in comp.controllers]
    controllers += pod_webhook.controllers if pod_webhook is not None else []
    try:
        async with asyncio.TaskGroup() as tg:
            for inf in env.informers:
                tg.create_task(inf.run(), name=f"informer {inf.name}")
            await wait_synced(*env.informers)
            for ctrl in controllers:
                tg.create_task(ctrl.run(), name=f"controller {ctrl.name}")
            if webhook is not None:
                await webhook.start()
            if pod_webhook is not None:
                await pod_webhook.start()
            info = {
                "webhook_port": webhook.port if webhook else 0,
                "pod_webhook_port": pod_webhook.port if pod_webhook else 0,
                "controllers": list(enabled),
            }
            log.info("emulator ready: consumer %s, slug %s, %s", env.cfg.consumer_id, env.cfg.slug, info)
            if on_ready is not None:
                on_ready(info)
    finally:
        if webhook is not None:
            await asyncio.shield(webhook.stop())
        if pod_webhook is not None:
            await asyncio.shield(pod_webhook.stop())
        await env.consumer.close()
        await env.pool.close()
