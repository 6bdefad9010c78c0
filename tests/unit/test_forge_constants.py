"""Pins the wire-level strings shared with Liqo v1.2 (a typo here breaks compatibility silently)."""

from __future__ import annotations

import pytest

from reflectors.forge import constants as c


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (c.FIELD_MANAGER, "reflection.liqo.io"),
        (c.SHADOWPOD_API_VERSION, "offloading.liqo.io/v1beta1"),
        (c.SHADOWPOD_KIND, "ShadowPod"),
        (c.ORIGIN_LABEL, "offloading.liqo.io/origin"),
        (c.DESTINATION_LABEL, "offloading.liqo.io/destination"),
        (c.NODENAME_LABEL, "offloading.liqo.io/nodename"),
        (c.CREATOR_USER_LABEL, "liqo.io/creator-user"),
        (c.MANAGED_BY_LABEL, "liqo.io/managed-by"),
        (c.LOCAL_POD_LABEL, "liqo.io/shadowPod"),
        (c.REMOTE_UNAVAILABLE_LABEL, "liqo.io/remote-unavailable"),
        (c.TYPE_LABEL, "liqo.io/type"),
        (c.TYPE_VIRTUAL_NODE, "virtual-node"),
        (c.REMOTE_CLUSTER_ID_LABEL, "liqo.io/remote-cluster-id"),
        (c.VIRTUAL_NODE_TOLERATION_KEY, "virtual-node.liqo.io/not-allowed"),
        (c.STORAGE_AVAILABLE_LABEL, "storage.liqo.io/available"),
        (c.TENANT_NAMESPACE_PREFIX, "liqo-tenant-"),
        (c.SKIP_REFLECTION_ANNOTATION, "liqo.io/skip-reflection"),
        (c.ALLOW_REFLECTION_ANNOTATION, "liqo.io/allow-reflection"),
        (c.APISERVER_SUPPORT_ANNOTATION, "liqo.io/api-server-support"),
        (c.REMOTE_SERVICE_ACCOUNT_NAME_ANNOTATION, "liqo.io/remote-service-account-name"),
        (c.REMOTE_RUNTIME_CLASS_NAME_ANNOTATION, "liqo.io/remote-runtime-class-name"),
        (c.ANTI_AFFINITY_PRESET_ANNOTATION, "liqo.io/anti-affinity-preset"),
        (c.ANTI_AFFINITY_LABELS_ANNOTATION, "liqo.io/anti-affinity-labels"),
        (c.SA_SECRET_FOR_POD_NAME_KEY, "offloading.liqo.io/service-account-for-pod-name"),
        (c.SA_SECRET_FOR_SERVICE_ACCOUNT_KEY, "offloading.liqo.io/service-account-name"),
        (c.SA_SECRET_FOR_POD_UID_KEY, "offloading.liqo.io/service-account-for-pod-uid"),
        (c.SA_SECRET_EXPIRATION_KEY, "offloading.liqo.io/service-account-expiration"),
        (c.ROOT_CA_CONFIGMAP, "kube-root-ca.crt"),
        (c.EXTEND_POOL_LABEL, "multicloud.io/pool"),
        (c.EXTEND_REFLECTION_TOUCH_ANNOTATION, "multicloud.io/reflection-touch"),
        (c.REASON_OFFLOADING_BACKOFF, "OffloadingBackOff"),
        (c.REASON_OFFLOADING_ABORTED, "OffloadingAborted"),
        (c.REASON_REMOTE_POD_TERMINATED, "RemotePodTerminated"),
        (c.EVENT_SUCCESSFUL_REFLECTION, "SuccessfulReflection"),
        (c.EVENT_FAILED_REFLECTION, "FailedReflection"),
        (c.EVENT_FAILED_DELETION, "FailedDeletion"),
        (c.EVENT_REFLECTION_DISABLED, "ReflectionDisabled"),
        (c.EVENT_SUCCESSFUL_SA_TOKENS_REFLECTION, "SuccessfulSATokensReflection"),
        (c.EVENT_FAILED_SA_TOKENS_REFLECTION, "FailedSATokensReflection"),
        (c.POD_REFLECTION_COMPONENT, "liqo-pod-reflection"),
        (c.event_component("ServiceAccount"), "liqo-serviceaccount-reflection"),
    ],
    ids=lambda v: str(v),
)
def test_wire_value_matches_liqo(value: str, expected: str) -> None:
    assert value == expected


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        pytest.param(
            c.successful_reflection_msg("pool"), 'Successfully reflected object to cluster "pool"', id="ok"
        ),
        pytest.param(
            c.failed_reflection_msg("pool", "boom"),
            'Error reflecting object to cluster "pool": boom',
            id="failed",
        ),
        pytest.param(
            c.failed_status_reflection_msg("pool", "boom"),
            'Error reflecting object status back from cluster "pool": boom',
            id="status-failed",
        ),
        pytest.param(
            c.failed_reflection_already_exists_msg("pool"),
            'Error reflecting object to cluster "pool": remote object already exists',
            id="already-exists",
        ),
        pytest.param(c.failed_deletion_msg("x"), "Error deleting local object: x", id="deletion"),
        pytest.param(
            c.object_reflection_disabled_msg("pool", "DenyList"),
            'Reflection to cluster "pool" disabled for the current object (policy: "DenyList")',
            id="object-disabled",
        ),
        pytest.param(
            c.sa_reflection_disabled_msg("pool"),
            'Reflection to cluster "pool" disabled for secrets holding service account tokens',
            id="sa-disabled",
        ),
    ],
)
def test_event_messages_match_liqo(message: str, expected: str) -> None:
    assert message == expected


def test_go_quote_escapes_like_go() -> None:
    assert c.go_quote('a"b\\c') == '"a\\"b\\\\c"'
