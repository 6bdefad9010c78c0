"""One in-memory API at the client seam, for pure unit tests of reflector logic (no I/O).

`FakeApi` answers the `KubeClient` calls the reflectors and `Cache` make (get, list, watch, create,
patch, apply, delete, pause) over a dict store: label and field selectors, resourceVersions, a watch that
replays what changed after the listed resourceVersion (as the API server does), JSON merge patches, UID
and resourceVersion preconditions, and failure injection per verb. It is not a model of Kubernetes:
behaviour against the API server is what tests/integration checks, on real control planes.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
import uuid
from collections.abc import AsyncGenerator, Mapping
from typing import Any

from reflectors.forge import constants as c
from vkbridge.kube.cache import Cache, object_key
from vkbridge.kube.client import ApiError, Resource

Obj = dict[str, Any]
Call = tuple[str, str, str, str]  # (verb, plural, namespace, name)
_Watch = tuple[str, str | None, str | None, str | None, asyncio.Queue[Obj]]
WRITES = ("create", "patch", "apply", "delete")


def field_of(obj: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted path (``spec.nodeName``), None where any step is missing."""
    value: Any = obj
    for part in path.split("."):
        value = (value or {}).get(part)
    return value


def selects(obj: Mapping[str, Any], labels: str | None = None, fields: str | None = None) -> bool:
    """Equality label selectors and (in)equality field selectors, comma-separated, as the API server."""
    have = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (labels or "").split(",")):
        k, v = term.split("=", 1)
        if have.get(k) != v:
            return False
    for term in filter(None, (fields or "").split(",")):
        negate = "!=" in term
        k, v = term.split("!=" if negate else "=", 1)
        if (str(field_of(obj, k)) == v) == negate:
            return False
    return True


def merge_patch(target: Mapping[str, Any], patch: Mapping[str, Any]) -> Obj:
    """RFC 7386: objects merge key by key, null deletes, anything else replaces."""
    out = dict(target)
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = merge_patch(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


def _key(plural: str, obj: Mapping[str, Any]) -> tuple[str, str, str]:
    meta = obj["metadata"]
    return plural, meta.get("namespace") or "", meta["name"]


class FakeApi:
    """An in-memory store keyed by (plural, namespace, name); every object gets a uid and resourceVersion.

    Test side: `put`/`remove` change the store as someone else would (watchers see it), `obj`/`names`
    read it, `calls`/`writes()`/`deletes` tell what the code under test did, and `fail[verb]` holds
    exceptions raised by the next calls of that verb, one per call.
    """

    def __init__(self, name: str = "fake") -> None:
        self.name = name
        self.generation = 0  # KubeClient's credential generation: never swapped here
        self.store: dict[tuple[str, str, str], Obj] = {}
        self.calls: list[Call] = []
        self.deletes: list[tuple[str, str, str | None]] = []  # (plural, name, UID precondition)
        self.fail: dict[str, list[Exception]] = {}
        self._rv = itertools.count(100)
        self._last_rv = 99
        self._log: list[tuple[int, str, Obj | None, Obj | None]] = []
        self._watchers: list[_Watch] = []

    # -- test side

    def put(self, plural: str, obj: Mapping[str, Any], *, silent: bool = False) -> Obj:
        """Store ``obj`` (keeping the uid of the one it replaces); ``silent``: no watch sees it (yet)."""
        new = copy.deepcopy(dict(obj))
        meta = new.setdefault("metadata", {})
        key = _key(plural, new)
        old = self.store.get(key)
        meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
        self._last_rv = next(self._rv)
        meta["resourceVersion"] = str(self._last_rv)
        self.store[key] = new
        if not silent:
            self._notify(plural, old, new)
        return new

    def remove(self, plural: str, ns: str, name: str) -> None:
        self._last_rv = next(self._rv)
        self._notify(plural, self.store.pop((plural, ns, name)), None)

    def obj(self, plural: str, ns: str, name: str) -> Obj | None:
        return self.store.get((plural, ns, name))

    def names(self, plural: str, ns: str) -> set[str]:
        return {n for (p, s, n) in self.store if p == plural and s == ns}

    def writes(self, plural: str | None = None) -> list[Call]:
        return [call for call in self.calls if call[0] in WRITES and plural in (None, call[1])]

    def _record(self, verb: str, resource: Resource, namespace: str | None, name: str) -> None:
        self.calls.append((verb, resource.plural, namespace or "", name))
        pending = self.fail.get(verb)
        if pending:
            raise pending.pop(0)

    # -- client surface

    async def pause(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def get(self, resource: Resource, name: str, namespace: str | None = None, **_kw: Any) -> Obj:
        self._record("get", resource, namespace, name)
        obj = self.store.get((resource.plural, namespace or "", name))
        if obj is None:
            raise ApiError(404, "NotFound", f"{resource.plural} {name!r} not found")
        return copy.deepcopy(obj)

    async def list(self, resource: Resource, namespace: str | None = None, *, label_selector: str | None = None,
                   field_selector: str | None = None, **_kw: Any) -> Obj:  # fmt: skip
        pending = self.fail.get("list")
        if pending:
            raise pending.pop(0)
        items = [
            copy.deepcopy(o)
            for (p, s, _), o in self.store.items()
            if p == resource.plural and namespace in (None, s) and selects(o, label_selector, field_selector)
        ]
        return {"items": items, "metadata": {"resourceVersion": str(self._last_rv)}}

    async def watch(self, resource: Resource, namespace: str | None = None, *, resource_version: str,
                    label_selector: str | None = None, field_selector: str | None = None,
                    **_kw: Any) -> AsyncGenerator[Obj, None]:  # fmt: skip
        """What changed after ``resource_version`` first, then live changes, until closed."""
        queue: asyncio.Queue[Obj] = asyncio.Queue()
        entry: _Watch = (resource.plural, namespace, label_selector, field_selector, queue)
        since = int(resource_version)
        for rv, plural, old, new in self._log:
            if rv > since:
                self._send(entry, plural, old, new)
        self._watchers.append(entry)
        try:
            while True:
                yield await queue.get()
        finally:
            self._watchers.remove(entry)

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None, **_kw: Any) -> Obj:
        name = body["metadata"]["name"]
        self._record("create", resource, namespace, name)
        body = copy.deepcopy(body)
        body["metadata"].setdefault("namespace", namespace or "")
        assert body["metadata"]["namespace"] == (namespace or ""), "body and URL name other namespaces"
        if _key(resource.plural, body) in self.store:
            raise ApiError(409, "AlreadyExists", f"{resource.plural} {name!r} already exists")
        return copy.deepcopy(self.put(resource.plural, body))

    async def patch(self, resource: Resource, name: str, patch: Obj, namespace: str | None = None,
                    **_kw: Any) -> Obj:  # fmt: skip
        """A JSON merge patch; ``metadata.resourceVersion`` in it is a precondition."""
        self._record("patch", resource, namespace, name)
        old = self.store.get((resource.plural, namespace or "", name))
        if old is None:
            raise ApiError(404, "NotFound", f"{resource.plural} {name!r} not found")
        want_rv = (patch.get("metadata") or {}).get("resourceVersion")
        if want_rv and want_rv != old["metadata"]["resourceVersion"]:
            raise ApiError(409, "Conflict", "the object has been modified")
        new = merge_patch(old, patch)
        new.pop("_foreign_keys", None)  # keys another manager owned are ours once we patched them
        return copy.deepcopy(self.put(resource.plural, new))

    async def apply(self, resource: Resource, body: Obj, namespace: str | None = None, *,
                    field_manager: str, force: bool = True, **_kw: Any) -> Obj:  # fmt: skip
        """Server-side apply as the reflectors use it: our manager, forced; keys listed in an object's
        ``_foreign_keys`` (another manager's, set by a test) survive it."""
        name = body["metadata"]["name"]
        self._record("apply", resource, namespace, name)
        assert field_manager == c.FIELD_MANAGER
        key = (resource.plural, namespace or "", name)
        old = self.store.get(key)
        want_rv = body["metadata"].get("resourceVersion")
        if old is not None:
            if want_rv and want_rv != old["metadata"]["resourceVersion"]:
                raise ApiError(409, "Conflict", "the object has been modified")
            if not force:
                raise ApiError(409, "Conflict", "Apply failed with 1 conflict")
            if old.get("type", "Opaque") != body.get("type", old.get("type", "Opaque")):
                raise ApiError(422, "Invalid", "type: field is immutable")
        new = copy.deepcopy(body)
        new["metadata"].pop("resourceVersion", None)
        new["metadata"].setdefault("namespace", namespace or "")
        if old is not None:
            new["metadata"]["uid"] = old["metadata"]["uid"]
            foreign = {k: v for k, v in (old.get("data") or {}).items() if k in old.get("_foreign_keys", ())}
            if foreign:
                new["data"] = {**foreign, **(new.get("data") or {})}
                new["_foreign_keys"] = old["_foreign_keys"]
        return copy.deepcopy(self.put(resource.plural, new))

    async def delete(self, resource: Resource, name: str, namespace: str | None = None, *,
                     preconditions_uid: str | None = None, preconditions_resource_version: str | None = None,
                     **_kw: Any) -> Obj:  # fmt: skip
        """Gone at once (no finalizers, no grace period)."""
        self.deletes.append((resource.plural, name, preconditions_uid))
        self._record("delete", resource, namespace, name)
        key = (resource.plural, namespace or "", name)
        obj = self.store.get(key)
        if obj is None:
            raise ApiError(404, "NotFound", f"{resource.plural} {name!r} not found")
        if preconditions_uid is not None and preconditions_uid != obj["metadata"]["uid"]:
            raise ApiError(409, "Conflict", "the UID in the precondition does not match")
        if preconditions_resource_version not in (None, obj["metadata"]["resourceVersion"]):
            raise ApiError(409, "Conflict", "the ResourceVersion in the precondition does not match")
        self.remove(*key)
        return {"kind": "Status", "status": "Success"}

    # -- watches

    def _notify(self, plural: str, old: Obj | None, new: Obj | None) -> None:
        self._log.append((self._last_rv, plural, copy.deepcopy(old), copy.deepcopy(new)))
        for entry in self._watchers:
            self._send(entry, plural, old, new)

    @staticmethod
    def _send(entry: _Watch, plural: str, old: Obj | None, new: Obj | None) -> None:
        w_plural, w_ns, labels, fields, queue = entry
        ns = ((new or old) or {})["metadata"].get("namespace") or ""
        if w_plural != plural or w_ns not in (None, ns):
            return
        was = old is not None and selects(old, labels, fields)
        now = new is not None and selects(new, labels, fields)
        if was and now:
            queue.put_nowait({"type": "MODIFIED", "object": copy.deepcopy(new)})
        elif now:
            queue.put_nowait({"type": "ADDED", "object": copy.deepcopy(new)})
        elif was:
            queue.put_nowait({"type": "DELETED", "object": copy.deepcopy(old)})


class FakeRecorder:
    """The EventRecorder's ``event`` call, kept as (kind, object name, type, reason, message)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str, str]] = []

    def event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str, **kw: Any) -> None:
        self.events.append((kw.get("kind") or "", obj["metadata"]["name"], type_, reason, message))

    def reasons(self, name: str | None = None) -> list[str]:
        return [e[3] for e in self.events if name in (None, e[1])]


def caught_up(cache: Cache, api: FakeApi) -> bool:
    """Does ``cache`` hold exactly what ``api`` stores for its resource, namespace and selectors, at the
    stored resourceVersions? (Its watch has delivered every change so far.)"""
    want = {
        f"{ns}/{name}" if ns else name: o["metadata"]["resourceVersion"]
        for (plural, ns, name), o in api.store.items()
        if plural == cache.resource.plural
        and cache.namespace in (None, ns)
        and selects(o, cache.label_selector, cache.field_selector)
    }
    have = {object_key(o): (o.get("metadata") or {}).get("resourceVersion") for o in cache.list()}
    return have == want
