"""Liqo v1.2 names, labels and API coordinates the emulator and the bundle share (LIQO §0, §3.3, §6)."""

from __future__ import annotations

import hashlib

# API group/versions and plurals.
OFFLOADING = "offloading.liqo.io/v1beta1"
AUTH = "authentication.liqo.io/v1beta1"
NAMESPACEOFFLOADINGS = "namespaceoffloadings"
NAMESPACEMAPS = "namespacemaps"
RESOURCESLICES = "resourceslices"
RENEWS = "renews"
SHADOWPODS = "shadowpods"
VIRTUALNODES = "virtualnodes"
RBAC = "rbac.authorization.k8s.io/v1"
ADMISSIONREG = "admissionregistration.k8s.io/v1"

# Labels and annotations.
REMOTE_CLUSTER_ID = "liqo.io/remote-cluster-id"
REPLICATION_REQUESTED = "liqo.io/replication"
REPLICATION_DESTINATION = "liqo.io/remoteID"
REPLICATION_ORIGIN = "liqo.io/originID"
REPLICATION_STATUS = "liqo.io/replicated"
LOCAL_RESOURCE_OWNERSHIP = "liqo.io/ownership"
MANAGED_BY = "liqo.io/managed-by"
MANAGED_BY_SHADOWPOD = "shadowpod"
K8S_MANAGED_BY = "app.kubernetes.io/managed-by"
NS_MANAGED_BY_MAP = "liqo.io/managed-by-namespace-map"
NS_ORIGINAL_NAME = "liqo.io/original-name"
CREATE_VIRTUAL_NODE = "liqo.io/create-virtual-node"
ORIGIN = "offloading.liqo.io/origin"
DESTINATION = "offloading.liqo.io/destination"
POOL_LABEL = "multicloud.io/pool"
# Emulator-only marker on objects it made, so a restart knows what it may tidy up.
EMULATOR_MARK = "emulator.vkbridge.test/managed"

VK_REMOTE_CLUSTERROLE = "liqo-virtual-kubelet-remote"
WEBHOOK_NAME = "shadowpod.validate.liqo.io"
OFFLOADING_NAME = "offloading"
TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

# Provider defaults (Helm offloading.defaultNodeResources), LIQO §6.1.
DEFAULT_GRANT: dict[str, str] = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}


def consumer_tenant_ns(slug: str) -> str:
    return f"liqo-tenant-{slug}"


def pool_tenant_ns(consumer_id: str) -> str:
    return f"liqo-tenant-{consumer_id}"


def kubeconfig_secret(slug: str) -> str:
    return f"kubeconfig-resourceslice-{slug}"


def remote_namespace(local_ns: str, consumer_id: str) -> str:
    """DefaultName strategy: <ns>-<consumer cluster id>."""
    return f"{local_ns}-{consumer_id}"


def identity_cn(resource_slice_name: str, consumer_id: str) -> str:
    """CN of a ResourceSlice identity: <rs name>-<hex(sha256(consumer id))[:6 bytes]>.

    Liqo v1.2 pkg/utils/authentication/csr.go CommonNameResourceSliceCSR (12 hex characters);
    the Organization is the consumer cluster id (OrganizationResourceSliceCSR).
    """
    return f"{resource_slice_name}-{hashlib.sha256(consumer_id.encode()).digest()[:6].hex()}"


def replication_labels(destination: str) -> dict[str, str]:
    """What liqoctl/Liqo put on a consumer object the CRD replicator must send to ``destination``."""
    return {
        REMOTE_CLUSTER_ID: destination,
        REPLICATION_REQUESTED: "true",
        REPLICATION_DESTINATION: destination,
    }


def labels_for_remote(labels: dict[str, str], origin: str) -> dict[str, str]:
    """crdReplicator mutateLabelsForRemote: the copy on the provider names its origin."""
    out = dict(labels)
    out[REPLICATION_REQUESTED] = "false"
    out[REPLICATION_STATUS] = "true"
    out[REPLICATION_ORIGIN] = origin
    out[REMOTE_CLUSTER_ID] = origin
    out.pop(LOCAL_RESOURCE_OWNERSHIP, None)
    return out
