"""Pool-side RBAC: the VK ClusterRole of LIQO §7 and the tenant's narrow rights in its tenant namespace.

Everything here is create-or-update, so the bundle and the emulator may both call it in any order.
"""

from __future__ import annotations

from typing import Any

from e2e.liqo_chart import chart_rbac

from . import names as n
from .kube import Kube, Obj, api_path

TENANT_ROLE = "liqo-tenant-identity"


def _rule(
    group: str, resources: list[str], verbs: tuple[str, ...], names: list[str] | None = None
) -> dict[str, Any]:
    """One PolicyRule, a line each like the kubebuilder markers it comes from."""
    rule: dict[str, Any] = {"apiGroups": [group], "resources": resources}
    if names is not None:
        rule["resourceNames"] = names
    rule["verbs"] = list(verbs)
    return rule


def vk_remote_rules() -> list[dict[str, Any]]:
    """The rules of ClusterRole ``liqo-virtual-kubelet-remote`` as Liqo's chart ships them (the chart's file,
    read from the binary store: the repo keeps no copy)."""
    rules: list[dict[str, Any]] = chart_rbac("liqo-virtual-kubelet-remote-ClusterRole")["rules"]
    return rules


def tenant_rules(slug: str) -> list[dict[str, Any]]:
    """In its pool tenant namespace the tenant may ask for renewals and read its own slice and map."""
    return [
        _rule("authentication.liqo.io", ["renews"], ("create", "get", "list", "watch", "delete")),
        _rule("authentication.liqo.io", ["resourceslices"], ("get",), names=[slug]),
        _rule("offloading.liqo.io", ["namespacemaps"], ("get",), names=[slug]),
    ]


async def apply(kube: Kube, collection: str, body: Obj) -> Obj:
    """Create, or replace the existing object's rules/subjects/labels keeping its resourceVersion."""
    path = f"{collection}/{body['metadata']['name']}"
    if "roleRef" in body:  # roleRef is immutable: a binding to another role is deleted first
        cur = await kube.get_or_none(path)
        if cur is not None and cur.get("roleRef") != body["roleRef"]:
            await kube.delete(path, uid=cur["metadata"]["uid"])

    def merged(cur: Obj) -> Obj:
        out = {**cur, **{k: v for k, v in body.items() if k != "metadata"}}
        labels = {**cur["metadata"].get("labels", {}), **body["metadata"].get("labels", {})}
        out["metadata"] = {**cur["metadata"], "labels": labels}
        return out

    return await kube.create_or_update(collection, body, merged)


async def ensure_vk_clusterrole(pool: Kube) -> None:
    await apply(
        pool,
        api_path(n.RBAC, "clusterroles"),
        {
            "apiVersion": n.RBAC,
            "kind": "ClusterRole",
            "metadata": {"name": n.VK_REMOTE_CLUSTERROLE, "labels": {n.K8S_MANAGED_BY: "liqo"}},
            "rules": vk_remote_rules(),
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
    metadata = {
        "name": TENANT_ROLE,
        "namespace": ns,
        "labels": {n.K8S_MANAGED_BY: "liqo", n.REMOTE_CLUSTER_ID: consumer_id},
    }
    group = "rbac.authorization.k8s.io"
    role = {"rules": tenant_rules(slug)}
    binding = {
        "subjects": [{"apiGroup": group, "kind": "Group", "name": consumer_id}],
        "roleRef": {"apiGroup": group, "kind": "Role", "name": TENANT_ROLE},
    }
    for kind, plural, content in (("Role", "roles", role), ("RoleBinding", "rolebindings", binding)):
        body = {"apiVersion": n.RBAC, "kind": kind, "metadata": metadata, **content}
        await apply(pool, api_path(n.RBAC, plural, ns), body)
    return ns
