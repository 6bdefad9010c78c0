"""Where each resource type the bridge reads or writes lives in the API server's REST tree."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import quote

__all__ = [
    "CERTIFICATESIGNINGREQUESTS",
    "CONFIGMAPS",
    "EVENTS",
    "LEASES",
    "NAMESPACEMAPS",
    "NAMESPACES",
    "NODES",
    "PODS",
    "RENEWS",
    "RESOURCESLICES",
    "SECRETS",
    "SELFSUBJECTREVIEWS",
    "SHADOWPODS",
    "SUBJECTACCESSREVIEWS",
    "TOKENREVIEWS",
    "VIRTUALNODES",
    "Resource",
]


@dataclass(frozen=True)
class Resource:
    """Where a resource type lives in the REST tree."""

    group: str
    version: str
    plural: str
    namespaced: bool
    kind: str = ""

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def prefix(self) -> str:
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"

    def path(
        self, namespace: str | None = None, name: str | None = None, subresource: str | None = None
    ) -> str:
        if namespace is not None and not self.namespaced:
            raise ValueError(f"{self.plural} is cluster-scoped; no namespace allowed")
        if subresource is not None and name is None:
            raise ValueError("a subresource needs a name")
        p = self.prefix
        if namespace is not None:
            p += f"/namespaces/{quote(namespace, safe='')}"
        p += f"/{self.plural}"
        if name is not None:
            p += f"/{quote(name, safe='')}"
        if subresource is not None:
            p += f"/{subresource}"
        return p


PODS: Final = Resource("", "v1", "pods", True, "Pod")
NODES: Final = Resource("", "v1", "nodes", False, "Node")
EVENTS: Final = Resource("", "v1", "events", True, "Event")
SECRETS: Final = Resource("", "v1", "secrets", True, "Secret")
CONFIGMAPS: Final = Resource("", "v1", "configmaps", True, "ConfigMap")
NAMESPACES: Final = Resource("", "v1", "namespaces", False, "Namespace")
LEASES: Final = Resource("coordination.k8s.io", "v1", "leases", True, "Lease")
SHADOWPODS: Final = Resource("offloading.liqo.io", "v1beta1", "shadowpods", True, "ShadowPod")
NAMESPACEMAPS: Final = Resource("offloading.liqo.io", "v1beta1", "namespacemaps", True, "NamespaceMap")
VIRTUALNODES: Final = Resource("offloading.liqo.io", "v1beta1", "virtualnodes", True, "VirtualNode")
RESOURCESLICES: Final = Resource("authentication.liqo.io", "v1beta1", "resourceslices", True, "ResourceSlice")
RENEWS: Final = Resource("authentication.liqo.io", "v1beta1", "renews", True, "Renew")
CERTIFICATESIGNINGREQUESTS: Final = Resource(
    "certificates.k8s.io", "v1", "certificatesigningrequests", False, "CertificateSigningRequest"
)
TOKENREVIEWS: Final = Resource("authentication.k8s.io", "v1", "tokenreviews", False, "TokenReview")
SELFSUBJECTREVIEWS: Final = Resource(
    "authentication.k8s.io", "v1", "selfsubjectreviews", False, "SelfSubjectReview"
)
SUBJECTACCESSREVIEWS: Final = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", False, "SubjectAccessReview"
)
