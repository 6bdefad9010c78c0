"""Ownership labels (invariant 2) and the filtering of labels/annotations copied to remote objects."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from reflectors.forge import constants as c
from reflectors.forge.pods import ReadObj, labels_of

# Meaningful only in the consumer cluster: never copied to a remote object.
LOCAL_ONLY_LABELS: frozenset[str] = frozenset({c.LOCAL_POD_LABEL, c.REMOTE_UNAVAILABLE_LABEL})
LOCAL_ONLY_ANNOTATIONS: frozenset[str] = frozenset({c.EXTEND_REFLECTION_TOUCH_ANNOTATION})
# Written by the provider on our remote objects; preserved on update so they never look like drift.
PROVIDER_OWNED_LABELS: frozenset[str] = frozenset({c.CREATOR_USER_LABEL})


def reflection_labels(local_cluster_id: str, remote_cluster_id: str) -> dict[str, str]:
    return {c.ORIGIN_LABEL: local_cluster_id, c.DESTINATION_LABEL: remote_cluster_id}


def reflection_labels_with_node(
    local_cluster_id: str, remote_cluster_id: str, node_name: str
) -> dict[str, str]:
    labels = reflection_labels(local_cluster_id, remote_cluster_id)
    labels[c.NODENAME_LABEL] = node_name
    return labels


def reflected_label_selector(
    local_cluster_id: str, remote_cluster_id: str, node_name: str | None = None
) -> str:
    """Label selector (string form) matching our remote objects, optionally those of one virtual node."""
    labels = (
        reflection_labels(local_cluster_id, remote_cluster_id)
        if node_name is None
        else reflection_labels_with_node(local_cluster_id, remote_cluster_id, node_name)
    )
    return ",".join(f"{k}={v}" for k, v in labels.items())


def is_reflected(obj: ReadObj | None, local_cluster_id: str, remote_cluster_id: str) -> bool:
    """Ownership guard: True only if both origin and destination labels carry our cluster ids."""
    labels = labels_of(obj)
    return (
        labels.get(c.ORIGIN_LABEL) == local_cluster_id
        and labels.get(c.DESTINATION_LABEL) == remote_cluster_id
    )


def filter_keys(values: Mapping[str, str] | None, excluded: Iterable[str] = ()) -> dict[str, str]:
    """Copy of ``values`` without the ``excluded`` keys (exact match, like Liqo's FilterBlacklist)."""
    drop = set(excluded)
    return {k: v for k, v in (values or {}).items() if k not in drop}


def reflected_labels(
    local_labels: Mapping[str, str] | None,
    *,
    local_cluster_id: str,
    remote_cluster_id: str,
    not_reflected: Iterable[str] = (),
    node_name: str | None = None,
) -> dict[str, str]:
    """Labels for a remote object: local ones minus local-only and ``not_reflected`` keys, then ours on top.

    The reflection labels are applied last, so a local object can never forge or remove the origin,
    destination or nodename labels that the ownership guard and the per-node keyer rely on.
    """
    labels = filter_keys(local_labels, (*LOCAL_ONLY_LABELS, *not_reflected))
    if node_name is None:
        labels.update(reflection_labels(local_cluster_id, remote_cluster_id))
    else:
        labels.update(reflection_labels_with_node(local_cluster_id, remote_cluster_id, node_name))
    return labels


def reflected_annotations(
    local_annotations: Mapping[str, str] | None, *, not_reflected: Iterable[str] = ()
) -> dict[str, str]:
    return filter_keys(local_annotations, (*LOCAL_ONLY_ANNOTATIONS, *not_reflected))
