"""The pure helpers the I/O reflectors used to carry: status and metadata merge patches, the configuration
copies' fingerprint, match, re-create and scrub rules."""

from __future__ import annotations

import base64

from reflectors.forge.configuration import copy_matches, fingerprint, needs_recreate, scrub
from reflectors.forge.shadowpod import metadata_patch
from reflectors.forge.status import status_patch


def test_status_patch_sets_what_changed_and_nulls_what_went_away() -> None:
    current = {"phase": "Pending", "reason": "X", "conditions": [{"type": "Ready"}]}
    new = {"phase": "Running", "conditions": [{"type": "Ready"}], "podIP": "10.0.0.1"}
    assert status_patch(current, new) == {"phase": "Running", "reason": None, "podIP": "10.0.0.1"}
    assert status_patch(new, new) == {}


def test_metadata_patch_makes_labels_and_annotations_exactly_the_desired_ones() -> None:
    shadow = {
        "metadata": {"resourceVersion": "7", "labels": {"a": "1", "gone": "x"}, "annotations": {"k": "v"}}
    }
    desired = {"metadata": {"labels": {"a": "2", "new": "y"}, "annotations": {"k": "v"}}}
    assert metadata_patch(shadow, desired) == {
        "metadata": {"resourceVersion": "7", "labels": {"a": "2", "new": "y", "gone": None}}
    }


def secret(**kw: object) -> dict[str, object]:
    return {"kind": "Secret", "metadata": {"labels": {"ours": "1"}}, "data": {"k": "dg=="}, **kw}


def test_a_copy_matches_with_extra_labels_but_not_with_other_content_or_type() -> None:
    desired = secret()
    extra = {**secret(), "metadata": {"labels": {"ours": "1", "provider": "added"}}}
    assert copy_matches(extra, desired)
    assert not copy_matches(secret(data={"k": "b3RoZXI="}), desired)
    assert not copy_matches(secret(type="kubernetes.io/tls"), desired)
    assert copy_matches(secret(type="Opaque"), desired), "no type is Opaque"


def test_type_change_and_immutable_content_need_a_delete_first() -> None:
    assert needs_recreate(secret(type="kubernetes.io/tls"), secret())
    assert not needs_recreate(secret(data={"k": "b3RoZXI="}), secret())  # mutable: updated in place
    assert needs_recreate(secret(immutable=True, data={"k": "b3RoZXI="}), secret(immutable=True))
    assert needs_recreate(secret(immutable=True), secret())  # immutable cannot be turned off
    assert not needs_recreate(secret(immutable=True), secret(immutable=True))


def test_fingerprint_is_order_independent_and_content_sensitive() -> None:
    assert fingerprint({"a": 1, "b": {"c": 2}}) == fingerprint({"b": {"c": 2}, "a": 1})
    assert fingerprint(secret()) != fingerprint(secret(data={"k": "dw=="}))


def test_scrub_removes_secret_values_encoded_and_decoded() -> None:
    value = base64.b64encode(b"hunter2-password").decode()
    local = {"data": {"pw": value}}
    text = f"field is invalid: {value} (decoded hunter2-password)"
    assert scrub(text, local) == "field is invalid: <redacted> (decoded <redacted>)"
    assert scrub(text, None) == text
