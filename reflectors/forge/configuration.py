"""Referenced Secrets/ConfigMaps -> server-side-apply bodies for the pool (LIQO §5), and the skip rules."""

from __future__ import annotations

import base64
import binascii
import contextlib
import copy
import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

import orjson

from reflectors.forge import constants as c
from reflectors.forge.labels import reflected_annotations, reflected_labels
from reflectors.forge.names import is_reserved_configmap_name, remote_configmap_name
from reflectors.forge.pods import KubeObj, ReadObj, annotations_of, labels_of, meta, name_of
from reflectors.forge.references import CONFIGMAP, SECRET

SKIP_SA_TOKEN = "secrets holding service account tokens are never reflected"
SKIP_DENIED = f"marked with the {c.SKIP_REFLECTION_ANNOTATION} annotation"
SKIP_NOT_ALLOWED = f"not marked with the {c.ALLOW_REFLECTION_ANNOTATION} annotation"
SKIP_CONFLICT = f"both {c.ALLOW_REFLECTION_ANNOTATION} and {c.SKIP_REFLECTION_ANNOTATION} are set"

# A label key's name part (after the prefix): at most 63 characters, alphanumeric at both ends.
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
ReleaseAction = Literal["delete", "unmark", "keep"]


def _set(annotations: dict[str, str], key: str) -> bool:
    """An annotation counts when present and not (case-insensitively) "false"."""
    return key in annotations and annotations[key].lower() != "false"


def policy_skip_reason(obj: ReadObj, policy: str = c.POLICY_DENY_LIST) -> str | None:
    """Why the DenyList/AllowList policy skips ``obj`` (LIQO §3.2), or None to reflect it.

    Liqo's policy check ignores a conflicting pair of annotations; we skip such an object instead, since
    one of them asks to keep it off the pool and copying data out cannot be undone.
    """
    annotations = annotations_of(obj)
    allow, deny = (
        _set(annotations, c.ALLOW_REFLECTION_ANNOTATION),
        _set(annotations, c.SKIP_REFLECTION_ANNOTATION),
    )
    if allow and deny:
        return SKIP_CONFLICT
    if policy == c.POLICY_DENY_LIST:
        return SKIP_DENIED if deny else None
    if policy == c.POLICY_ALLOW_LIST:
        return None if allow else SKIP_NOT_ALLOWED
    raise ValueError(f"ReflectionType value {policy!r} not supported")


def secret_skip_reason(local: ReadObj, *, policy: str = c.POLICY_DENY_LIST) -> str | None:
    """Service-account-token Secrets are never reflected (no Legacy-mode conversion); then the policy."""
    if local.get("type") == c.SERVICE_ACCOUNT_TOKEN_SECRET_TYPE:
        return SKIP_SA_TOKEN
    return policy_skip_reason(local, policy)


def configmap_skip_reason(local: ReadObj, *, policy: str = c.POLICY_DENY_LIST) -> str | None:
    """The root CA is reflected whatever the policy, unless explicitly annotated (Liqo rule)."""
    if name_of(local) == c.ROOT_CA_CONFIGMAP:
        annotations = annotations_of(local)
        allow = _set(annotations, c.ALLOW_REFLECTION_ANNOTATION)
        deny = _set(annotations, c.SKIP_REFLECTION_ANNOTATION)
        if allow and deny:
            return SKIP_CONFLICT
        return SKIP_DENIED if deny else None
    return policy_skip_reason(local, policy)


def reserved_name_reason(name: str, local_cluster_id: str) -> str | None:
    """Why a local ConfigMap named like the renamed root CA copy is refused (item: names never collide)."""
    if not is_reserved_configmap_name(name, local_cluster_id):
        return None
    return (
        f"the name is reserved on the pool for the copy of {c.ROOT_CA_CONFIGMAP}; "
        "rename the ConfigMap to offload pods that use it"
    )


def node_mark(node_name: str) -> str:
    """The label key by which virtual node ``node_name`` marks a shared copy it needs.

    Every node that maps the same remote namespace shares one copy per object (same name, as in Liqo), so
    each marks what it needs and a copy goes only when no mark is left. A node name that cannot be a label
    name (``--nodename`` is validated, but marks must never make an apply fail) is hashed.
    """
    if _LABEL_NAME.match(node_name):
        return f"{c.CONFIG_USER_LABEL_PREFIX}{node_name}"
    return f"{c.CONFIG_USER_LABEL_PREFIX}sha256-{hashlib.sha256(node_name.encode()).hexdigest()[:32]}"


def node_marks(obj: ReadObj | None) -> dict[str, str]:
    """The node marks on a remote copy (label key -> value)."""
    return {k: v for k, v in labels_of(obj).items() if k.startswith(c.CONFIG_USER_LABEL_PREFIX)}


def other_node_marks(obj: ReadObj | None, node_name: str) -> dict[str, str]:
    """Marks of the other nodes: kept by every write of ours, so one node never drops another's need."""
    own = node_mark(node_name)
    return {k: v for k, v in node_marks(obj).items() if k != own}


def kept_for_other_nodes(
    remote: ReadObj | None,
    node_name: str,
    labels_not_reflected: Iterable[str] = (),
    annotations_not_reflected: Iterable[str] = (),
) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations of a shared copy that our write keeps though we would not reflect them.

    Every node writes with one field manager, so a key left out of our apply is removed. On a copy
    other nodes mark, a key our offloadingPatch leaves out may be one another node reflects (its
    patch differs): removing it would make that node put it back, and two crossed patches would
    rewrite the copy for ever. So we keep their marks, and the remote's value of each key we leave
    out; the keys we do reflect are ours to set. A copy no other node marks keeps nothing.
    """
    marks = other_node_marks(remote, node_name)
    if not marks:
        return {}, {}
    skip_labels, skip_annotations = set(labels_not_reflected), set(annotations_not_reflected)
    labels = {k: v for k, v in labels_of(remote).items() if k in skip_labels}
    annotations = {k: v for k, v in annotations_of(remote).items() if k in skip_annotations}
    return {**labels, **marks}, annotations


def release_action(remote: ReadObj, node_name: str) -> ReleaseAction:
    """What a node that no longer needs ``remote`` does: delete it when no other node marks it, else
    remove its own mark ("unmark") or, without one, leave the copy alone ("keep").

    A copy with no marks at all (written before marks existed) is deleted, as it was then.
    """
    if not other_node_marks(remote, node_name):
        return "delete"
    return "unmark" if node_mark(node_name) in node_marks(remote) else "keep"


def is_service_account_secret(obj: ReadObj) -> bool:
    """A remote Secret holding reflected tokens (TokenAPI mode): not a plain Secret reflection target."""
    keys = labels_of(obj) | annotations_of(obj)
    return c.SA_SECRET_FOR_POD_NAME_KEY in keys and c.SA_SECRET_FOR_SERVICE_ACCOUNT_KEY in keys


def _metadata(
    local: ReadObj,
    name: str,
    remote_ns: str,
    local_id: str,
    remote_id: str,
    labels_not_reflected: Iterable[str],
    annotations_not_reflected: Iterable[str],
    node_name: str | None,
) -> KubeObj:
    # A local label can never forge a node mark (it would keep the copy alive for a node that is gone).
    local_labels = {k: v for k, v in labels_of(local).items() if not k.startswith(c.CONFIG_USER_LABEL_PREFIX)}
    labels = reflected_labels(
        local_labels,
        local_cluster_id=local_id,
        remote_cluster_id=remote_id,
        not_reflected=labels_not_reflected,
    )
    if node_name is not None:
        labels[node_mark(node_name)] = "true"
    return {
        "name": name,
        "namespace": remote_ns,
        "labels": labels,
        "annotations": reflected_annotations(annotations_of(local), not_reflected=annotations_not_reflected),
    }


# What each kind's remote copy carries besides its metadata.
_COPIED_FIELDS: dict[str, tuple[str, ...]] = {
    SECRET: ("type", "data", "immutable"),
    CONFIGMAP: ("data", "binaryData", "immutable"),
}


def forge_remote_copy(
    kind: str,
    local: ReadObj,
    *,
    remote_ns: str,
    local_id: str,
    remote_id: str,
    labels_not_reflected: Iterable[str] = (),
    annotations_not_reflected: Iterable[str] = (),
    node_name: str | None = None,
) -> KubeObj:
    """Apply body for the remote copy of a Secret (same name; ``type``, ``data``, ``immutable`` copied)
    or a ConfigMap (root CA renamed; ``data``, ``binaryData``, ``immutable`` copied).

    ``stringData`` never appears on a stored Secret, so ``data`` is complete. Callers check
    ``secret_skip_reason`` first; this function does not. ``node_name`` adds that node's mark.
    """
    name = name_of(local) if kind == SECRET else remote_configmap_name(name_of(local), local_id)
    body: KubeObj = {
        "apiVersion": "v1",
        "kind": kind,
        "metadata": _metadata(
            local,
            name,
            remote_ns,
            local_id,
            remote_id,
            labels_not_reflected,
            annotations_not_reflected,
            node_name,
        ),
    }
    for field in _COPIED_FIELDS[kind]:
        if local.get(field) is not None:
            body[field] = copy.deepcopy(local[field])
    return body


def missing_message(missing: Iterable[str]) -> str:
    """The Warning event on a pod kept Pending: which objects, never what they hold."""
    what = ", ".join(missing)
    return (
        f"Waiting for {what} before offloading the pod to the pool; "
        "references marked optional never wait for a missing object"
    )


def fingerprint(body: Mapping[str, Any]) -> str:
    """What a forged copy holds, hashed: our last write is recognised without keeping (Secret) data."""
    return hashlib.sha256(
        orjson.dumps(body, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    ).hexdigest()


def _contains(have: Mapping[str, Any] | None, want: Mapping[str, Any] | None) -> bool:
    have = have or {}
    return all(have.get(k) == v for k, v in (want or {}).items())


def _secret_type(obj: ReadObj) -> str:
    return str(obj.get("type") or "Opaque")


def copy_matches(remote: ReadObj, desired: ReadObj) -> bool:
    """Content equal; labels/annotations a superset (others may add theirs, as the provider does)."""
    for name in ("data", "binaryData"):
        if (remote.get(name) or {}) != (desired.get(name) or {}):
            return False
    if bool(remote.get("immutable")) != bool(desired.get("immutable")):
        return False
    if desired.get("kind") == SECRET and _secret_type(remote) != _secret_type(desired):
        return False
    return _contains(labels_of(remote), labels_of(desired)) and _contains(
        annotations_of(remote), annotations_of(desired)
    )


def needs_recreate(remote: ReadObj, desired: ReadObj) -> bool:
    """A Secret's type and an immutable object's content cannot change in place: delete, then create."""
    if desired.get("kind") == SECRET and _secret_type(remote) != _secret_type(desired):
        return True
    if not remote.get("immutable"):
        return False
    return any((remote.get(n) or {}) != (desired.get(n) or {}) for n in ("data", "binaryData")) or not bool(
        desired.get("immutable")
    )


def scrub(text: str, local: ReadObj | None) -> str:
    """Remove a Secret's values (encoded and decoded) from an API error message, just in case."""
    for value in ((local or {}).get("data") or {}).values():
        if not isinstance(value, str) or not value:
            continue
        text = text.replace(value, "<redacted>")
        with contextlib.suppress(binascii.Error, ValueError):
            decoded = base64.b64decode(value, validate=True).decode("utf-8", "ignore")
            if len(decoded) >= 4:
                text = text.replace(decoded, "<redacted>")
    return text


def resource_version(obj: ReadObj | None) -> str:
    return str(meta(obj).get("resourceVersion") or "")
