"""JsonPacker: every object comes back equal, and pods of one template pack to a fraction of their JSON."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from vkbridge.kube.packing import JsonPacker


def pod(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"web-7d9f8c-{i:05d}",
            "namespace": "team-a",
            "uid": f"0b1c2d3e-4f50-6172-8394-{i:012d}",
            "resourceVersion": str(100000 + i),
            "labels": {"app": "web", "pod-template-hash": "7d9f8c"},
        },
        "spec": {
            "nodeName": "pool-1",
            "containers": [{"name": "app", "image": "registry.example/web:1.2.3", "resources": {}}],
            "tolerations": [{"key": "multicloud.io/pool", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {"phase": "Running", "podIP": f"10.0.{i // 250}.{i % 250}"},
    }


def test_objects_come_back_equal_after_the_first_set_the_dictionary() -> None:
    packer = JsonPacker()
    blobs = [packer.pack(pod(i)) for i in range(50)]
    assert [packer.unpack(b) for b in blobs] == [pod(i) for i in range(50)]
    assert orjson.loads(packer.unpack_json(blobs[7])) == pod(7)


def test_pods_of_one_template_pack_to_a_fifth_of_their_json_or_less() -> None:
    packer = JsonPacker()
    packer.pack(pod(0))
    raw, packed = len(orjson.dumps(pod(1))), len(packer.pack(pod(1)))
    assert packed * 5 <= raw, (raw, packed)


def test_an_object_of_another_shape_still_round_trips() -> None:
    packer = JsonPacker()
    packer.pack(pod(0))
    other = {"kind": "ConfigMap", "data": {"x" * 40: "y" * 70_000}}  # larger than the window
    assert packer.unpack(packer.pack(other)) == other


def test_unpacking_before_anything_was_packed_is_refused() -> None:
    with pytest.raises(ValueError):
        JsonPacker().unpack(b"\x03\x00")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)


@given(st.lists(st.dictionaries(st.text(max_size=8), json_values, max_size=5), min_size=1, max_size=5))
def test_any_json_objects_round_trip(objs: list[dict[str, Any]]) -> None:
    packer = JsonPacker()
    blobs = [packer.pack(o) for o in objs]
    assert [packer.unpack(b) for b in blobs] == objs
