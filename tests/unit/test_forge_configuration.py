"""Table tests for reflectors.forge.configuration (LIQO §3.2 policy, §5 ConfigMap/Secret)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from reflectors.forge import constants as c
from reflectors.forge.configuration import (
    SKIP_CONFLICT,
    SKIP_DENIED,
    SKIP_NOT_ALLOWED,
    SKIP_SA_TOKEN,
    configmap_skip_reason,
    forge_remote_copy,
    is_service_account_secret,
    kept_for_other_nodes,
    node_mark,
    node_marks,
    other_node_marks,
    policy_skip_reason,
    release_action,
    reserved_name_reason,
    secret_skip_reason,
)
from reflectors.forge.references import CONFIGMAP, SECRET

LOCAL_ID = "c-1a2b3c4d"
REMOTE_ID = "c0123456789ab"
OURS = {c.ORIGIN_LABEL: LOCAL_ID, c.DESTINATION_LABEL: REMOTE_ID}


def obj(
    kind: str, name: str = "db", annotations: dict[str, str] | None = None, **fields: Any
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": "local-uid",
            "resourceVersion": "12",
            "creationTimestamp": "2026-11-29T09:00:00Z",
            "managedFields": [{"manager": "kubectl"}],
            "ownerReferences": [{"kind": "Deployment", "name": "x", "uid": "y", "apiVersion": "apps/v1"}],
            "labels": {"app": "web", c.ORIGIN_LABEL: "spoofed"},
            "annotations": annotations if annotations is not None else {"note": "n"},
        },
        **fields,
    }


def secret_body(local: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return forge_remote_copy(
        SECRET, local, remote_ns="team-c-1a2b3c4d", local_id=LOCAL_ID, remote_id=REMOTE_ID, **kwargs
    )


def configmap_body(local: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return forge_remote_copy(
        CONFIGMAP, local, remote_ns="team-c-1a2b3c4d", local_id=LOCAL_ID, remote_id=REMOTE_ID, **kwargs
    )


def test_secret_apply_body_carries_type_data_immutable_and_our_labels() -> None:
    local = obj(
        "Secret", type="kubernetes.io/tls", data={"tls.crt": "Y3J0", "tls.key": "a2V5"}, immutable=True
    )
    assert secret_body(local) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "db",
            "namespace": "team-c-1a2b3c4d",
            "labels": {"app": "web", **OURS},
            "annotations": {"note": "n"},
        },
        "type": "kubernetes.io/tls",
        "data": {"tls.crt": "Y3J0", "tls.key": "a2V5"},
        "immutable": True,
    }


@pytest.mark.parametrize(
    ("fields", "absent"),
    [
        pytest.param({"type": "Opaque"}, {"data", "immutable"}, id="secret-without-data"),
        pytest.param({"data": {"k": "dg=="}}, {"type", "immutable"}, id="secret-without-type"),
    ],
)
def test_secret_body_omits_absent_fields(fields: dict[str, Any], absent: set[str]) -> None:
    assert absent.isdisjoint(secret_body(obj("Secret", **fields)))


def test_secret_labels_and_annotations_are_filtered() -> None:
    local = obj("Secret", annotations={"keep": "1", "drop": "2"}, type="Opaque")
    local["metadata"]["labels"]["tier"] = "gold"
    meta = secret_body(local, labels_not_reflected=["tier"], annotations_not_reflected=["drop"])["metadata"]
    assert meta["labels"] == {"app": "web", **OURS}
    assert meta["annotations"] == {"keep": "1"}


def test_configmap_apply_body_carries_data_binary_data_immutable() -> None:
    local = obj("ConfigMap", data={"a": "1"}, binaryData={"b": "AA=="}, immutable=False)
    body = configmap_body(local)
    assert (body["kind"], body["metadata"]["name"]) == ("ConfigMap", "db")
    assert (body["data"], body["binaryData"], body["immutable"]) == ({"a": "1"}, {"b": "AA=="}, False)
    assert body["metadata"]["labels"] == {"app": "web", **OURS}


def test_root_ca_configmap_is_applied_under_its_remote_name() -> None:
    body = configmap_body(obj("ConfigMap", name=c.ROOT_CA_CONFIGMAP, data={"ca.crt": "PEM"}))
    assert body["metadata"]["name"] == "kube-root-ca.crt.c-1a2"


@pytest.mark.parametrize("forge", [secret_body, configmap_body], ids=["secret", "configmap"])
def test_apply_body_never_carries_local_identity_fields(forge: Any) -> None:
    local = obj("Secret", data={"k": "dg=="})
    before = copy.deepcopy(local)
    meta = forge(local)["metadata"]
    assert set(meta) == {"name", "namespace", "labels", "annotations"}
    assert local == before


@pytest.mark.parametrize(
    ("annotations", "policy", "expected"),
    [
        pytest.param({}, "DenyList", None, id="denylist-reflects-by-default"),
        pytest.param(
            {c.SKIP_REFLECTION_ANNOTATION: "true"}, "DenyList", SKIP_DENIED, id="denylist-skip-true"
        ),
        pytest.param(
            {c.SKIP_REFLECTION_ANNOTATION: ""}, "DenyList", SKIP_DENIED, id="denylist-skip-empty-value"
        ),
        pytest.param(
            {c.SKIP_REFLECTION_ANNOTATION: "FALSE"}, "DenyList", None, id="denylist-skip-false-any-case"
        ),
        pytest.param({}, "AllowList", SKIP_NOT_ALLOWED, id="allowlist-skips-by-default"),
        pytest.param({c.ALLOW_REFLECTION_ANNOTATION: "yes"}, "AllowList", None, id="allowlist-allow-set"),
        pytest.param(
            {c.ALLOW_REFLECTION_ANNOTATION: "False"}, "AllowList", SKIP_NOT_ALLOWED, id="allowlist-false"
        ),
        pytest.param(
            {c.ALLOW_REFLECTION_ANNOTATION: "true", c.SKIP_REFLECTION_ANNOTATION: "true"},
            "DenyList",
            SKIP_CONFLICT,
            id="both-annotations-skip",
        ),
        pytest.param(
            {c.ALLOW_REFLECTION_ANNOTATION: "true", c.SKIP_REFLECTION_ANNOTATION: "false"},
            "AllowList",
            None,
            id="skip-false-is-not-a-conflict",
        ),
    ],
)
def test_policy_skip_reason(annotations: dict[str, str], policy: str, expected: str | None) -> None:
    assert policy_skip_reason(obj("Secret", annotations=annotations), policy) == expected


def test_unknown_policy_is_rejected() -> None:
    with pytest.raises(ValueError, match="CustomLiqo"):
        policy_skip_reason(obj("Secret"), "CustomLiqo")


@pytest.mark.parametrize(
    ("secret_type", "annotations", "expected"),
    [
        pytest.param(
            c.SERVICE_ACCOUNT_TOKEN_SECRET_TYPE, {}, SKIP_SA_TOKEN, id="sa-token-secret-never-reflected"
        ),
        pytest.param(
            c.SERVICE_ACCOUNT_TOKEN_SECRET_TYPE,
            {c.ALLOW_REFLECTION_ANNOTATION: "true"},
            SKIP_SA_TOKEN,
            id="sa-token-secret-not-even-when-allowed",
        ),
        pytest.param("Opaque", {}, None, id="opaque-secret-reflected"),
        pytest.param(
            "Opaque", {c.SKIP_REFLECTION_ANNOTATION: "true"}, SKIP_DENIED, id="opaque-secret-skipped"
        ),
    ],
)
def test_secret_skip_reason(secret_type: str, annotations: dict[str, str], expected: str | None) -> None:
    assert secret_skip_reason(obj("Secret", annotations=annotations, type=secret_type)) == expected


@pytest.mark.parametrize(
    ("name", "annotations", "policy", "expected"),
    [
        pytest.param(c.ROOT_CA_CONFIGMAP, {}, "AllowList", None, id="root-ca-reflected-even-under-allowlist"),
        pytest.param(
            c.ROOT_CA_CONFIGMAP,
            {c.SKIP_REFLECTION_ANNOTATION: "true"},
            "DenyList",
            SKIP_DENIED,
            id="root-ca-explicitly-skipped",
        ),
        pytest.param(
            c.ROOT_CA_CONFIGMAP,
            {c.SKIP_REFLECTION_ANNOTATION: "true", c.ALLOW_REFLECTION_ANNOTATION: "true"},
            "DenyList",
            SKIP_CONFLICT,
            id="root-ca-conflicting-annotations",
        ),
        pytest.param("cfg", {}, "AllowList", SKIP_NOT_ALLOWED, id="ordinary-configmap-follows-policy"),
        pytest.param("cfg", {}, "DenyList", None, id="ordinary-configmap-default"),
    ],
)
def test_configmap_skip_reason(
    name: str, annotations: dict[str, str], policy: str, expected: str | None
) -> None:
    assert (
        configmap_skip_reason(obj("ConfigMap", name=name, annotations=annotations), policy=policy) == expected
    )


@pytest.mark.parametrize(
    ("labels", "annotations", "expected"),
    [
        pytest.param(
            {c.SA_SECRET_FOR_SERVICE_ACCOUNT_KEY: "builder"},
            {c.SA_SECRET_FOR_POD_NAME_KEY: "web-0"},
            True,
            id="keys-split-across-labels-and-annotations",
        ),
        pytest.param({c.SA_SECRET_FOR_SERVICE_ACCOUNT_KEY: "builder"}, {}, False, id="one-key-is-not-enough"),
        pytest.param({}, {}, False, id="plain-secret"),
    ],
)
def test_is_service_account_secret(
    labels: dict[str, str], annotations: dict[str, str], expected: bool
) -> None:
    remote = {"metadata": {"name": "web-0-token", "labels": labels, "annotations": annotations}}
    assert is_service_account_secret(remote) is expected


# --- copies shared by the virtual nodes of one remote namespace (issue 15 item 13) ---------------

MARK_A = f"{c.CONFIG_USER_LABEL_PREFIX}node-a"
MARK_B = f"{c.CONFIG_USER_LABEL_PREFIX}node-b"


def copy_with(*marks: str) -> dict[str, Any]:
    return {"metadata": {"name": "db", "labels": {**OURS, "app": "web", **dict.fromkeys(marks, "true")}}}


def test_each_node_marks_the_copies_it_needs() -> None:
    assert node_mark("node-a") == MARK_A
    for forge in (secret_body, configmap_body):
        labels = forge(obj("Secret"), node_name="node-a")["metadata"]["labels"]
        assert labels == {"app": "web", **OURS, MARK_A: "true"}
    assert MARK_A not in secret_body(obj("Secret"))["metadata"]["labels"]  # no node: no mark


def test_a_local_label_cannot_forge_a_node_mark() -> None:
    """Else a local Secret labelled for a gone node would keep its copy on the pool forever."""
    local = obj("Secret")
    local["metadata"]["labels"][MARK_B] = "true"
    labels = secret_body(local, node_name="node-a")["metadata"]["labels"]
    assert MARK_B not in labels and labels[MARK_A] == "true"


def test_a_node_name_that_cannot_be_a_label_name_is_hashed() -> None:
    long = "n" * 64
    mark = node_mark(long)
    assert mark.startswith(c.CONFIG_USER_LABEL_PREFIX) and len(mark.split("/", 1)[1]) <= 63
    assert mark != node_mark("n" * 65) and mark == node_mark(long)


def test_node_marks_and_the_other_nodes_marks() -> None:
    remote = copy_with(MARK_A, MARK_B)
    assert node_marks(remote) == {MARK_A: "true", MARK_B: "true"}
    assert other_node_marks(remote, "node-a") == {MARK_B: "true"}
    assert other_node_marks(None, "node-a") == {}


def test_a_shared_copy_keeps_what_our_patch_leaves_out_and_the_other_nodes_marks() -> None:
    remote = copy_with(MARK_A, MARK_B)
    remote["metadata"]["labels"]["tier"] = "db"
    remote["metadata"]["annotations"] = {"lb.example.com/pool": "blue", "note": "x"}
    labels, annotations = kept_for_other_nodes(remote, "node-a", ["tier", "absent"], ["lb.example.com/pool"])
    # "tier" may be node B's to reflect; "app" and "note" are ours to set (or drop) and are not kept.
    assert labels == {"tier": "db", MARK_B: "true"}
    assert annotations == {"lb.example.com/pool": "blue"}


def test_a_copy_no_other_node_marks_keeps_nothing_we_leave_out() -> None:
    remote = copy_with(MARK_A)
    remote["metadata"]["labels"]["tier"] = "db"
    assert kept_for_other_nodes(remote, "node-a", ["tier"], []) == ({}, {})
    assert kept_for_other_nodes(None, "node-a", ["tier"], []) == ({}, {})


@pytest.mark.parametrize(
    ("marks", "action"),
    [
        pytest.param((MARK_A,), "delete", id="only-ours-delete"),
        pytest.param((), "delete", id="unmarked-copy-from-before-marks-delete"),
        pytest.param((MARK_A, MARK_B), "unmark", id="shared-drop-our-mark-only"),
        pytest.param((MARK_B,), "keep", id="only-the-other-nodes-leave-it"),
    ],
)
def test_release_deletes_a_copy_only_when_no_other_node_needs_it(marks: tuple[str, ...], action: str) -> None:
    assert release_action(copy_with(*marks), "node-a") == action


# --- a local ConfigMap named like the renamed root CA (issue 15 item 14) -------------------------


def test_configmap_named_like_the_renamed_root_ca_is_refused_with_a_reason() -> None:
    reason = reserved_name_reason("kube-root-ca.crt.c-1a2", LOCAL_ID)
    assert reason is not None and "reserved" in reason and c.ROOT_CA_CONFIGMAP in reason
    assert reserved_name_reason(c.ROOT_CA_CONFIGMAP, LOCAL_ID) is None
    assert reserved_name_reason("app-config", LOCAL_ID) is None
