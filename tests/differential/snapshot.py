"""Normalise what an implementation left in the testbed and diff two such snapshots (pure, no I/O).

A snapshot is plain JSON: per kind (shadowpod, pod-status, events, secrets, configmaps, node, lease, writes) a
structure in which lists of named things became maps keyed by name, and values that are unique by nature
(uids, times, resourceVersions, ports) are dropped or replaced by placeholders. ``diff`` returns one line per difference,
``<kind>: <op> <path>`` with op ``-`` (only Liqo), ``+`` (only vkbridge), ``~`` (both, values differ).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

Obj = dict[str, Any]

# Fields that are unique by nature; never compared (the explicit ignore list of the suite).
IGNORED_META = (
    "uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink",
    "deletionTimestamp", "deletionGracePeriodSeconds", "ownerReferences",
)  # fmt: skip
IGNORED_TIME_KEYS = ("lastTransitionTime", "lastProbeTime", "startTime", "startedAt", "finishedAt",
                     "lastHeartbeatTime", "containerID", "imageID")  # fmt: skip
# Node status fields that are per machine or not ours to set: images, volumes; nodeInfo's host identities.
IGNORED_NODE_STATUS = ("images", "volumesInUse", "volumesAttached")
IGNORED_NODE_INFO = ("machineID", "systemUUID", "bootID")


# Names the API server generates at random (the service-account token volume of every pod).
GENERATED_NAMES = re.compile(r"\bkube-api-access-[a-z0-9]{5}\b")


def placeholders(value: Any, subst: Mapping[str, str]) -> Any:
    """Replace each run-specific string (namespace names, uids, generated names) by a placeholder."""
    if isinstance(value, str):
        for real, ph in subst.items():
            if real:
                value = value.replace(real, ph)
        return GENERATED_NAMES.sub("kube-api-access-<RAND>", value)
    if isinstance(value, list):
        return [placeholders(v, subst) for v in value]
    if isinstance(value, dict):
        return {placeholders(k, subst): placeholders(v, subst) for k, v in value.items()}
    return value


def by_key(items: Iterable[Obj] | None, key: str = "name") -> Obj:
    """A list of named things as a map, so an order change or an insertion is one difference, not many."""
    return {str(i.get(key)): i for i in items or []}


def _scrub(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in IGNORED_TIME_KEYS}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def meta(obj: Obj) -> Obj:
    m = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in IGNORED_META}
    m.pop("namespace", None)
    m.setdefault("labels", {})
    m.setdefault("annotations", {})
    return m


def pod_spec(spec: Obj) -> Obj:
    """A pod spec with its named lists keyed (containers, env, volumes, mounts, tolerations)."""
    out = dict(spec)
    for field in ("containers", "initContainers"):
        if field in out:
            cs = {}
            for c in out[field]:
                c = dict(c)
                c["env"] = by_key(c.get("env"))
                c["volumeMounts"] = by_key(c.get("volumeMounts"))
                cs[c["name"]] = c
            out[field] = cs
    out["volumes"] = by_key(out.get("volumes"))
    out["tolerations"] = by_key(out.get("tolerations"), "key")
    return out


def shadowpod(sp: Obj | None) -> Obj | None:
    if sp is None:
        return None
    spec = dict(sp.get("spec") or {})
    if "pod" in spec:
        spec["pod"] = pod_spec(spec["pod"])
    return {"metadata": meta(sp), "spec": spec}


def pod_status(pod: Obj | None) -> Obj | None:
    """Phase, reason, conditions (type -> status), container statuses (name -> ready/state kind/...)."""
    if pod is None:
        return None
    st = pod.get("status") or {}
    containers = {}
    for c in st.get("containerStatuses") or []:
        containers[c["name"]] = {
            "ready": c.get("ready"),
            "started": c.get("started"),
            "restartCount": c.get("restartCount"),
            "image": c.get("image"),
            "state": {k: _scrub(v) for k, v in (c.get("state") or {}).items()},
        }
    return {
        "phase": st.get("phase"),
        "reason": st.get("reason"),
        "conditions": {c["type"]: c.get("status") for c in st.get("conditions") or []},
        "containerStatuses": containers,
        "hostIP": st.get("hostIP"),
        "hasPodIP": bool(st.get("podIP")),
        "labels": (pod.get("metadata") or {}).get("labels") or {},
    }


def events(items: Iterable[Obj]) -> Obj:
    """Events about one object as the set of (reason, type), counts ignored (they depend on timing)."""
    return {f"{e.get('reason')}/{e.get('type')}": True for e in items}


def configs(items: Iterable[Obj], skip: Iterable[str] = ()) -> Obj:
    """Remote Secrets or ConfigMaps: name -> labels, type and data keys (never the values)."""
    out = {}
    for o in items:
        name = o["metadata"]["name"]
        if name in skip:
            continue
        keys = sorted({*(o.get("data") or {}), *(o.get("binaryData") or {}), *(o.get("stringData") or {})})
        out[name] = {"labels": (o["metadata"].get("labels") or {}), "type": o.get("type"), "keys": keys}
    return out


def node(n: Obj, listen_port: int | None = None) -> Obj:
    """The Node; daemonEndpoints' port becomes ``<LISTEN_PORT>`` when it is the one the process was given."""
    st = dict(n.get("status") or {})
    port = ((st.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    if port is not None:
        st["daemonEndpoints"] = {
            "kubeletEndpoint": {"Port": "<LISTEN_PORT>" if port == listen_port else port}
        }
    st["nodeInfo"] = {k: v for k, v in (st.get("nodeInfo") or {}).items() if k not in IGNORED_NODE_INFO}
    return {
        "metadata": {
            "labels": (n.get("metadata") or {}).get("labels") or {},
            "annotations": dict.fromkeys((n.get("metadata") or {}).get("annotations") or {}, True),
        },
        "spec": {
            "taints": by_key((n.get("spec") or {}).get("taints"), "key"),
            "unschedulable": (n.get("spec") or {}).get("unschedulable"),
        },
        "status": {
            "capacity": st.get("capacity"),
            "allocatable": st.get("allocatable"),
            "conditions": {
                c["type"]: {"status": c.get("status"), "reason": c.get("reason")}
                for c in st.get("conditions") or []
            },
            "addresses": sorted(a.get("type", "") for a in st.get("addresses") or []),
            **{
                k: v
                for k, v in st.items()
                if k not in (*IGNORED_NODE_STATUS, "capacity", "allocatable", "conditions", "addresses")
            },
        },
    }


def lease(obj: Obj | None) -> Obj | None:
    """The node Lease: holder, duration, owner (kind/name) and metadata; renew times are compared apart."""
    if obj is None:
        return None
    spec = obj.get("spec") or {}
    owners = {
        f"{o.get('kind')}/{o.get('name')}": True
        for o in (obj.get("metadata") or {}).get("ownerReferences") or []
    }
    return {
        "metadata": meta(obj),
        "owners": owners,
        "spec": {k: v for k, v in spec.items() if k not in ("renewTime", "acquireTime")},
        "has": {k: k in spec for k in ("renewTime", "acquireTime")},
    }


def _esc(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def _flatten(value: Any, path: str, out: dict[str, Any]) -> None:
    if isinstance(value, dict):  # an empty map is the same as an absent one (both impls omit freely)
        for k, v in value.items():
            _flatten(v, f"{path}/{_esc(str(k))}", out)
    elif isinstance(value, list) and value and any(isinstance(v, dict | list) for v in value):
        for i, v in enumerate(value):
            _flatten(v, f"{path}/{i}", out)
    else:
        out[path or "/"] = value


def diff(liqo: Mapping[str, Any], ours: Mapping[str, Any]) -> set[str]:
    """Differences between two snapshots, as ``<kind>: -|+|~ <path>`` lines."""
    found: set[str] = set()
    for kind in sorted({*liqo, *ours}):
        left, right = liqo.get(kind), ours.get(kind)
        if (left is None) != (right is None):  # the whole object exists on one side only: one line
            found.add(f"{kind}: {'-' if right is None else '+'} /")
            continue
        a: dict[str, Any] = {}
        b: dict[str, Any] = {}
        _flatten(left, "", a)
        _flatten(right, "", b)
        for p in a.keys() - b.keys():
            found.add(f"{kind}: - {p}")
        for p in b.keys() - a.keys():
            found.add(f"{kind}: + {p}")
        for p in a.keys() & b.keys():
            if a[p] != b[p]:
                found.add(f"{kind}: ~ {p}")
    return found
