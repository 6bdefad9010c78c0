"""json_copy: the forge's deep copy, equal to copy.deepcopy and sharing nothing mutable with its input."""

from __future__ import annotations

import copy
from collections import OrderedDict
from datetime import UTC, datetime
from typing import Any

import pytest

from reflectors.forge.jsoncopy import json_copy

POD: dict[str, Any] = {
    "metadata": {"name": "p", "labels": {"app": "a"}, "ownerReferences": [{"uid": "u", "controller": True}]},
    "spec": {
        "containers": [
            {"name": "c", "args": ["a", "b"], "resources": {"requests": {"cpu": "1m"}}, "env": []}
        ],
        "terminationGracePeriodSeconds": 30,
        "priority": 0,
        "nodeSelector": None,
        "weight": 1.5,
    },
    "status": {"conditions": [{"type": "Ready", "status": "True"}], "podIPs": [{"ip": "10.0.0.1"}]},
}


def containers(value: Any) -> list[Any]:
    """Every dict and list inside ``value``, ``value`` included."""
    if isinstance(value, dict):
        return [value, *(x for v in value.values() for x in containers(v))]
    if isinstance(value, list | tuple):
        return ([value] if isinstance(value, list) else []) + [x for v in value for x in containers(v)]
    return []


def test_a_pod_copies_equal_and_shares_no_dict_or_list() -> None:
    out = json_copy(POD)
    assert out == copy.deepcopy(POD)
    assert {id(x) for x in containers(out)}.isdisjoint(id(x) for x in containers(POD))
    out["spec"]["containers"][0]["args"].append("c")
    assert POD["spec"]["containers"][0]["args"] == ["a", "b"]


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({"t": ({"k": [1]},)}, id="tuple"),
        pytest.param({"at": datetime(2026, 12, 1, tzinfo=UTC)}, id="datetime"),
        pytest.param({"o": OrderedDict(a=[1])}, id="dict-subclass"),
    ],
)
def test_other_types_are_deep_copied_as_deepcopy_does(value: dict[str, Any]) -> None:
    out = json_copy(value)
    expected = copy.deepcopy(value)
    assert out == expected
    inner, want = next(iter(out.values())), next(iter(expected.values()))
    assert type(inner) is type(want)
    assert {id(x) for x in containers(out)}.isdisjoint(id(x) for x in containers(value))
