"""Table tests for reflectors.forge.references (DESIGN §1: only referenced objects go to the pool)."""

from __future__ import annotations

from typing import Any

import pytest

from reflectors.forge import constants as c
from reflectors.forge.references import (
    Reference,
    configmap_names,
    not_found_events,
    pod_references,
    secret_names,
)


def pod(spec: dict[str, Any], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {"metadata": {"name": "p", "namespace": "team", "annotations": annotations or {}}, "spec": spec}


def container(**fields: Any) -> dict[str, Any]:
    return {"name": "app", "image": "busybox", **fields}


def env_from_secret(name: str, optional: bool | None = None) -> dict[str, Any]:
    ref: dict[str, Any] = {"name": name, "key": "k"}
    if optional is not None:
        ref["optional"] = optional
    return {"name": "E", "valueFrom": {"secretKeyRef": ref}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        pytest.param(
            {"volumes": [{"name": "v", "secret": {"secretName": "tls"}}]},
            [Reference("Secret", "tls")],
            id="secret-volume",
        ),
        pytest.param(
            {"volumes": [{"name": "v", "configMap": {"name": "cfg", "optional": True}}]},
            [Reference("ConfigMap", "cfg", optional=True)],
            id="optional-configmap-volume",
        ),
        pytest.param(
            {
                "volumes": [
                    {
                        "name": "v",
                        "projected": {
                            "sources": [
                                {"secret": {"name": "s1"}},
                                {"configMap": {"name": "c1", "optional": True}},
                                {"serviceAccountToken": {"path": "token"}},
                                {"downwardAPI": {"items": []}},
                            ]
                        },
                    }
                ]
            },
            [Reference("ConfigMap", "c1", optional=True), Reference("Secret", "s1")],
            id="projected-sources-ignore-tokens-and-downward-api",
        ),
        pytest.param(
            {"containers": [container(env=[env_from_secret("db", optional=False)])]},
            [Reference("Secret", "db")],
            id="env-secret-key-ref",
        ),
        pytest.param(
            {
                "containers": [
                    container(
                        env=[{"name": "X", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]
                    )
                ]
            },
            [Reference("ConfigMap", "c")],
            id="env-configmap-key-ref",
        ),
        pytest.param(
            {"initContainers": [container(envFrom=[{"secretRef": {"name": "s", "optional": True}}])]},
            [Reference("Secret", "s", optional=True)],
            id="init-container-env-from-secret",
        ),
        pytest.param(
            {"ephemeralContainers": [container(envFrom=[{"configMapRef": {"name": "dbg"}, "prefix": "D_"}])]},
            [],
            id="ephemeral-containers-never-travel",
        ),
        pytest.param(
            {"imagePullSecrets": [{"name": "regcred"}, {"name": ""}]},
            [Reference("Secret", "regcred")],
            id="image-pull-secrets-are-required-and-empty-names-skipped",
        ),
        pytest.param(
            {
                "containers": [
                    container(env=[{"name": "PLAIN", "value": "1"}, {"name": "F", "valueFrom": {}}])
                ]
            },
            [],
            id="plain-env-references-nothing",
        ),
        pytest.param({}, [], id="empty-spec"),
    ],
)
def test_reference_sources(spec: dict[str, Any], expected: list[Reference]) -> None:
    assert list(pod_references(pod(spec))) == expected


@pytest.mark.parametrize(
    ("flags", "expected_optional"),
    [
        pytest.param([True, True], True, id="optional-everywhere-stays-optional"),
        pytest.param([True, False], False, id="one-required-use-makes-it-required"),
        pytest.param([None, True], False, id="unmarked-use-is-required"),
    ],
)
def test_optional_flag_merges_across_uses(flags: list[bool | None], expected_optional: bool) -> None:
    spec = {"containers": [container(env=[env_from_secret("db", f) for f in flags])]}
    assert pod_references(pod(spec)) == (Reference("Secret", "db", optional=expected_optional),)


def test_references_are_deduplicated_and_sorted() -> None:
    spec = {
        "volumes": [
            {"name": "a", "secret": {"secretName": "zeta"}},
            {"name": "b", "configMap": {"name": "beta"}},
        ],
        "containers": [
            container(envFrom=[{"secretRef": {"name": "alpha"}}, {"secretRef": {"name": "zeta"}}])
        ],
        "imagePullSecrets": [{"name": "zeta"}],
    }
    refs = pod_references(pod(spec))
    assert refs == (Reference("ConfigMap", "beta"), Reference("Secret", "alpha"), Reference("Secret", "zeta"))
    assert secret_names(refs) == {"alpha", "zeta"}
    assert configmap_names(refs) == {"beta"}


ROOT_CA_SPEC = {
    "volumes": [
        {
            "name": "kube-api-access-x",
            "projected": {"sources": [{"configMap": {"name": c.ROOT_CA_CONFIGMAP}}]},
        }
    ]
}


def test_root_ca_is_reported_as_renamed_configmap() -> None:
    (ref,) = pod_references(pod(ROOT_CA_SPEC))
    assert ref == Reference("ConfigMap", c.ROOT_CA_CONFIGMAP, optional=False, renamed=True)
    assert ref.remote_name("c-1a2b3c4d") == "kube-root-ca.crt.c-1a2"


def test_ordinary_reference_keeps_its_remote_name() -> None:
    assert Reference("ConfigMap", "cfg").remote_name("c-1a2b3c4d") == "cfg"


def test_root_ca_is_omitted_when_the_pod_uses_the_pool_api_server() -> None:
    annotations = {c.APISERVER_SUPPORT_ANNOTATION: c.APISERVER_SUPPORT_ANNOTATION_REMOTE}
    assert pod_references(pod(ROOT_CA_SPEC, annotations), apiserver_support="tokenapi") == ()


def test_remote_api_server_annotation_is_ignored_while_api_server_support_is_off() -> None:
    """Issue 15 item 19: the forge ignores the annotation then, so the renamed root CA must be copied."""
    annotations = {c.APISERVER_SUPPORT_ANNOTATION: c.APISERVER_SUPPORT_ANNOTATION_REMOTE}
    (ref,) = pod_references(pod(ROOT_CA_SPEC, annotations), apiserver_support="disabled")
    assert ref == Reference("ConfigMap", c.ROOT_CA_CONFIGMAP, optional=False, renamed=True)


def test_secret_named_like_root_ca_is_not_renamed() -> None:
    spec = {"volumes": [{"name": "v", "secret": {"secretName": c.ROOT_CA_CONFIGMAP}}]}
    assert pod_references(pod(spec)) == (Reference("Secret", c.ROOT_CA_CONFIGMAP),)


def test_secrets_referenced_only_by_ephemeral_containers_are_not_copied() -> None:
    """Ephemeral containers are never copied to the ShadowPod, so neither is what only they reference."""
    debug = container(
        name="debugger",
        env=[env_from_secret("debug-token")],
        envFrom=[{"secretRef": {"name": "debug-env"}}, {"configMapRef": {"name": "debug-cfg"}}],
    )
    spec = {"containers": [container(env=[env_from_secret("db")])], "ephemeralContainers": [debug]}
    assert pod_references(pod(spec)) == (Reference("Secret", "db"),)
    # A reference shared with a container that travels is kept, with that container's optional flag.
    shared = {"containers": [container(env=[env_from_secret("db", optional=True)])],
              "ephemeralContainers": [container(env=[env_from_secret("db", optional=False)])]}  # fmt: skip
    assert pod_references(pod(shared)) == (Reference("Secret", "db", optional=True),)


def test_missing_references_are_told_with_the_upstream_virtual_kubelet_reasons_and_wording() -> None:
    absent = (Reference("ConfigMap", "cfg"), Reference("ConfigMap", "extra", optional=True),
              Reference("Secret", "db"), Reference("Secret", "maybe", optional=True))  # fmt: skip
    assert not_found_events(absent, optional=False) == [
        ("Warning", "MandatoryConfigMapNotFound", 'configmap "cfg" not found'),
        ("Warning", "MandatorySecretNotFound", 'secret "db" not found'),
    ]
    assert not_found_events(absent, optional=True) == [
        ("Normal", "OptionalConfigMapNotFound", 'configmap "extra" not found'),
        ("Normal", "OptionalSecretNotFound", 'secret "maybe" not found'),
    ]
