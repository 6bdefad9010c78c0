"""The REST verbs on a ``Resource`` (get, list, create, replace, patch, apply, delete).

Only paths, parameters and DeleteOptions are built here; ``KubeClient.request`` sends them, so the
transport (sessions, rate limit, credential swaps, request counting) stays in one place.
"""

from __future__ import annotations

from typing import Any, Final, TypedDict, Unpack

from vkbridge.kube.requestmetrics import APPLY_PATCH, Params
from vkbridge.kube.resources import Resource

JSON: Final = "application/json"
MERGE_PATCH: Final = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH: Final = "application/strategic-merge-patch+json"
JSON_PATCH: Final = "application/json-patch+json"

Obj = dict[str, Any]
Body = dict[str, Any] | list[Any]  # a list is a JSON patch


class RequestOptions(TypedDict, total=False):
    """What a verb may pass to ``KubeClient.request`` besides method and path."""

    params: Params | None
    body: Body | None
    content_type: str | None
    timeout: float | None


class ResourceVerbs:
    """What ``KubeClient`` offers on top of ``request``."""

    async def request(self, method: str, path: str, **options: Unpack[RequestOptions]) -> Obj:
        """Send one request: ``KubeClient.request`` (the transport)."""
        raise NotImplementedError

    async def get(
        self, resource: Resource, name: str, namespace: str | None = None, *, subresource: str | None = None
    ) -> Obj:
        return await self.request("GET", resource.path(namespace, name, subresource))

    async def list(
        self,
        resource: Resource,
        namespace: str | None = None,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
        resource_version: str | None = None,
        timeout: float | None = None,
    ) -> Obj:
        """One page (a ``*List`` dict); follow ``metadata.continue`` for the rest."""
        params: dict[str, str | int | None] = {
            "labelSelector": label_selector,
            "fieldSelector": field_selector,
            "limit": limit,
            "continue": continue_token,
            "resourceVersion": resource_version,
        }
        return await self.request("GET", resource.path(namespace), params=params, timeout=timeout)

    async def create(
        self,
        resource: Resource,
        body: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        name: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        """POST; for subresources (``eviction``, ``token``) pass the parent ``name``."""
        path = _path_of(resource, body, namespace, subresource, name)
        return await self.request("POST", path, body=body, params={"fieldManager": field_manager})

    async def replace(
        self,
        resource: Resource,
        body: Obj,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        field_manager: str | None = None,
    ) -> Obj:
        """PUT the whole object; its metadata.resourceVersion makes it an optimistic-concurrency update."""
        path = _path_of(resource, body, namespace, subresource, body["metadata"]["name"])
        return await self.request("PUT", path, body=body, params={"fieldManager": field_manager})

    async def patch(
        self,
        resource: Resource,
        name: str,
        patch: Body,
        namespace: str | None = None,
        *,
        subresource: str | None = None,
        content_type: str = MERGE_PATCH,
        field_manager: str | None = None,
    ) -> Obj:
        path = resource.path(namespace, name, subresource)
        return await self.request(
            "PATCH", path, body=patch, content_type=content_type, params={"fieldManager": field_manager}
        )

    async def apply(
        self,
        resource: Resource,
        body: Obj,
        namespace: str | None = None,
        *,
        field_manager: str = "reflection.liqo.io",
        force: bool = True,
        subresource: str | None = None,
    ) -> Obj:
        """Server-side apply of a partial object that names apiVersion, kind and metadata.name."""
        path = _path_of(resource, body, namespace, subresource, body["metadata"]["name"])
        return await self.request(
            "PATCH",
            path,
            body=body,
            content_type=APPLY_PATCH,
            params={"fieldManager": field_manager, "force": force},
        )

    async def delete(
        self,
        resource: Resource,
        name: str,
        namespace: str | None = None,
        *,
        preconditions_uid: str | None = None,
        preconditions_resource_version: str | None = None,
        grace_period_seconds: int | None = None,
        propagation_policy: str | None = None,
    ) -> Obj:
        """DELETE with DeleteOptions; returns the object (still terminating) or a Status."""
        opts: Obj = {"kind": "DeleteOptions", "apiVersion": "v1"}
        pre: dict[str, str] = {}
        if preconditions_uid is not None:
            pre["uid"] = preconditions_uid
        if preconditions_resource_version is not None:
            pre["resourceVersion"] = preconditions_resource_version
        if pre:
            opts["preconditions"] = pre
        if grace_period_seconds is not None:
            opts["gracePeriodSeconds"] = grace_period_seconds
        if propagation_policy is not None:
            opts["propagationPolicy"] = propagation_policy
        return await self.request("DELETE", resource.path(namespace, name), body=opts, content_type=JSON)


def _path_of(
    resource: Resource, body: Obj, namespace: str | None, subresource: str | None, name: str | None
) -> str:
    """Where a write of ``body`` goes: in ``namespace``, else in the body's own metadata.namespace."""
    if namespace is None and resource.namespaced:
        namespace = body.get("metadata", {}).get("namespace")
        if not isinstance(namespace, str) or not namespace:
            raise ValueError(f"{resource.plural}: namespace missing (argument or metadata.namespace)")
    return resource.path(namespace, name, subresource)
