"""Wire-level names shared with Liqo v1.2 (LIQO §0, §3, §4, §8).

These strings are a compatibility contract: the Liqo provider side, the consumer controller-manager and
existing remote objects select on them, so they must match Liqo byte for byte.
"""

from __future__ import annotations

import json
from typing import Final

# --- API identity --------------------------------------------------------------------------------
FIELD_MANAGER: Final = "reflection.liqo.io"
SHADOWPOD_GROUP: Final = "offloading.liqo.io"
SHADOWPOD_VERSION: Final = "v1beta1"
SHADOWPOD_API_VERSION: Final = f"{SHADOWPOD_GROUP}/{SHADOWPOD_VERSION}"
SHADOWPOD_KIND: Final = "ShadowPod"

# --- Labels on reflected (remote) objects --------------------------------------------------------
ORIGIN_LABEL: Final = "offloading.liqo.io/origin"
DESTINATION_LABEL: Final = "offloading.liqo.io/destination"
NODENAME_LABEL: Final = "offloading.liqo.io/nodename"
# Set by the provider ShadowPod webhook on create, re-asserted on update (a label, not an annotation).
CREATOR_USER_LABEL: Final = "liqo.io/creator-user"
# Set by the provider on the Pod it creates for a ShadowPod.
MANAGED_BY_LABEL: Final = "liqo.io/managed-by"
MANAGED_BY_SHADOWPOD: Final = "shadowpod"

# --- Labels on local pods ------------------------------------------------------------------------
LOCAL_POD_LABEL: Final = "liqo.io/shadowPod"
LOCAL_POD_LABEL_VALUE: Final = "true"
REMOTE_UNAVAILABLE_LABEL: Final = "liqo.io/remote-unavailable"
REMOTE_UNAVAILABLE_VALUE: Final = "true"

# --- Node / cluster identity labels --------------------------------------------------------------
TYPE_LABEL: Final = "liqo.io/type"
TYPE_VIRTUAL_NODE: Final = "virtual-node"
# What upstream cluster-autoscaler reads to leave a node out of its accounting (its
# VirtualKubeletNodeFilter); Liqo's node has it after v1.2 (liqotech/liqo#3325).
VIRTUAL_KUBELET_TYPE_LABEL: Final = "type"
VIRTUAL_KUBELET_TYPE: Final = "virtual-kubelet"
REMOTE_CLUSTER_ID_LABEL: Final = "liqo.io/remote-cluster-id"
VIRTUAL_NODE_TOLERATION_KEY: Final = "virtual-node.liqo.io/not-allowed"
STORAGE_AVAILABLE_LABEL: Final = "storage.liqo.io/available"

# --- vkbridge's own marks (not Liqo's; listed in docs/compatibility.md) ----------------------------
# The UID of the local pod a ShadowPod was made for: a same-name replacement pod (StatefulSet web-0
# after a force delete) must not adopt the old ShadowPod, and the grant charges by UID.
LOCAL_POD_UID_ANNOTATION: Final = "vkbridge.multicloud.io/local-pod-uid"
# Warning event on a pod whose `liqo.io/api-server-support: remote` is ignored (support is off).
EVENT_APISERVER_SUPPORT_IGNORED: Final = "APIServerSupportIgnored"
# Label prefix by which each virtual node marks the Secret/ConfigMap copies it needs
# (``users.vkbridge.multicloud.io/<node name>: "true"``): copies are shared by every node that maps the
# same remote namespace, so a node deletes a copy only when no other node's mark remains.
CONFIG_USER_LABEL_PREFIX: Final = "users.vkbridge.multicloud.io/"

# --- Per-object annotations understood by the forge ----------------------------------------------
SKIP_REFLECTION_ANNOTATION: Final = "liqo.io/skip-reflection"
ALLOW_REFLECTION_ANNOTATION: Final = "liqo.io/allow-reflection"
APISERVER_SUPPORT_ANNOTATION: Final = "liqo.io/api-server-support"
APISERVER_SUPPORT_ANNOTATION_DISABLED: Final = "disabled"
APISERVER_SUPPORT_ANNOTATION_REMOTE: Final = "remote"
REMOTE_SERVICE_ACCOUNT_NAME_ANNOTATION: Final = "liqo.io/remote-service-account-name"
REMOTE_RUNTIME_CLASS_NAME_ANNOTATION: Final = "liqo.io/remote-runtime-class-name"
ANTI_AFFINITY_PRESET_ANNOTATION: Final = "liqo.io/anti-affinity-preset"
ANTI_AFFINITY_PRESET_SOFT: Final = "soft"
ANTI_AFFINITY_PRESET_HARD: Final = "hard"
ANTI_AFFINITY_PRESET_PROPAGATE: Final = "propagate"
ANTI_AFFINITY_LABELS_ANNOTATION: Final = "liqo.io/anti-affinity-labels"
LIQO_RUNTIME_CLASS_NAME: Final = "liqo"

# --- Namespace mapping ---------------------------------------------------------------------------
TENANT_NAMESPACE_PREFIX: Final = "liqo-tenant-"

# --- Service account tokens (TokenAPI mode) ------------------------------------------------------
SA_SECRET_FOR_POD_NAME_KEY: Final = "offloading.liqo.io/service-account-for-pod-name"
SA_SECRET_FOR_SERVICE_ACCOUNT_KEY: Final = "offloading.liqo.io/service-account-name"
SA_SECRET_FOR_POD_UID_KEY: Final = "offloading.liqo.io/service-account-for-pod-uid"
SA_SECRET_EXPIRATION_KEY: Final = "offloading.liqo.io/service-account-expiration"
SERVICE_ACCOUNT_TOKEN_KEY: Final = "token"
SERVICE_ACCOUNT_TOKEN_SECRET_TYPE: Final = "kubernetes.io/service-account-token"
SERVICE_ACCOUNT_VOLUME_PREFIX: Final = "kube-api-access-"
KUBERNETES_API_SERVICE: Final = "kubernetes.default"
DEFAULT_KUBERNETES_SERVICE_PORT: Final = "443"
ROOT_CA_CONFIGMAP: Final = "kube-root-ca.crt"

# --- Well-known Kubernetes labels used by the anti-affinity presets ------------------------------
HOSTNAME_LABEL: Final = "kubernetes.io/hostname"
CONTROLLER_REVISION_HASH_LABEL: Final = "controller-revision-hash"
POD_TEMPLATE_HASH_LABEL: Final = "pod-template-hash"
STATEFULSET_POD_NAME_LABEL: Final = "statefulset.kubernetes.io/pod-name"

# --- Multicloud Extend ---------------------------------------------------------------------------
# Label and NoSchedule taint of the virtual node (GUIDE §4); the label users should select on.
EXTEND_POOL_LABEL: Final = "multicloud.io/pool"
# Annotation the mc-reflection-kick CronJob bumps to re-queue a pod (GUIDE §7.4). Only a trigger: never
# reflected, otherwise every kick would cost a ShadowPod update.
EXTEND_REFLECTION_TOUCH_ANNOTATION: Final = "multicloud.io/reflection-touch"

# --- Pod status reasons --------------------------------------------------------------------------
REASON_OFFLOADING_BACKOFF: Final = "OffloadingBackOff"
REASON_OFFLOADING_ABORTED: Final = "OffloadingAborted"
REASON_REMOTE_POD_TERMINATED: Final = "RemotePodTerminated"

# --- Reflection policies -------------------------------------------------------------------------
POLICY_DENY_LIST: Final = "DenyList"
POLICY_ALLOW_LIST: Final = "AllowList"

# --- Event reasons (LIQO §8) ---------------------------------------------------------------------
EVENT_SUCCESSFUL_REFLECTION: Final = "SuccessfulReflection"
EVENT_FAILED_REFLECTION: Final = "FailedReflection"
EVENT_FAILED_DELETION: Final = "FailedDeletion"
EVENT_REFLECTION_DISABLED: Final = "ReflectionDisabled"
EVENT_SUCCESSFUL_SA_TOKENS_REFLECTION: Final = "SuccessfulSATokensReflection"
EVENT_FAILED_SA_TOKENS_REFLECTION: Final = "FailedSATokensReflection"
EVENT_TYPE_NORMAL: Final = "Normal"
EVENT_TYPE_WARNING: Final = "Warning"

# Reflector names, as used in event components and metric labels.
REFLECTOR_POD: Final = "Pod"
REFLECTOR_EVENT: Final = "Event"


def event_component(reflector: str) -> str:
    """Event source component of a reflector, e.g. ``liqo-pod-reflection``."""
    return f"liqo-{reflector.lower()}-reflection"


POD_REFLECTION_COMPONENT: Final = event_component(REFLECTOR_POD)


def go_quote(value: object) -> str:
    """Approximate Go's ``%q`` so messages read exactly like Liqo's."""
    return json.dumps(str(value), ensure_ascii=False)


def successful_reflection_msg(remote_cluster_id: str) -> str:
    return f"Successfully reflected object to cluster {go_quote(remote_cluster_id)}"


def failed_reflection_msg(remote_cluster_id: str, err: object) -> str:
    return f"Error reflecting object to cluster {go_quote(remote_cluster_id)}: {err}"


def failed_status_reflection_msg(remote_cluster_id: str, err: object) -> str:
    return f"Error reflecting object status back from cluster {go_quote(remote_cluster_id)}: {err}"


def failed_reflection_already_exists_msg(remote_cluster_id: str) -> str:
    return f"Error reflecting object to cluster {go_quote(remote_cluster_id)}: remote object already exists"


def failed_deletion_msg(err: object) -> str:
    return f"Error deleting local object: {err}"


def object_reflection_disabled_msg(remote_cluster_id: str, policy: str) -> str:
    return (
        f"Reflection to cluster {go_quote(remote_cluster_id)} disabled for the current object "
        f"(policy: {go_quote(policy)})"
    )


def sa_reflection_disabled_msg(remote_cluster_id: str) -> str:
    cluster = go_quote(remote_cluster_id)
    return f"Reflection to cluster {cluster} disabled for secrets holding service account tokens"
