"""Pods on our node that the pool must not run (namespace not offloaded, DaemonSet pods).

They are told why instead of silently staying put: Pending/OffloadingBackOff if they never started,
Failed/OffloadingAborted if they had (so their controller re-creates them elsewhere), with a Warning
event naming the fix. A terminating one is simply removed: nothing exists remotely for it.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from reflectors.context import ReflectionContext
from reflectors.forge import constants as c
from reflectors.forge import pods as fp
from reflectors.forge.fallback import FallbackAction, decide_fallback, fallback_message
from reflectors.forge.status import rejected_status, status_equal
from vkbridge.kube.client import PODS, ApiError
from vkbridge.logs import get_logger

log = get_logger("reflectors.fallback")


class FallbackReflector:
    def __init__(self, ctx: ReflectionContext) -> None:
        self.ctx = ctx

    async def handle(self, key: str, local: Mapping[str, Any] | None) -> None:
        if local is None:
            return
        ns, name = key.split("/", 1)
        action = decide_fallback(dict(local))
        if action is FallbackAction.NONE:
            return
        if action is FallbackAction.DELETE:
            try:
                await self.ctx.home.delete(
                    PODS, name, ns, preconditions_uid=fp.uid_of(local), grace_period_seconds=0
                )
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    raise
            log.info("pod removed (it was never offloaded)", pod=key)
            return
        phase, reason = (
            ("Pending", c.REASON_OFFLOADING_BACKOFF)
            if action is FallbackAction.BACKOFF
            else ("Failed", c.REASON_OFFLOADING_ABORTED)
        )
        new = rejected_status(dict(local), phase, reason, dt.datetime.now(dt.UTC))
        if status_equal(dict(fp.status_of(local)), new):
            return
        current = fp.status_of(local)
        patch = {k: v for k, v in new.items() if current.get(k) != v}
        patch.update({k: None for k in current if k not in new})
        await self.ctx.home.patch(PODS, name, {"status": patch}, ns, subresource="status")
        message = fallback_message(dict(local), self.ctx.remote_cluster_id)
        self.ctx.recorder.event(local, "Warning", c.EVENT_REFLECTION_DISABLED, message)
        log.info(f"pod marked {phase} ({reason}): the pool may not run it", pod=key, why=message[:200])
