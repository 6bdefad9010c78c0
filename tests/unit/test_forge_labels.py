"""Table tests for reflectors.forge.labels (ownership guard, invariant 2; label filtering)."""

from __future__ import annotations

from typing import Any

import pytest

from reflectors.forge import constants as c
from reflectors.forge.labels import (
    filter_keys,
    is_reflected,
    reflected_annotations,
    reflected_label_selector,
    reflected_labels,
    reflection_labels,
    reflection_labels_with_node,
)

LOCAL_ID = "c-1a2b3c4d"
REMOTE_ID = "c0123456789ab"


def with_labels(labels: dict[str, str] | None) -> dict[str, Any]:
    return {"metadata": {"name": "x", "labels": labels}}


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(
            with_labels({c.ORIGIN_LABEL: LOCAL_ID, c.DESTINATION_LABEL: REMOTE_ID}), True, id="ours"
        ),
        pytest.param(with_labels({c.ORIGIN_LABEL: LOCAL_ID}), False, id="destination-missing"),
        pytest.param(with_labels({c.DESTINATION_LABEL: REMOTE_ID}), False, id="origin-missing"),
        pytest.param(
            with_labels({c.ORIGIN_LABEL: "other-consumer", c.DESTINATION_LABEL: REMOTE_ID}),
            False,
            id="another-consumer-object",
        ),
        pytest.param(
            with_labels({c.ORIGIN_LABEL: LOCAL_ID, c.DESTINATION_LABEL: "other-pool"}),
            False,
            id="another-pool",
        ),
        pytest.param(with_labels(None), False, id="no-labels"),
        pytest.param({}, False, id="no-metadata"),
        pytest.param(None, False, id="no-object"),
    ],
)
def test_is_reflected(obj: dict[str, Any] | None, expected: bool) -> None:
    assert is_reflected(obj, LOCAL_ID, REMOTE_ID) is expected


def test_reflection_label_sets() -> None:
    assert reflection_labels(LOCAL_ID, REMOTE_ID) == {
        c.ORIGIN_LABEL: LOCAL_ID,
        c.DESTINATION_LABEL: REMOTE_ID,
    }
    assert reflection_labels_with_node(LOCAL_ID, REMOTE_ID, "n1")[c.NODENAME_LABEL] == "n1"


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        pytest.param(
            None,
            f"offloading.liqo.io/origin={LOCAL_ID},offloading.liqo.io/destination={REMOTE_ID}",
            id="cluster-selector",
        ),
        pytest.param(
            "n1",
            f"offloading.liqo.io/origin={LOCAL_ID},offloading.liqo.io/destination={REMOTE_ID},"
            "offloading.liqo.io/nodename=n1",
            id="node-selector",
        ),
    ],
)
def test_reflected_label_selector(node: str | None, expected: str) -> None:
    assert reflected_label_selector(LOCAL_ID, REMOTE_ID, node) == expected


@pytest.mark.parametrize(
    ("local", "not_reflected", "node", "expected"),
    [
        pytest.param({"app": "a"}, (), None, {"app": "a"}, id="plain-labels-kept"),
        pytest.param(
            {"app": "a", c.LOCAL_POD_LABEL: "true", c.REMOTE_UNAVAILABLE_LABEL: "true"},
            (),
            None,
            {"app": "a"},
            id="local-only-labels-dropped",
        ),
        pytest.param(
            {"app": "a", "b": "b"}, ("b", "missing"), None, {"app": "a"}, id="not-reflected-dropped"
        ),
        pytest.param(
            {c.ORIGIN_LABEL: "x", c.DESTINATION_LABEL: "y"},
            (),
            None,
            {},
            id="local-object-never-overrides-origin-destination",
        ),
        pytest.param(
            {c.NODENAME_LABEL: "other"},
            (c.NODENAME_LABEL,),
            "n1",
            {c.NODENAME_LABEL: "n1"},
            id="nodename-forced",
        ),
        pytest.param(None, (), None, {}, id="no-labels"),
    ],
)
def test_reflected_labels(
    local: dict[str, str] | None, not_reflected: tuple[str, ...], node: str | None, expected: dict[str, str]
) -> None:
    labels = reflected_labels(
        local,
        local_cluster_id=LOCAL_ID,
        remote_cluster_id=REMOTE_ID,
        not_reflected=not_reflected,
        node_name=node,
    )
    assert labels == {**expected, c.ORIGIN_LABEL: LOCAL_ID, c.DESTINATION_LABEL: REMOTE_ID}


@pytest.mark.parametrize(
    ("local", "not_reflected", "expected"),
    [
        pytest.param({"a": "1"}, (), {"a": "1"}, id="kept"),
        pytest.param(
            {"a": "1", c.EXTEND_REFLECTION_TOUCH_ANNOTATION: "t"}, (), {"a": "1"}, id="touch-dropped"
        ),
        pytest.param({"a": "1", "lb": "x"}, ("lb",), {"a": "1"}, id="not-reflected-dropped"),
        pytest.param(None, (), {}, id="none"),
    ],
)
def test_reflected_annotations(
    local: dict[str, str] | None, not_reflected: tuple[str, ...], expected: dict[str, str]
) -> None:
    assert reflected_annotations(local, not_reflected=not_reflected) == expected


def test_filter_keys_is_exact_match_and_copies() -> None:
    source = {"a": "1", "ab": "2"}
    out = filter_keys(source, ["a"])
    assert out == {"ab": "2"}
    out["x"] = "y"
    assert source == {"a": "1", "ab": "2"}
