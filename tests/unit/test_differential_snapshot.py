"""The differential suite's pure part: normalisation, the ignore list, the diff lines, the doc table."""

from __future__ import annotations

from tests.differential import snapshot as snap


def shadow(labels: dict[str, str], annotations: dict[str, str], uid: str = "u1") -> dict[str, object]:
    return {
        "metadata": {
            "name": "p",
            "namespace": "ns",
            "uid": uid,
            "resourceVersion": uid,
            "labels": labels,
            "annotations": annotations,
            "managedFields": [{"manager": uid}],
        },
        "spec": {"pod": {"containers": [{"name": "c", "env": [{"name": "A", "value": "1"}]}]}},
    }


def test_unique_fields_are_ignored_and_an_extra_annotation_is_one_difference() -> None:
    liqo = {"shadowpod": snap.shadowpod(shadow({"a": "1"}, {}, uid="x"))}
    ours = {"shadowpod": snap.shadowpod(shadow({"a": "1"}, {"vkbridge.multicloud.io/local-pod-uid": "u"}))}
    assert snap.diff(liqo, ours) == {
        "shadowpod: + /metadata/annotations/vkbridge.multicloud.io~1local-pod-uid"
    }


def test_named_lists_diff_by_name_not_by_position() -> None:
    a = snap.pod_spec({"containers": [{"name": "c", "env": [{"name": "A"}, {"name": "B"}]}]})
    b = snap.pod_spec({"containers": [{"name": "c", "env": [{"name": "B"}, {"name": "A"}]}]})
    assert snap.diff({"s": a}, {"s": b}) == set()


def test_value_change_and_missing_kind() -> None:
    got = snap.diff({"pod-status": {"phase": "Running"}}, {"pod-status": {"phase": "Pending"}, "x": {"k": 1}})
    assert got == {"pod-status: ~ /phase", "x: + /"}


def test_placeholders_replace_namespace_names_in_keys_and_values() -> None:
    got = snap.placeholders({"ns-abc": ["ns-abc/p"]}, {"ns-abc": "<NS>"})
    assert got == {"<NS>": ["<NS>/p"]}


def test_configs_keep_keys_never_values() -> None:
    got = snap.configs(
        [{"metadata": {"name": "s", "labels": {}}, "type": "Opaque", "data": {"k": "c2VjcmV0"}}]
    )
    assert got == {"s": {"labels": {}, "type": "Opaque", "keys": ["k"]}}
