"""Pods on our node that the pool must not run (namespace not offloaded, DaemonSet pods).

They are told why instead of silently staying put: Pending/OffloadingBackOff if they never started,
Failed/OffloadingAborted if they had (so their controller re-creates them elsewhere), with a Warning
event naming the fix. A terminating one is removed once nothing exists remotely for it: in a namespace
that was paired a moment ago its ShadowPod may still be on the pool, so the pool is asked first.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from reflectors.context import ReflectionContext
from reflectors.forge import constants as c
from reflectors.forge import pods as fp
from reflectors.forge.fallback import FallbackAction, decide_fallback, fallback_message
from reflectors.forge.status import rejected_status, status_equal, status_patch
from reflectors.generic import pool_failure, require_pool
from vkbridge.kube.client import PODS, SHADOWPODS, ApiError, Resource
from vkbridge.kube.workqueue import RequeueAfter
from vkbridge.logs import get_logger

log = get_logger("reflectors.fallback")


# While a just-unpaired namespace's ShadowPod or remote pod is still on the pool, look again this often.
POOL_LEFTOVER_RETRY_SECONDS = 2.0


class FallbackReflector:
    def __init__(self, ctx: ReflectionContext) -> None:
        self.ctx = ctx

    async def handle(
        self, key: str, local: Mapping[str, Any] | None, remote_namespace: str | None = None
    ) -> RequeueAfter | None:
        """``remote_namespace``: where the namespace was reflected until a moment ago, if it was."""
        if local is None:
            return None
        ns, name = key.split("/", 1)
        action = decide_fallback(dict(local))
        if action is FallbackAction.NONE:
            return None
        if action is FallbackAction.DELETE:
            if remote_namespace is not None and await self._left_on_pool(key, name, remote_namespace):
                return RequeueAfter(POOL_LEFTOVER_RETRY_SECONDS)  # invariant 1: never while it is there
            try:
                await self.ctx.home.delete(
                    PODS, name, ns, preconditions_uid=fp.uid_of(local), grace_period_seconds=0
                )
            except ApiError as err:
                if not (err.not_found or err.conflict):
                    raise
            log.info("pod removed: nothing of it on the pool", pod=key)
            return None
        phase, reason = (
            ("Pending", c.REASON_OFFLOADING_BACKOFF)
            if action is FallbackAction.BACKOFF
            else ("Failed", c.REASON_OFFLOADING_ABORTED)
        )
        new = rejected_status(dict(local), phase, reason, dt.datetime.now(dt.UTC))
        if status_equal(dict(fp.status_of(local)), new):
            return None
        patch = {"status": status_patch(fp.status_of(local), new)}
        await self.ctx.home.patch(PODS, name, patch, ns, subresource="status", field_manager=c.FIELD_MANAGER)
        message = fallback_message(dict(local), self.ctx.remote_cluster_id)
        self.ctx.recorder.event(local, "Warning", c.EVENT_REFLECTION_DISABLED, message)
        log.info(f"pod marked {phase} ({reason}): the pool may not run it", pod=key, why=message[:200])
        return None

    async def _left_on_pool(self, key: str, name: str, remote_namespace: str) -> bool:
        """Is our ShadowPod or remote pod for this pod still on the pool? The ShadowPod is deleted (UID
        precondition), as the pod reflector would have; the remote pod then goes with it."""
        require_pool(self.ctx.reach)  # the pool must be asked before a local pod is removed
        shadow = await self._get_ours(SHADOWPODS, name, remote_namespace)
        if shadow is not None:
            if not fp.is_terminating(shadow):
                try:
                    await self.ctx.pool.delete(
                        SHADOWPODS, name, remote_namespace, preconditions_uid=fp.uid_of(shadow)
                    )
                except ApiError as err:
                    if not (err.not_found or err.conflict):
                        raise
                log.info("ShadowPod deleted", pod=key, reason="local pod terminating, namespace unpaired")
            return True
        return await self._get_ours(PODS, name, remote_namespace) is not None

    async def _get_ours(self, resource: Resource, name: str, namespace: str) -> dict[str, Any] | None:
        try:
            obj = await self.ctx.pool.get(resource, name, namespace)
        except ApiError as err:
            if err.not_found:
                return None
            gone = pool_failure(self.ctx.reach, err)
            if gone is not None:
                raise gone from err
            raise
        labels = fp.labels_of(obj)
        ours = (
            labels.get(c.ORIGIN_LABEL) == self.ctx.local_cluster_id
            and labels.get(c.DESTINATION_LABEL) == self.ctx.remote_cluster_id
            and labels.get(c.NODENAME_LABEL) == self.ctx.node_name
        )
        return obj if ours else None
