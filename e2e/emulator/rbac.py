"""Pool-side RBAC: the VK ClusterRole of LIQO §7 and the tenant's narrow rights in its tenant namespace.

Everything here is create-or-update, so the bundle and the emulator may both call it in any order.
"""

from __future__ import annotations

from typing import Any

from . import names as n
from .kube import ApiError, Kube, Obj, api_path

TENANT_ROLE = "liqo-tenant-identity"

# pkg/virtualKubelet/roles/remote/role.go (Liqo v1.2), verbatim.
VK_REMOTE_RULES: list[dict[str, Any]] = [
    {
        "apiGroups": [""],
        "resources": ["configmaps", "services", "secrets"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["pods/log"], "verbs": ["get", "list"]},
    {"apiGroups": [""], "resources": ["pods/exec"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/attach"], "verbs": ["create"]},
    {"apiGroups": [""], "resources": ["pods/portforward"], "verbs": ["get", "create"]},
    {
        "apiGroups": [""],
        "resources": ["persistentvolumeclaims"],
        "verbs": ["get", "list", "watch", "create", "delete", "update", "patch"],
    },
    {
        "apiGroups": [""],
        "resources": ["events"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {"apiGroups": ["metrics.k8s.io"], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
    {
        "apiGroups": ["networking.k8s.io"],
        "resources": ["ingresses"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["offloading.liqo.io"],
        "resources": ["shadowpods"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
    {
        "apiGroups": ["offloading.liqo.io"],
        "resources": ["shadowendpointslices"],
        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
    },
]


def tenant_rules(slug: str) -> list[dict[str, Any]]:
    """In its pool tenant namespace the tenant may ask for renewals and read its own slice and map."""
    return [
        {
            "apiGroups": ["authentication.liqo.io"],
            "resources": ["renews"],
            "verbs": ["create", "get", "list", "watch", "delete"],
        },
        {
            "apiGroups": ["authentication.liqo.io"],
            "resources": ["resourceslices"],
            "resourceNames": [slug],
            "verbs": ["get"],
        },
        {
            "apiGroups": ["offloading.liqo.io"],
            "resources": ["namespacemaps"],
            "resourceNames": [slug],
            "verbs": ["get"],
        },
    ]


async def apply(kube: Kube, collection: str, body: Obj) -> Obj:
    """Create, or replace the existing object's rules/subjects/labels keeping its resourceVersion."""
    try:
        return await kube.create(collection, body)
    except ApiError as e:
        if not e.already_exists:
            raise
    path = f"{collection}/{body['metadata']['name']}"
    for _ in range(5):
        cur = await kube.get(path)
        merged = {**cur, **{k: v for k, v in body.items() if k != "metadata"}}
        merged["metadata"] = {
            **cur["metadata"],
            "labels": {**cur["metadata"].get("labels", {}), **body["metadata"].get("labels", {})},
        }
        if "roleRef" in body and cur.get("roleRef") != body["roleRef"]:
            await kube.delete(path, uid=cur["metadata"]["uid"])  # roleRef is immutable
            return await kube.create(collection, body)
        try:
            return await kube.update(path, merged)
        except ApiError as e:
            if not e.conflict:
                raise
    raise RuntimeError(f"could not apply {path}: conflicts")


async def ensure_vk_clusterrole(pool: Kube) -> None:
    await apply(
        pool,
        api_path(n.RBAC, "clusterroles"),
        {
            "apiVersion": n.RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": n.VK_REMOTE_CLUSTERROLE, "labels": {n.K8S_MANAGED_BY: "liqo"}},
            "rules": VK_REMOTE_RULES,
        },
    )


async def ensure_pool_tenant(pool: Kube, consumer_id: str, slug: str) -> str:
    """Pool tenant namespace liqo-tenant-<consumer id> plus the tenant Role and its Group binding."""
    ns = n.pool_tenant_ns(consumer_id)
    await pool.ensure(
        api_path("v1", "namespaces"),
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": ns,
                "labels": {"liqo.io/tenant-namespace": "true", n.REMOTE_CLUSTER_ID: consumer_id},
            },
        },
    )
    labels = {n.K8S_MANAGED_BY: "liqo", n.REMOTE_CLUSTER_ID: consumer_id}
    await apply(
        pool,
        api_path(n.RBAC, "roles", ns),
        {
            "apiVersion": n.RBAC,
            "kind": "Role",
            "metadata": {"name": TENANT_ROLE, "namespace": ns, "labels": labels},
            "rules": tenant_rules(slug),
        },
    )
    await apply(
        pool,
        api_path(n.RBAC, "rolebindings", ns),
        {
            "apiVersion": n.RBAC,
            "kind": "RoleBinding",
            "metadata": {"name": TENANT_ROLE, "namespace": ns, "labels": labels},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": consumer_id}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": TENANT_ROLE},
        },
    )
    return ns
