"""Table tests for reflectors.forge.shadowpod (LIQO §4.4, §4.5)."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import pytest

from reflectors.forge import constants as c
from reflectors.forge.shadowpod import (
    COPIED_SPEC_FIELDS,
    ForgeError,
    _affinity_mutator,
    controlling_shadow_uid,
    effective_apiserver_support,
    forge_local_offloaded_label,
    forge_shadowpod,
    ignored_apiserver_override,
    is_stale_shadow,
    local_pod_uid_of,
    needs_update,
    remote_pod_of,
)

LOCAL_ID = "c-1a2b3c4d"
REMOTE_ID = "c0123456789ab"
NODE = "c0123456789ab"
REMOTE_NS = "team-c-1a2b3c4d"
RENAMED_CA = "kube-root-ca.crt.c-1a2"


def make_pod(**spec: Any) -> dict[str, Any]:
    base_spec: dict[str, Any] = {
        "nodeName": NODE,
        "containers": [{"name": "app", "image": "nginx:1.27"}],
    }
    base_spec.update(spec)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-0",
            "namespace": "team",
            "uid": "local-uid",
            "resourceVersion": "42",
            "labels": {"app": "web", c.LOCAL_POD_LABEL: "true"},
            "annotations": {"team.example/owner": "alice"},
        },
        "spec": base_spec,
        "status": {"phase": "Pending"},
    }


def forge(pod: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "remote_namespace": REMOTE_NS,
        "local_cluster_id": LOCAL_ID,
        "remote_cluster_id": REMOTE_ID,
        "node_name": NODE,
        "apiserver_support": "disabled",
        "offloading_patch": None,
        "existing": None,
    }
    args.update(kwargs)
    return forge_shadowpod(pod, **args)


def pod_spec(shadow: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = shadow["spec"]["pod"]
    return spec


def with_meta(
    pod: dict[str, Any], labels: dict[str, str] | None = None, annotations: dict[str, str] | None = None
) -> dict[str, Any]:
    if labels is not None:
        pod["metadata"]["labels"] = labels
    if annotations is not None:
        pod["metadata"]["annotations"] = annotations
    return pod


# --- metadata -----------------------------------------------------------------------------------


def test_creation_body_is_a_shadowpod_named_like_the_local_pod_in_the_remote_namespace() -> None:
    shadow = forge(make_pod())
    assert shadow["apiVersion"] == "offloading.liqo.io/v1beta1"
    assert shadow["kind"] == "ShadowPod"
    assert shadow["metadata"]["name"] == "web-0"
    assert shadow["metadata"]["namespace"] == REMOTE_NS
    assert set(shadow["metadata"]) == {"name", "namespace", "labels", "annotations"}


@pytest.mark.parametrize(
    ("local_labels", "patch", "expected"),
    [
        pytest.param(
            {"app": "web", c.LOCAL_POD_LABEL: "true"},
            None,
            {"app": "web"},
            id="offloaded-marker-label-is-not-reflected",
        ),
        pytest.param(
            {"app": "web", c.REMOTE_UNAVAILABLE_LABEL: "true"},
            None,
            {"app": "web"},
            id="remote-unavailable-label-is-local-only",
        ),
        pytest.param(
            {"app": "web", "secret-tier": "gold"},
            {"labelsNotReflected": ["secret-tier"]},
            {"app": "web"},
            id="labels-not-reflected-are-dropped",
        ),
        pytest.param(
            {"app": "web", c.ORIGIN_LABEL: "evil", c.DESTINATION_LABEL: "evil", c.NODENAME_LABEL: "other"},
            None,
            {"app": "web"},
            id="pod-cannot-overwrite-origin-destination-nodename",
        ),
        pytest.param(
            {"app": "web"},
            {"labelsNotReflected": [c.ORIGIN_LABEL, c.DESTINATION_LABEL, c.NODENAME_LABEL]},
            {"app": "web"},
            id="labels-not-reflected-cannot-remove-reflection-labels",
        ),
        pytest.param(None, None, {}, id="pod-without-labels"),
    ],
)
def test_labels(
    local_labels: dict[str, str] | None, patch: dict[str, Any] | None, expected: dict[str, str]
) -> None:
    pod = make_pod()
    pod["metadata"]["labels"] = local_labels
    labels = forge(pod, offloading_patch=patch)["metadata"]["labels"]
    assert labels == {
        **expected,
        c.ORIGIN_LABEL: LOCAL_ID,
        c.DESTINATION_LABEL: REMOTE_ID,
        c.NODENAME_LABEL: NODE,
    }


@pytest.mark.parametrize(
    ("local_annotations", "patch", "expected"),
    [
        pytest.param({"a": "1", "b": "2"}, None, {"a": "1", "b": "2"}, id="annotations-are-copied"),
        pytest.param(
            {"a": "1", "metallb.universe.tf/ip": "x"},
            {"annotationsNotReflected": ["metallb.universe.tf/ip"]},
            {"a": "1"},
            id="annotations-not-reflected-are-dropped",
        ),
        pytest.param(
            {"a": "1", c.EXTEND_REFLECTION_TOUCH_ANNOTATION: "2026-11-29T10:00:00Z"},
            None,
            {"a": "1"},
            id="reflection-touch-kick-is-never-reflected",
        ),
        pytest.param(None, None, {}, id="pod-without-annotations"),
    ],
)
def test_annotations(
    local_annotations: dict[str, str] | None, patch: dict[str, Any] | None, expected: dict[str, str]
) -> None:
    pod = make_pod()
    pod["metadata"]["annotations"] = local_annotations
    annotations = forge(pod, offloading_patch=patch)["metadata"]["annotations"]
    assert annotations == {**expected, c.LOCAL_POD_UID_ANNOTATION: "local-uid"}


# --- spec: copied, dropped, forced --------------------------------------------------------------

COPIED_VALUES: dict[str, Any] = {
    "containers": [{"name": "app", "image": "busybox:1.36", "resources": {"requests": {"cpu": "100m"}}}],
    "initContainers": [{"name": "init", "image": "busybox:1.36"}],
    "resources": {"requests": {"cpu": "2", "memory": "1Gi"}, "limits": {"memory": "1Gi"}},
    "volumes": [{"name": "data", "emptyDir": {}}],
    "activeDeadlineSeconds": 600,
    "dnsConfig": {"nameservers": ["1.1.1.1"]},
    "dnsPolicy": "None",
    "enableServiceLinks": False,
    "hostAliases": [{"ip": "10.0.0.1", "hostnames": ["db"]}],
    "hostname": "web",
    "hostUsers": False,
    "imagePullSecrets": [{"name": "regcred"}],
    "restartPolicy": "Never",
    "securityContext": {"runAsNonRoot": True},
    "setHostnameAsFQDN": True,
    "shareProcessNamespace": True,
    "subdomain": "web",
    "terminationGracePeriodSeconds": 5,
    "topologySpreadConstraints": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "ScheduleAnyway"}
    ],
}


@pytest.mark.parametrize("field", [f for f in COPIED_SPEC_FIELDS if f != "serviceAccountName"])
def test_copied_field_is_reflected_verbatim(field: str) -> None:
    spec = pod_spec(forge(make_pod(**{field: copy.deepcopy(COPIED_VALUES[field])})))
    assert spec[field] == COPIED_VALUES[field]


def test_every_copied_field_has_a_table_value() -> None:
    assert set(COPIED_SPEC_FIELDS) - {"serviceAccountName"} == set(COPIED_VALUES)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("nodeName", NODE, id="nodeName"),
        pytest.param("nodeSelector", {"multicloud.io/pool": NODE}, id="nodeSelector"),
        pytest.param("affinity", {"nodeAffinity": {"x": 1}}, id="affinity"),
        pytest.param("schedulerName", "custom", id="schedulerName"),
        pytest.param("priority", 1000, id="priority"),
        pytest.param("priorityClassName", "high", id="priorityClassName"),
        pytest.param("preemptionPolicy", "Never", id="preemptionPolicy"),
        pytest.param("runtimeClassName", "liqo", id="runtimeClassName-liqo"),
        pytest.param("overhead", {"cpu": "10m"}, id="overhead"),
        pytest.param("ephemeralContainers", [{"name": "dbg", "image": "busybox"}], id="ephemeralContainers"),
        pytest.param("os", {"name": "linux"}, id="os"),
        pytest.param("schedulingGates", [{"name": "gate"}], id="schedulingGates"),
        pytest.param("resourceClaims", [{"name": "gpu"}], id="resourceClaims"),
        pytest.param("readinessGates", [{"conditionType": "example.com/ready"}], id="readinessGates"),
        pytest.param("serviceAccount", "builder", id="deprecated-serviceAccount"),
        pytest.param("serviceAccountName", "builder", id="serviceAccountName-cleared"),
        pytest.param("nodeSelector", {}, id="empty-nodeSelector"),
    ],
)
def test_dropped_field_is_absent(field: str, value: Any) -> None:
    assert field not in pod_spec(forge(make_pod(**{field: value})))


def test_automount_service_account_token_is_forced_off() -> None:
    spec = pod_spec(forge(make_pod(automountServiceAccountToken=True)))
    assert spec["automountServiceAccountToken"] is False


@pytest.mark.parametrize("field", ["hostNetwork", "hostIPC", "hostPID"], ids=lambda f: f"{f}-off-by-absence")
def test_host_namespaces_are_off_by_absence_as_on_liqos_shadowpod(field: str) -> None:
    """Liqo forces them false in omitempty Go fields: its ShadowPod has no such key, and neither has ours."""
    assert field not in pod_spec(forge(make_pod(**{field: True})))


# --- tolerations --------------------------------------------------------------------------------

POOL_TOLERATION = {"key": "multicloud.io/pool", "operator": "Equal", "value": NODE, "effect": "NoSchedule"}
VK_TOLERATION = {"key": c.VIRTUAL_NODE_TOLERATION_KEY, "operator": "Exists", "effect": "NoExecute"}
PATCH_TOLERATION = {"key": "pool.example/spot", "operator": "Exists"}


@pytest.mark.parametrize(
    ("local", "patch", "expected"),
    [
        pytest.param(
            [POOL_TOLERATION, VK_TOLERATION], None, [POOL_TOLERATION], id="virtual-node-toleration-removed"
        ),
        pytest.param(
            [POOL_TOLERATION],
            {"tolerations": [PATCH_TOLERATION]},
            [POOL_TOLERATION, PATCH_TOLERATION],
            id="offloading-patch-tolerations-appended-after-local",
        ),
        pytest.param([VK_TOLERATION], None, None, id="no-tolerations-left-means-no-field"),
        pytest.param(None, {"tolerations": [PATCH_TOLERATION]}, [PATCH_TOLERATION], id="patch-only"),
    ],
)
def test_tolerations(local: Any, patch: Any, expected: Any) -> None:
    spec = pod_spec(forge(make_pod(tolerations=local), offloading_patch=patch))
    assert spec.get("tolerations") == expected


# --- root CA rename and service account tokens --------------------------------------------------


def kube_api_access_volume(name: str = "kube-api-access-abcde") -> dict[str, Any]:
    return {
        "name": name,
        "projected": {
            "sources": [
                {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                {"configMap": {"name": c.ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                {"downwardAPI": {"items": [{"path": "namespace"}]}},
            ]
        },
    }


def test_root_ca_is_renamed_in_projected_volumes() -> None:
    spec = pod_spec(forge(make_pod(volumes=[kube_api_access_volume()])))
    assert spec["volumes"][0]["projected"]["sources"][0]["configMap"]["name"] == RENAMED_CA


@pytest.mark.parametrize(
    ("spec", "path"),
    [
        pytest.param(
            {"volumes": [{"name": "ca", "configMap": {"name": c.ROOT_CA_CONFIGMAP}}]},
            ("volumes", 0, "configMap", "name"),
            id="plain-configmap-volume",
        ),
        pytest.param(
            {
                "containers": [
                    {
                        "name": "app",
                        "env": [
                            {
                                "name": "CA",
                                "valueFrom": {
                                    "configMapKeyRef": {"name": c.ROOT_CA_CONFIGMAP, "key": "ca.crt"}
                                },
                            }
                        ],
                    }
                ]
            },
            ("containers", 0, "env", 0, "valueFrom", "configMapKeyRef", "name"),
            id="env-configmap-key-ref",
        ),
        pytest.param(
            {
                "initContainers": [
                    {"name": "init", "envFrom": [{"configMapRef": {"name": c.ROOT_CA_CONFIGMAP}}]}
                ]
            },
            ("initContainers", 0, "envFrom", 0, "configMapRef", "name"),
            id="init-container-env-from",
        ),
    ],
)
def test_root_ca_is_renamed_in_every_reference(spec: dict[str, Any], path: tuple[Any, ...]) -> None:
    node: Any = pod_spec(forge(make_pod(**spec)))
    for step in path:
        node = node[step]
    assert node == RENAMED_CA


def test_other_configmaps_keep_their_names() -> None:
    volume = {"name": "cfg", "projected": {"sources": [{"configMap": {"name": "app-config"}}]}}
    spec = pod_spec(forge(make_pod(volumes=[volume, {"name": "c2", "configMap": {"name": "other"}}])))
    assert spec["volumes"][0]["projected"]["sources"][0]["configMap"]["name"] == "app-config"
    assert spec["volumes"][1]["configMap"]["name"] == "other"


def token_volume(name: str, path: str = "token") -> dict[str, Any]:
    return {
        "name": name,
        "projected": {"sources": [{"serviceAccountToken": {"audience": "vault", "path": path}}]},
    }


@pytest.mark.parametrize(
    ("mode", "annotations", "volume", "legacy_secret", "expected_sources"),
    [
        pytest.param("disabled", {}, kube_api_access_volume(), "", 2, id="disabled-removes-token-sources"),
        pytest.param(
            "legacy",
            {},
            token_volume("vault-token"),
            "builder-token-x",
            [],
            id="legacy-removes-non-kube-api-access",
        ),
        pytest.param(
            "legacy",
            {},
            token_volume("kube-api-access-xyz"),
            "builder-token-x",
            [{"secret": {"name": "builder-token-x", "items": [{"key": "token", "path": "token"}]}}],
            id="legacy-replaces-kube-api-access-with-sa-secret",
        ),
        pytest.param(
            "tokenapi",
            {},
            token_volume("vault-token", "vault/token"),
            "",
            [
                {
                    "secret": {
                        "name": "web-0-token",
                        "items": [
                            {
                                "key": "vault-token-" + hashlib.sha256(b"vault/token").hexdigest()[:6],
                                "path": "vault/token",
                            }
                        ],
                    }
                }
            ],
            id="tokenapi-replaces-token-with-pod-token-secret",
        ),
        pytest.param(
            "tokenapi",
            {c.APISERVER_SUPPORT_ANNOTATION: "disabled"},
            token_volume("vault-token"),
            "",
            [],
            id="per-pod-disabled-annotation-overrides-mode",
        ),
        pytest.param(
            "tokenapi",
            {c.APISERVER_SUPPORT_ANNOTATION: "remote"},
            token_volume("vault-token"),
            "",
            [{"serviceAccountToken": {"audience": "vault", "path": "token"}}],
            id="per-pod-remote-annotation-keeps-token-source",
        ),
        pytest.param(
            "disabled",
            {c.APISERVER_SUPPORT_ANNOTATION: "remote"},
            token_volume("vault-token"),
            "",
            [],
            id="remote-annotation-ignored-while-api-server-support-is-off",
        ),
    ],
)
def test_service_account_token_sources(
    mode: str, annotations: dict[str, str], volume: dict[str, Any], legacy_secret: str, expected_sources: Any
) -> None:
    pod = with_meta(make_pod(volumes=[volume], serviceAccountName="builder"), annotations=annotations)
    spec = pod_spec(forge(pod, apiserver_support=mode, legacy_sa_secret_name=legacy_secret))
    sources = spec["volumes"][0]["projected"]["sources"]
    if isinstance(expected_sources, int):
        assert len(sources) == expected_sources
        assert all("serviceAccountToken" not in s for s in sources)
    else:
        assert sources == expected_sources


def test_remote_mode_keeps_the_pool_root_ca() -> None:
    pod = with_meta(
        make_pod(volumes=[kube_api_access_volume()]), annotations={c.APISERVER_SUPPORT_ANNOTATION: "remote"}
    )
    sources = pod_spec(forge(pod, apiserver_support="tokenapi"))["volumes"][0]["projected"]["sources"]
    assert sources[1]["configMap"]["name"] == c.ROOT_CA_CONFIGMAP


def test_legacy_mode_without_secret_name_is_a_forge_error() -> None:
    with pytest.raises(ForgeError, match="builder"):
        forge(
            make_pod(volumes=[kube_api_access_volume()], serviceAccountName="builder"),
            apiserver_support="legacy",
        )


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        pytest.param("Disabled", "disabled", id="case-insensitive-disabled"),
        pytest.param("TokenAPI", "tokenapi", id="case-insensitive-tokenapi"),
        pytest.param("legacy", "legacy", id="legacy"),
    ],
)
def test_effective_apiserver_support_parses_modes(mode: str, expected: str) -> None:
    assert effective_apiserver_support(mode, {}) == expected


def test_unknown_apiserver_support_mode_is_rejected() -> None:
    with pytest.raises(ValueError, match="bogus"):
        forge(make_pod(), apiserver_support="bogus")


# --- API server env and host aliases ------------------------------------------------------------


def env_of(shadow: dict[str, Any], container: int = 0, kind: str = "containers") -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = pod_spec(shadow)[kind][container].get("env", [])
    return env


def env_list(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"name": name, "value": value} for name, value in pairs]


# The expected service environment, spelled out (not computed as the forge computes it).
ENV_DEFAULT_443 = env_list(
    ("KUBERNETES_SERVICE_HOST", "kubernetes.default"), ("KUBERNETES_SERVICE_PORT", "443"),
    ("KUBERNETES_PORT", "tcp://kubernetes.default:443"), ("KUBERNETES_PORT_443_TCP", "tcp://kubernetes.default:443"),
    ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"), ("KUBERNETES_PORT_443_TCP_ADDR", "kubernetes.default"),
    ("KUBERNETES_PORT_443_TCP_PORT", "443"),
)  # fmt: skip
ENV_DEFAULT_6443 = env_list(
    ("KUBERNETES_SERVICE_HOST", "kubernetes.default"), ("KUBERNETES_SERVICE_PORT", "6443"),
    ("KUBERNETES_PORT", "tcp://kubernetes.default:6443"), ("KUBERNETES_PORT_6443_TCP", "tcp://kubernetes.default:6443"),
    ("KUBERNETES_PORT_6443_TCP_PROTO", "tcp"), ("KUBERNETES_PORT_6443_TCP_ADDR", "kubernetes.default"),
    ("KUBERNETES_PORT_6443_TCP_PORT", "6443"),
)  # fmt: skip
ENV_HOME_8443 = env_list(
    ("KUBERNETES_SERVICE_HOST", "api.example.com"), ("KUBERNETES_SERVICE_PORT", "8443"),
    ("KUBERNETES_PORT", "tcp://api.example.com:8443"), ("KUBERNETES_PORT_8443_TCP", "tcp://api.example.com:8443"),
    ("KUBERNETES_PORT_8443_TCP_PROTO", "tcp"), ("KUBERNETES_PORT_8443_TCP_ADDR", "api.example.com"),
    ("KUBERNETES_PORT_8443_TCP_PORT", "8443"),
)  # fmt: skip
ENV_IPV6_443 = env_list(
    ("KUBERNETES_SERVICE_HOST", "fd00::1"), ("KUBERNETES_SERVICE_PORT", "443"),
    ("KUBERNETES_PORT", "tcp://[fd00::1]:443"), ("KUBERNETES_PORT_443_TCP", "tcp://[fd00::1]:443"),
    ("KUBERNETES_PORT_443_TCP_PROTO", "tcp"), ("KUBERNETES_PORT_443_TCP_ADDR", "fd00::1"),
    ("KUBERNETES_PORT_443_TCP_PORT", "443"),
)  # fmt: skip


SA_ENV = {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}}


@pytest.mark.parametrize(
    ("mode", "kwargs", "expected_tail"),
    [
        pytest.param("tokenapi", {}, ENV_DEFAULT_443, id="tokenapi-default-service"),
        pytest.param(
            "legacy",
            {"kubernetes_service_port": "6443", "legacy_sa_secret_name": "s"},
            ENV_DEFAULT_6443,
            id="legacy-uses-local-service-port",
        ),
        pytest.param(
            "tokenapi",
            {"home_apiserver_host": "api.example.com", "home_apiserver_port": "8443"},
            ENV_HOME_8443,
            id="home-apiserver-override-needs-both",
        ),
        pytest.param(
            "tokenapi",
            {"home_apiserver_host": "api.example.com"},
            ENV_DEFAULT_443,
            id="home-host-alone-is-ignored",
        ),
        pytest.param(
            "tokenapi",
            {"home_apiserver_host": "fd00::1", "home_apiserver_port": "443"},
            ENV_IPV6_443,
            id="ipv6-host-is-bracketed",
        ),
    ],
)
def test_apiserver_env_is_appended(
    mode: str, kwargs: dict[str, Any], expected_tail: list[dict[str, str]]
) -> None:
    pod = make_pod(
        serviceAccountName="builder",
        containers=[{"name": "app", "env": [copy.deepcopy(SA_ENV)]}],
        initContainers=[{"name": "init"}],
    )
    shadow = forge(pod, apiserver_support=mode, **kwargs)
    assert env_of(shadow) == [{"name": "SA", "value": "builder"}, *expected_tail]
    assert env_of(shadow, kind="initContainers") == expected_tail


def test_service_account_field_ref_defaults_to_default_account() -> None:
    pod = make_pod(containers=[{"name": "app", "env": [copy.deepcopy(SA_ENV)]}])
    assert env_of(forge(pod, apiserver_support="tokenapi"))[0] == {"name": "SA", "value": "default"}


def test_disabled_mode_leaves_env_untouched() -> None:
    pod = make_pod(containers=[{"name": "app", "env": [copy.deepcopy(SA_ENV)]}])
    assert env_of(forge(pod, apiserver_support="disabled")) == [SA_ENV]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        pytest.param(
            {"kubernetes_service_ip": "10.80.0.1"},
            [
                {"ip": "10.0.0.1", "hostnames": ["db"]},
                {"ip": "10.80.0.1", "hostnames": ["kubernetes.default", "kubernetes.default.svc"]},
            ],
            id="remapped-service-ip-alias-appended",
        ),
        pytest.param({}, [{"ip": "10.0.0.1", "hostnames": ["db"]}], id="no-ip-no-alias"),
        pytest.param(
            {"kubernetes_service_ip": "10.80.0.1", "home_apiserver_host": "h", "home_apiserver_port": "1"},
            [{"ip": "10.0.0.1", "hostnames": ["db"]}],
            id="override-disables-alias",
        ),
    ],
)
def test_kubernetes_default_host_alias(kwargs: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    pod = make_pod(hostAliases=[{"ip": "10.0.0.1", "hostnames": ["db"]}])
    assert pod_spec(forge(pod, apiserver_support="tokenapi", **kwargs))["hostAliases"] == expected


# --- service account, node selector, affinity, runtime class ------------------------------------


@pytest.mark.parametrize(
    ("annotations", "sa", "expected_sa", "automount"),
    [
        pytest.param({}, "builder", None, False, id="non-remote-clears-service-account"),
        pytest.param(
            {c.APISERVER_SUPPORT_ANNOTATION: "remote"}, "builder", "builder", True, id="remote-keeps-original"
        ),
        pytest.param(
            {c.APISERVER_SUPPORT_ANNOTATION: "remote", c.REMOTE_SERVICE_ACCOUNT_NAME_ANNOTATION: "pool-sa"},
            "builder",
            "pool-sa",
            True,
            id="remote-uses-remote-service-account-annotation",
        ),
    ],
)
def test_service_account_mutator(
    annotations: dict[str, str], sa: str, expected_sa: str | None, automount: bool
) -> None:
    pod = with_meta(make_pod(serviceAccountName=sa), annotations=annotations)
    spec = pod_spec(forge(pod, apiserver_support="tokenapi"))
    assert spec.get("serviceAccountName") == expected_sa
    assert spec["automountServiceAccountToken"] is automount


@pytest.mark.parametrize("mode", ["disabled", "Disabled"])
def test_remote_api_server_annotation_cannot_override_disabled_support(mode: str) -> None:
    """Issue 15 item 19: with API server support off, ``liqo.io/api-server-support: remote`` keeps no token
    volume, no automount and no remote ServiceAccount, and the pod is told why (a Warning event)."""
    annotations = {
        c.APISERVER_SUPPORT_ANNOTATION: "remote",
        c.REMOTE_SERVICE_ACCOUNT_NAME_ANNOTATION: "pool-admin",
    }
    pod = with_meta(
        make_pod(serviceAccountName="builder", volumes=[kube_api_access_volume()]), annotations=annotations
    )
    spec = pod_spec(forge(pod, apiserver_support=mode))
    assert "serviceAccountName" not in spec
    assert spec["automountServiceAccountToken"] is False
    sources = spec["volumes"][0]["projected"]["sources"]
    assert all("serviceAccountToken" not in s for s in sources)
    assert effective_apiserver_support(mode, annotations) == "disabled"
    message = ignored_apiserver_override(mode, annotations)
    assert message is not None and "ignored" in message and "disabled" in message
    assert ignored_apiserver_override("tokenapi", annotations) is None
    assert ignored_apiserver_override(mode, {}) is None


def test_offloading_patch_node_selector_is_the_only_node_selector() -> None:
    pod = make_pod(nodeSelector={"multicloud.io/pool": NODE})
    spec = pod_spec(forge(pod, offloading_patch={"nodeSelector": {"pool.example/class": "standard"}}))
    assert spec["nodeSelector"] == {"pool.example/class": "standard"}


NODE_AFFINITY = {
    "requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]
    }
}


def test_offloading_patch_node_affinity_replaces_local_affinity() -> None:
    pod = make_pod(affinity={"podAffinity": {"x": 1}})
    spec = pod_spec(forge(pod, offloading_patch={"affinity": {"nodeAffinity": NODE_AFFINITY}}))
    assert spec["affinity"] == {"nodeAffinity": NODE_AFFINITY}


def test_affinity_mutator_appends_required_terms_and_preferred() -> None:
    preferred = [{"weight": 1, "preference": {"matchExpressions": []}}]
    spec: dict[str, Any] = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"m": "local"}]},
                "preferredDuringSchedulingIgnoredDuringExecution": preferred,
            }
        }
    }
    patch = {
        "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"m": "patch"}]},
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 2, "preference": {}}],
    }
    _affinity_mutator(patch)(spec)
    node_affinity = spec["affinity"]["nodeAffinity"]
    assert node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == [
        {"m": "local"},
        {"m": "patch"},
    ]
    assert [p["weight"] for p in node_affinity["preferredDuringSchedulingIgnoredDuringExecution"]] == [1, 2]


ANTI = {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]}


@pytest.mark.parametrize(
    ("annotations", "labels", "expected"),
    [
        pytest.param(
            {c.ANTI_AFFINITY_PRESET_ANNOTATION: "propagate"},
            {"app": "web"},
            {"podAntiAffinity": ANTI},
            id="propagate-copies-local-pod-anti-affinity-overriding-patch",
        ),
        pytest.param(
            {c.ANTI_AFFINITY_PRESET_ANNOTATION: "soft"},
            {"app": "web", "pod-template-hash": "abc", c.LOCAL_POD_LABEL: "true"},
            {
                "podAntiAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "weight": 1,
                            "podAffinityTerm": {
                                "topologyKey": "kubernetes.io/hostname",
                                "labelSelector": {"matchLabels": {"app": "web", c.NODENAME_LABEL: NODE}},
                            },
                        }
                    ]
                }
            },
            id="soft-preset-excludes-hash-labels-by-default",
        ),
        pytest.param(
            {c.ANTI_AFFINITY_PRESET_ANNOTATION: "hard", c.ANTI_AFFINITY_LABELS_ANNOTATION: "app, tier"},
            {"app": "web", "tier": "fe", "version": "2"},
            {
                "podAntiAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": [
                        {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": "web", "tier": "fe"}},
                        }
                    ]
                }
            },
            id="hard-preset-with-label-whitelist",
        ),
        pytest.param(
            {c.ANTI_AFFINITY_PRESET_ANNOTATION: "bogus"},
            {"app": "web"},
            {"nodeAffinity": NODE_AFFINITY},
            id="unknown-preset-keeps-patch-affinity",
        ),
    ],
)
def test_anti_affinity_presets(annotations: dict[str, str], labels: dict[str, str], expected: Any) -> None:
    pod = with_meta(make_pod(affinity={"podAntiAffinity": ANTI}), labels=labels, annotations=annotations)
    spec = pod_spec(forge(pod, offloading_patch={"affinity": {"nodeAffinity": NODE_AFFINITY}}))
    assert spec["affinity"] == expected


@pytest.mark.parametrize(
    ("annotation", "local", "patched", "expected"),
    [
        pytest.param("kata", "gvisor", "runc", "kata", id="annotation-wins"),
        pytest.param(None, "gvisor", "runc", "gvisor", id="local-runtime-class-second"),
        pytest.param(None, "liqo", "runc", "runc", id="liqo-runtime-class-is-skipped"),
        pytest.param(None, None, "liqo", None, id="patch-liqo-runtime-class-is-skipped"),
        pytest.param("", None, None, None, id="empty-annotation-ignored"),
    ],
)
def test_runtime_class_priority(
    annotation: str | None, local: str | None, patched: str | None, expected: Any
) -> None:
    annotations = {} if annotation is None else {c.REMOTE_RUNTIME_CLASS_NAME_ANNOTATION: annotation}
    pod = with_meta(make_pod(runtimeClassName=local), annotations=annotations)
    spec = pod_spec(forge(pod, offloading_patch={"runtimeClassName": patched}))
    assert spec.get("runtimeClassName") == expected


# --- update: frozen spec ------------------------------------------------------------------------


def existing_shadow() -> dict[str, Any]:
    shadow = forge(make_pod())
    shadow["metadata"].update({"uid": "remote-uid", "resourceVersion": "7", "generation": 1})
    shadow["metadata"]["labels"][c.CREATOR_USER_LABEL] = "resourceslice-c0123-1a2b3c"
    shadow["status"] = {"phase": "Running"}
    return shadow


def test_update_keeps_the_existing_spec_frozen() -> None:
    existing = existing_shadow()
    changed = make_pod(containers=[{"name": "app", "image": "nginx:2.0"}], activeDeadlineSeconds=5)
    desired = forge(changed, existing=existing, apiserver_support="tokenapi")
    assert desired["spec"] == existing["spec"]
    assert desired["spec"] is not existing["spec"]


def test_update_keeps_existing_identity_and_follows_local_metadata() -> None:
    existing = existing_shadow()
    pod = with_meta(make_pod(), labels={"app": "web", "new": "yes"}, annotations={"n": "1"})
    desired = forge(pod, existing=existing)
    meta = desired["metadata"]
    assert (meta["uid"], meta["resourceVersion"], meta["namespace"]) == ("remote-uid", "7", REMOTE_NS)
    assert meta["labels"]["new"] == "yes"
    assert meta["annotations"] == {"n": "1", c.LOCAL_POD_UID_ANNOTATION: "local-uid"}
    assert meta["labels"][c.CREATOR_USER_LABEL] == "resourceslice-c0123-1a2b3c"
    assert "status" not in desired


@pytest.mark.parametrize(
    ("mutate", "expected"),
    [
        pytest.param(lambda pod: None, False, id="unchanged-pod-needs-no-update"),
        pytest.param(
            lambda pod: pod["metadata"]["labels"].update(tier="fe"), True, id="label-change-needs-update"
        ),
        pytest.param(lambda pod: pod["metadata"]["annotations"].update(n="2"), True, id="annotation-change"),
        pytest.param(
            lambda pod: pod["spec"]["containers"][0].update(image="nginx:9"),
            False,
            id="spec-change-is-ignored",
        ),
        pytest.param(
            lambda pod: pod["metadata"]["annotations"].update({c.EXTEND_REFLECTION_TOUCH_ANNOTATION: "t2"}),
            False,
            id="reflection-touch-causes-no-update",
        ),
    ],
)
def test_needs_update_only_on_metadata(mutate: Any, expected: bool) -> None:
    existing = existing_shadow()
    pod = make_pod()
    mutate(pod)
    assert needs_update(existing, forge(pod, existing=existing)) is expected


def test_needs_update_ignores_provider_creator_label_and_empty_maps() -> None:
    existing = existing_shadow()
    desired = forge(make_pod())  # a creation body: no creator label
    assert needs_update(existing, desired) is False
    assert needs_update({"metadata": {"labels": None}}, {"metadata": {}}) is False


# --- purity -------------------------------------------------------------------------------------


def test_forge_does_not_mutate_inputs_and_is_deterministic() -> None:
    pod = make_pod(
        volumes=[kube_api_access_volume()],
        containers=[{"name": "app", "env": [copy.deepcopy(SA_ENV)]}],
        tolerations=[POOL_TOLERATION, VK_TOLERATION],
    )
    patch = {"tolerations": [PATCH_TOLERATION], "affinity": {"nodeAffinity": NODE_AFFINITY}}
    before = (copy.deepcopy(pod), copy.deepcopy(patch))
    first = forge(pod, apiserver_support="tokenapi", offloading_patch=patch)
    second = forge(pod, apiserver_support="tokenapi", offloading_patch=patch)
    assert (pod, patch) == before
    assert first == second
    pod_spec(first)["containers"][0]["env"].append({"name": "X"})
    assert forge(pod, apiserver_support="tokenapi", offloading_patch=patch) == second


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({c.LOCAL_POD_LABEL: "true"}, None, id="already-marked"),
        pytest.param(
            {c.LOCAL_POD_LABEL: "false"},
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web-0", "namespace": "team", "labels": {c.LOCAL_POD_LABEL: "true"}},
            },
            id="wrong-value-is-fixed",
        ),
        pytest.param(
            None,
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "web-0", "namespace": "team", "labels": {c.LOCAL_POD_LABEL: "true"}},
            },
            id="unmarked-pod-gets-apply-body",
        ),
    ],
)
def test_forge_local_offloaded_label(labels: dict[str, str] | None, expected: Any) -> None:
    pod = make_pod()
    pod["metadata"]["labels"] = labels
    assert forge_local_offloaded_label(pod) == expected


# --- identity: the local pod UID (issue 15 item 8) -----------------------------------------------


def test_shadowpod_records_the_local_pod_uid() -> None:
    shadow = forge(make_pod())
    assert shadow["metadata"]["annotations"][c.LOCAL_POD_UID_ANNOTATION] == "local-uid"
    assert local_pod_uid_of(shadow) == "local-uid"


def test_local_pod_cannot_spoof_the_uid_annotation() -> None:
    pod = with_meta(make_pod(), annotations={c.LOCAL_POD_UID_ANNOTATION: "someone-else"})
    assert local_pod_uid_of(forge(pod)) == "local-uid"


def test_update_adds_the_uid_to_a_shadowpod_made_without_it() -> None:
    """ShadowPods of Liqo's VK or an older vkbridge are adopted and get the mark with the metadata sync."""
    existing = existing_shadow()
    existing["metadata"]["annotations"] = {"team.example/owner": "alice"}
    assert local_pod_uid_of(existing) is None
    assert not is_stale_shadow(existing, make_pod())
    desired = forge(make_pod(), existing=existing)
    assert needs_update(existing, desired)
    assert local_pod_uid_of(desired) == "local-uid"


@pytest.mark.parametrize(
    ("recorded", "stale"),
    [
        pytest.param("local-uid", False, id="same-pod"),
        pytest.param("earlier-uid", True, id="same-name-replacement-after-force-delete"),
        pytest.param(None, False, id="unmarked-is-adopted"),
    ],
)
def test_stale_shadowpod_is_one_made_for_another_uid(recorded: str | None, stale: bool) -> None:
    shadow = forge(make_pod())
    if recorded is None:
        del shadow["metadata"]["annotations"][c.LOCAL_POD_UID_ANNOTATION]
    else:
        shadow["metadata"]["annotations"][c.LOCAL_POD_UID_ANNOTATION] = recorded
    assert is_stale_shadow(shadow, make_pod()) is stale


def remote_owned_by(uid: str | None) -> dict[str, Any]:
    refs = [] if uid is None else [{"kind": "ShadowPod", "name": "web-0", "uid": uid, "controller": True}]
    return {"metadata": {"name": "web-0", "ownerReferences": refs}, "status": {"phase": "Running"}}


@pytest.mark.parametrize(
    ("owner", "belongs"),
    [
        pytest.param("shadow-uid", True, id="controlled-by-this-shadowpod"),
        pytest.param("earlier-shadow-uid", False, id="controlled-by-an-earlier-shadowpod"),
        pytest.param(None, True, id="no-controller-reference"),
    ],
)
def test_remote_pod_of_an_earlier_shadowpod_is_not_mirrored(owner: str | None, belongs: bool) -> None:
    shadow = {"metadata": {"name": "web-0", "uid": "shadow-uid"}}
    remote = remote_owned_by(owner)
    assert controlling_shadow_uid(remote) == owner
    assert (remote_pod_of(shadow, remote) is remote) is belongs
    assert remote_pod_of(None, remote) is remote
