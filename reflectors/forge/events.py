"""Remote pod Events -> local Events on the local pod, so users can debug without pool access (DESIGN §1)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

import orjson

from reflectors.forge import constants as c
from reflectors.forge.jsoncopy import json_copy
from reflectors.forge.labels import filter_keys, reflected_labels
from reflectors.forge.pods import (
    KubeObj,
    ReadObj,
    annotations_of,
    labels_of,
    name_of,
    namespace_of,
    uid_of,
)
from reflectors.forge.timefmt import rfc3339

REMOTE_SUFFIX = " (remote)"
# Involved objects whose events belong to the local pod of the same name.
POD_KINDS = frozenset({("v1", "Pod"), (c.SHADOWPOD_API_VERSION, c.SHADOWPOD_KIND)})
# Copied verbatim: they passed the pool's validation, so they pass ours.
COPIED_FIELDS = (
    "reason",
    "message",
    "type",
    "count",
    "firstTimestamp",
    "lastTimestamp",
    "eventTime",
    "series",
    "action",
    "related",
    "reportingComponent",
    "reportingInstance",
)
# (component, reason) of pool Events that are not copied home: the pool scheduler's "Scheduled" names a
# pool node the user cannot reach, and the local pod already has its own (naming our virtual node).
# Copying it cost one consumer write per pod for nothing.
KUBELET = "kubelet"
NOT_REFLECTED = frozenset({("default-scheduler", "Scheduled")})
# What changes when the pool aggregates a repeated event; timestamps move together with count/series.
MUTABLE_FIELDS = ("reason", "message", "type", "count", "series")
# What an update sends: the aggregated fields and the times moving with them.
TRACKED_FIELDS = (*MUTABLE_FIELDS, "lastTimestamp", "eventTime")


def forge_local_event(
    remote_event: ReadObj,
    local_obj: ReadObj | None,
    *,
    local_id: str,
    remote_id: str,
    now: datetime,
    labels_not_reflected: Iterable[str] = (),
    annotations_not_reflected: Iterable[str] = (),
    node_name: str | None = None,
) -> KubeObj | None:
    """The local copy of a remote Event about a pod (or its ShadowPod), or None when it is not ours to copy.

    With ``node_name``, the pool kubelet's Events are the node's kubelet's (source ``kubelet`` on that host,
    as ``--field-selector source=kubelet`` and tools following a pod's start look for them; the pool
    worker's name stays on the pool); every other component keeps Liqo's " (remote)" suffix.

    The name is the remote Event's name, so reflecting the same Event again addresses the same local object.
    ``involvedObject`` is re-pointed to the local pod (namespace and UID; kind Pod, also for ShadowPod events,
    so ``kubectl describe pod`` shows them). ``now`` stands in for first/last timestamps only when the remote
    Event has no time at all.
    """
    involved = remote_event.get("involvedObject") or {}
    if (involved.get("apiVersion", ""), involved.get("kind", "")) not in POD_KINDS:
        return None
    if local_obj is None or not uid_of(local_obj) or involved.get("name") != name_of(local_obj):
        return None

    source = remote_event.get("source") or {}
    component = source.get("component") or remote_event.get("reportingComponent") or ""
    if (component, remote_event.get("reason")) in NOT_REFLECTED:
        return None
    as_node_kubelet = node_name is not None and component == KUBELET
    local_source: KubeObj
    if as_node_kubelet:
        local_source = {"component": KUBELET, "host": node_name}
    else:
        local_source = {"component": f"{component}{REMOTE_SUFFIX}" if component else REMOTE_SUFFIX.strip()}
        if source.get("host"):
            local_source["host"] = source["host"]

    local_involved: KubeObj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": name_of(local_obj),
        "namespace": namespace_of(local_obj),
        "uid": uid_of(local_obj),
    }
    if involved.get("fieldPath"):
        local_involved["fieldPath"] = involved["fieldPath"]

    event: KubeObj = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": name_of(remote_event),
            "namespace": namespace_of(local_obj),
            "labels": reflected_labels(
                labels_of(remote_event),
                local_cluster_id=local_id,
                remote_cluster_id=remote_id,
                not_reflected=labels_not_reflected,
            ),
            "annotations": filter_keys(annotations_of(remote_event), annotations_not_reflected),
        },
        "involvedObject": local_involved,
        "source": local_source,
    }
    for field in COPIED_FIELDS:
        if remote_event.get(field) is not None:
            event[field] = json_copy(remote_event[field])
    if not any(event.get(k) for k in ("firstTimestamp", "lastTimestamp", "eventTime")):
        event["firstTimestamp"] = event["lastTimestamp"] = rfc3339(now)
    if as_node_kubelet:
        if event.get("reportingComponent"):
            event["reportingComponent"] = KUBELET
        if event.get("reportingInstance"):
            event["reportingInstance"] = node_name
    return event


def aggregation_digest(event: ReadObj) -> int:
    """What tells that the pool aggregated the event further (count, series or message moved), hashed.

    A local copy's digest is all we keep of it (~3 copied Events per pod, kept an hour: as the fields
    themselves ~200 bytes each). Timestamps are not in it: they only move with ``count``/``series``, and
    one that came from ``now`` would otherwise differ on every forge. Unequal fields with equal digests
    (one chance in 2**64, Python's keyed hash) would only hold an update back until the next change.
    """
    return hash(orjson.dumps({k: event.get(k) for k in MUTABLE_FIELDS}, option=orjson.OPT_SORT_KEYS))


def local_event(
    remote_event: ReadObj,
    local_pod: ReadObj | None,
    *,
    local_id: str,
    remote_id: str,
    now: datetime,
    node_name: str | None = None,
) -> KubeObj | None:
    """The local copy of a remote pod Event (see ``forge_local_event``), or None when it is not ours.

    ``reportingComponent`` is suffixed like ``source.component`` on legacy Events only: an Event with an
    ``eventTime`` (events.k8s.io style, e.g. the scheduler's) must carry a qualified name there, and the
    API server rejects "default-scheduler (remote)" with 422.
    """
    event = forge_local_event(
        remote_event, local_pod, local_id=local_id, remote_id=remote_id, now=now, node_name=node_name
    )
    if event is None:
        return None
    reporting = event.get("reportingComponent")
    as_node_kubelet = node_name is not None and (event.get("source") or {}).get("component") == KUBELET
    if (
        reporting
        and not as_node_kubelet
        and not event.get("eventTime")
        and not str(reporting).endswith(REMOTE_SUFFIX)
    ):
        event["reportingComponent"] = f"{reporting}{REMOTE_SUFFIX}"
    return event


def event_patch(desired: ReadObj) -> KubeObj:
    """Merge patch taking a local copy's tracked fields to ``desired``'s, nulling those it lacks (a no-op
    where the copy lacks them too); firstTimestamp stays as it was. Every tracked field, not only those
    that moved: what we wrote last is kept as a digest (``aggregation_digest``), not as fields."""
    return {key: desired.get(key) for key in TRACKED_FIELDS}


def spam_key(local_pod: ReadObj) -> tuple[str, str, str]:
    """Per local pod (namespace, name, uid): a re-created pod starts with a full bucket, like client-go."""
    pod_meta = local_pod.get("metadata") or {}
    return (str(pod_meta.get("namespace", "")), str(pod_meta.get("name", "")), str(pod_meta.get("uid", "")))
