"""Our copies of Secrets and ConfigMaps on the pool: which remote object stands for which local one, what
we last wrote, and the writes that read, prune, unmark or delete a copy.

The configuration reflector decides *whether* a copy must exist; this module is how it touches the pool.
Ownership guard (invariant 2): only copies labelled ours are ever changed, every delete is conditional.
Secret data is compared and pruned, never logged: messages name objects only (`scrub` for API answers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from reflectors.context import ReflectionContext
from reflectors.forge import constants as c
from reflectors.forge import pods as fp
from reflectors.forge.configuration import (
    is_service_account_secret,
    node_mark,
    other_node_marks,
    release_action,
    scrub,
)
from reflectors.forge.configuration import resource_version as rv_of
from reflectors.forge.labels import is_reflected
from reflectors.forge.names import local_configmap_name, remote_configmap_name
from reflectors.forge.references import CONFIGMAP, SECRET
from reflectors.generic import Pair, pool_failure, require_pool
from reflectors.refcount import ObjectRef
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import CONFIGMAPS, SECRETS, ApiError, Resource
from vkbridge.logs import get_logger

log = get_logger("reflectors.configuration")

KINDS: Final = (SECRET, CONFIGMAP)
RESOURCES: Final[Mapping[str, Resource]] = {SECRET: SECRETS, CONFIGMAP: CONFIGMAPS}


class ConfigurationWriteError(Exception):
    """A remote write failed; the message names the object and the API's answer, never Secret data."""


class CopyChanged(Exception):
    """A conditional release (resourceVersion precondition) found the copy changed, most likely another
    node marked it: the key stays releasable and is retried (rate-limited) from the cache's newer view."""

    @classmethod
    def releasing(cls, ref: ObjectRef) -> CopyChanged:
        return cls(f"{ref} changed on the pool while being released")


@dataclass(frozen=True)
class Applied:
    """What we last wrote: lets a pod proceed while the remote cache has not shown our write yet."""

    fingerprint: str
    uid: str
    resource_version: str


@dataclass(kw_only=True)
class ConfigPair(Pair):
    local_caches: dict[str, Cache]
    remote_caches: dict[str, Cache]

    def caches(self) -> list[Cache]:
        return [*self.local_caches.values(), *self.remote_caches.values()]


class PoolCopies:
    def __init__(self, ctx: ReflectionContext) -> None:
        self.ctx = ctx
        self.applied: dict[ObjectRef, Applied] = {}

    # ------------------------------------------------------------------------------------------ names

    def remote_name(self, ref: ObjectRef) -> str:
        if ref.kind == CONFIGMAP:
            return remote_configmap_name(ref.name, self.ctx.local_cluster_id)
        return ref.name

    def ref_of_remote(self, local_ns: str, kind: str, remote: Mapping[str, Any] | None) -> ObjectRef | None:
        """The local object a remote copy stands for; None for what is not a plain copy of ours."""
        if not is_reflected(remote, self.ctx.local_cluster_id, self.ctx.remote_cluster_id):
            return None
        if kind == SECRET and is_service_account_secret(remote or {}):
            return None  # token Secrets belong to the ServiceAccount reflection
        name = fp.name_of(remote)
        if kind == CONFIGMAP:
            name = local_configmap_name(name, self.ctx.local_cluster_id)
        return ObjectRef(kind, local_ns, name)

    def cached(self, pair: ConfigPair, ref: ObjectRef) -> dict[str, Any] | None:
        remote = pair.remote_caches[ref.kind].get(f"{pair.remote}/{self.remote_name(ref)}")
        if remote is None or self.ref_of_remote(pair.local, ref.kind, remote) != ref:
            return None  # ownership guard: only our labelled copies are ever touched
        return remote

    # ------------------------------------------------------------------------------------------ pool

    async def get(self, pair: ConfigPair, ref: ObjectRef, local: Mapping[str, Any]) -> dict[str, Any] | None:
        """Our cache only holds our copies: a GET finds a same-name foreign object before we write."""
        try:
            return await self.ctx.pool.get(RESOURCES[ref.kind], self.remote_name(ref), pair.remote)
        except ApiError as err:
            if err.not_found:
                return None
            raise self.write_error("get", pair, ref, local, err) from None

    async def prune(
        self, pair: ConfigPair, ref: ObjectRef, desired: Mapping[str, Any], out: dict[str, Any]
    ) -> dict[str, Any]:
        """Keys someone else added to our copy survive an apply (they own them): remove them."""
        patch: dict[str, Any] = {}
        for name in ("data", "binaryData"):
            extra = [k for k in (out.get(name) or {}) if k not in (desired.get(name) or {})]
            if extra:
                patch[name] = dict.fromkeys(extra)
        if not patch:
            return out
        patch["metadata"] = {"resourceVersion": rv_of(out)}
        log.info("removing keys added on the pool", object=f"{ref.namespace}/{ref.name}", kind=ref.kind)
        return await self.ctx.pool.patch(
            RESOURCES[ref.kind], self.remote_name(ref), patch, pair.remote, field_manager=c.FIELD_MANAGER
        )

    async def delete_ours(self, pair: ConfigPair, ref: ObjectRef, why: str) -> bool:
        """Delete our copy if there is one (from the cache, or our own unseen write); True if deleted."""
        remote = self.cached(pair, ref)
        applied = self.applied.get(ref)
        if remote is None and applied is None:
            return False
        target: Mapping[str, Any] = (
            remote if remote is not None else {"metadata": {"uid": applied.uid if applied else ""}}
        )
        return await self.delete(pair, ref, target, None, why)

    async def release(self, pair: ConfigPair, ref: ObjectRef) -> None:
        """No pod of this node references the object any more: the copy goes only if no other node marks it.

        Two virtual nodes mapping the same remote namespace share the copy; each marks it while one of its
        pods needs it. Deleting (or unmarking) is conditional on the resourceVersion we decided on, so a
        mark another node adds meanwhile makes it conflict (``CopyChanged``) rather than be lost.
        """
        remote = self.cached(pair, ref)
        if remote is None and ref in self.applied:
            # Our own write, not in the cache yet: read it, its marks decide.
            existing = await self.get(pair, ref, {})
            if existing is not None and self.ref_of_remote(pair.local, ref.kind, existing) == ref:
                remote = existing
        if remote is None:
            self.applied.pop(ref, None)
            return
        why = "no reflected pod of this node references it"
        action = release_action(remote, self.ctx.node_name)
        if action == "delete":
            await self.delete(pair, ref, remote, None, why, resource_version=rv_of(remote) or None)
        elif action == "unmark":
            await self._unmark(pair, ref, remote)
        else:
            self.applied.pop(ref, None)

    async def _unmark(self, pair: ConfigPair, ref: ObjectRef, remote: Mapping[str, Any]) -> None:
        require_pool(self.ctx.reach)
        mark = node_mark(self.ctx.node_name)
        patch = {"metadata": {"resourceVersion": rv_of(remote), "labels": {mark: None}}}
        try:
            await self.ctx.pool.patch(
                RESOURCES[ref.kind], self.remote_name(ref), patch, pair.remote, field_manager=c.FIELD_MANAGER
            )
        except ApiError as err:
            if err.conflict:
                raise CopyChanged.releasing(ref) from None
            if not err.not_found:
                raise self.write_error("unmark", pair, ref, None, err) from None
        self._forget(
            pair,
            ref,
            f"{ref.kind} left on the pool for other virtual nodes",
            nodes=sorted(other_node_marks(remote, self.ctx.node_name)),
        )

    async def delete(
        self,
        pair: ConfigPair,
        ref: ObjectRef,
        remote: Mapping[str, Any],
        local: Mapping[str, Any] | None,
        why: str,
        *,
        resource_version: str | None = None,
    ) -> bool:
        """Delete with a UID precondition; with ``resource_version`` too, a changed copy raises
        ``CopyChanged`` (another node marked it meanwhile) instead of counting as gone."""
        uid = fp.uid_of(remote)
        if not uid:
            return False  # never an unconditional delete
        require_pool(self.ctx.reach)
        try:
            await self.ctx.pool.delete(
                RESOURCES[ref.kind],
                self.remote_name(ref),
                pair.remote,
                preconditions_uid=uid,
                preconditions_resource_version=resource_version,
            )
        except ApiError as err:
            if err.conflict and resource_version is not None:
                raise CopyChanged.releasing(ref) from None
            if not (err.not_found or err.conflict):
                raise self.write_error("delete", pair, ref, local, err) from None
        self._forget(pair, ref, f"{ref.kind} deleted from the pool", reason=why)
        return True

    def _forget(self, pair: ConfigPair, ref: ObjectRef, message: str, **kv: object) -> None:
        """The pool copy is no longer ours (deleted, or left to other nodes): drop it and say where it was."""
        self.applied.pop(ref, None)
        where = f"{pair.remote}/{self.remote_name(ref)}"
        log.info(message, object=f"{ref.namespace}/{ref.name}", remote=where, **kv)

    def write_error(
        self, verb: str, pair: ConfigPair, ref: ObjectRef, local: Mapping[str, Any] | None, err: ApiError
    ) -> Exception:
        """A transport failure parks the key (`PoolUnavailable`); an answer becomes a scrubbed message."""
        gone = pool_failure(self.ctx.reach, err, f"{verb} {ref.kind} {pair.remote}/{self.remote_name(ref)}")
        if gone is not None:
            return gone
        message = scrub(err.message, local if ref.kind == SECRET else None)[:300]
        return ConfigurationWriteError(
            f"{verb} {ref.kind} {pair.remote}/{self.remote_name(ref)} on the pool: "
            f"{err.status} {err.reason}: {message}"
        )
