"""Table tests for reflectors.forge.names (LIQO §3.3 namespace mapping, §4.5 renamed root CA)."""

from __future__ import annotations

import hashlib

import pytest

from reflectors.forge.names import (
    InvalidName,
    MappingStrategy,
    is_dns1123_label,
    is_reserved_configmap_name,
    local_configmap_name,
    mapping_problem,
    remote_configmap_name,
    remote_namespace_name,
    service_account_secret_name,
    service_account_token_key,
)

CONSUMER = "c-1a2b3c4d"


@pytest.mark.parametrize(
    ("namespace", "strategy", "selected", "expected"),
    [
        pytest.param(
            "my-team", "DefaultName", "", "my-team-c-1a2b3c4d", id="default-name-appends-consumer-id"
        ),
        pytest.param("my-team", "EnforceSameName", "", "my-team", id="enforce-same-name"),
        pytest.param("my-team", "SelectedName", "custom-ns", "custom-ns", id="selected-name"),
        pytest.param(
            "my-team", "Bogus", "", "my-team-c-1a2b3c4d", id="unknown-strategy-falls-back-to-default"
        ),
        pytest.param(
            "a" * 52, MappingStrategy.DEFAULT_NAME, "", "a" * 52 + "-" + CONSUMER, id="exactly-63-chars"
        ),
    ],
)
def test_remote_namespace_name(namespace: str, strategy: str, selected: str, expected: str) -> None:
    assert remote_namespace_name(
        namespace, strategy=strategy, local_cluster_id=CONSUMER, selected_name=selected
    ) == (expected)


@pytest.mark.parametrize(
    ("namespace", "strategy", "selected", "reason_part"),
    [
        pytest.param("a" * 53, "DefaultName", "", "64 characters", id="default-name-overflow-is-an-error"),
        pytest.param("b" * 64, "EnforceSameName", "", "over the limit of 63", id="same-name-overflow"),
        pytest.param(
            "my-team", "SelectedName", "", "requires spec.remoteNamespaceName", id="selected-name-missing"
        ),
        pytest.param(
            "my-team", "SelectedName", "Bad_Name", "not a valid DNS-1123 label", id="selected-name-invalid"
        ),
    ],
)
def test_unusable_remote_namespace_is_an_error_value_not_a_truncation(
    namespace: str, strategy: str, selected: str, reason_part: str
) -> None:
    result = remote_namespace_name(
        namespace, strategy=strategy, local_cluster_id=CONSUMER, selected_name=selected
    )
    assert isinstance(result, InvalidName)
    assert reason_part in result.reason


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param("abc-1", True, id="valid"),
        pytest.param("-abc", False, id="leading-dash"),
        pytest.param("abc-", False, id="trailing-dash"),
        pytest.param("ABC", False, id="uppercase"),
        pytest.param("a" * 64, False, id="too-long"),
        pytest.param("", False, id="empty"),
    ],
)
def test_is_dns1123_label(value: str, expected: bool) -> None:
    assert is_dns1123_label(value) is expected


@pytest.mark.parametrize(
    ("name", "cluster_id", "expected"),
    [
        pytest.param(
            "kube-root-ca.crt", "c-1a2b3c4d", "kube-root-ca.crt.c-1a2", id="root-ca-gets-5-char-suffix"
        ),
        pytest.param("kube-root-ca.crt", "abc", "kube-root-ca.crt.abc", id="short-cluster-id"),
        pytest.param("kube-root-ca.crt", "abcd-efgh", "kube-root-ca.crt.abcd-a", id="non-alnum-tail-gets-a"),
        pytest.param("kube-root-ca.crt", "", "kube-root-ca.crt.a", id="empty-cluster-id"),
        pytest.param("app-config", "c-1a2b3c4d", "app-config", id="other-configmaps-unchanged"),
    ],
)
def test_remote_configmap_name(name: str, cluster_id: str, expected: str) -> None:
    assert remote_configmap_name(name, cluster_id) == expected


@pytest.mark.parametrize(
    ("remote", "expected"),
    [
        pytest.param("kube-root-ca.crt.c-1a2", "kube-root-ca.crt", id="renamed-root-ca-maps-back"),
        pytest.param("kube-root-ca.crt", "kube-root-ca.crt", id="pool-own-root-ca-is-not-ours-but-same-key"),
        pytest.param("app-config", "app-config", id="others-unchanged"),
    ],
)
def test_local_configmap_name(remote: str, expected: str) -> None:
    assert local_configmap_name(remote, CONSUMER) == expected


def test_service_account_secret_and_token_key() -> None:
    assert service_account_secret_name("web-0") == "web-0-token"
    digest = hashlib.sha256(b"token").hexdigest()
    assert service_account_token_key("kube-api-access-x", "token") == f"kube-api-access-x-{digest[:6]}"


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (None, None),
        ({"remoteNamespace": "ok-c1", "phase": "Accepted"}, None),
        ({"remoteNamespace": "ok-c1", "phase": "CreationInProgress"}, None),
        (
            {"remoteNamespace": "x" * 64, "phase": "CreationLoopBackOff"},
            "64 characters, over the limit of 63",
        ),
        ({"remoteNamespace": "Bad_Name", "phase": "CreationLoopBackOff"}, "not a valid DNS-1123 label"),
        ({"remoteNamespace": "fine-c1", "phase": "CreationLoopBackOff"}, "keeps failing to create"),
    ],
)
def test_mapping_problem_names_the_cause_and_the_fix(
    entry: dict[str, str] | None, expected: str | None
) -> None:
    got = mapping_problem("team-a", entry)
    if expected is None:
        assert got is None
    else:
        assert got is not None and expected in got and "waits" in got


@pytest.mark.parametrize(
    ("name", "cluster_id", "reserved"),
    [
        pytest.param("kube-root-ca.crt.c-1a2", "c-1a2b3c4d", True, id="the-renamed-root-ca-name"),
        pytest.param("kube-root-ca.crt.abcd-a", "abcd-efgh", True, id="renamed-with-appended-a"),
        pytest.param("kube-root-ca.crt.abcd-", "abcd-efgh", False, id="before-the-a-is-appended"),
        pytest.param("kube-root-ca.crt", "c-1a2b3c4d", False, id="the-root-ca-itself"),
        pytest.param("kube-root-ca.crt.c-1a3", "c-1a2b3c4d", False, id="another-consumers-suffix"),
        pytest.param("app-config", "c-1a2b3c4d", False, id="ordinary"),
    ],
)
def test_local_configmap_named_like_the_renamed_root_ca_is_reserved(
    name: str, cluster_id: str, reserved: bool
) -> None:
    assert is_reserved_configmap_name(name, cluster_id) is reserved
    if reserved:  # exactly the names that would collide with the root CA copy on the pool
        assert remote_configmap_name(name, cluster_id) == remote_configmap_name(
            "kube-root-ca.crt", cluster_id
        )
