"""Names of remote objects: namespaces (LIQO §3.3), the renamed root CA ConfigMap and token Secrets (§4.5)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from reflectors.forge import constants as c

DNS1123_LABEL_MAX = 63
_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class MappingStrategy(StrEnum):
    DEFAULT_NAME = "DefaultName"
    ENFORCE_SAME_NAME = "EnforceSameName"
    SELECTED_NAME = "SelectedName"


@dataclass(frozen=True)
class InvalidName:
    """A name that cannot be used; ``reason`` is meant for a log line or an event."""

    name: str
    reason: str


def is_dns1123_label(value: str) -> bool:
    return len(value) <= DNS1123_LABEL_MAX and bool(_DNS1123_LABEL.match(value))


def remote_namespace_name(
    local_namespace: str,
    *,
    strategy: str,
    local_cluster_id: str,
    selected_name: str = "",
) -> str | InvalidName:
    """Remote namespace for ``local_namespace``, or ``InvalidName``.

    An unknown strategy falls back to DefaultName, as Liqo does. Liqo never checks the result, so an over-long
    DefaultName (``<ns>-<consumer id>`` > 63 chars) only fails later on the provider; we report it instead of
    truncating, because a truncated name could collide with another namespace's mapping.
    """
    if strategy == MappingStrategy.ENFORCE_SAME_NAME:
        name = local_namespace
    elif strategy == MappingStrategy.SELECTED_NAME:
        name = selected_name
        if not name:
            return InvalidName(name, "strategy SelectedName requires spec.remoteNamespaceName")
    else:
        name = f"{local_namespace}-{local_cluster_id}"
    if len(name) > DNS1123_LABEL_MAX:
        return InvalidName(
            name,
            f"remote namespace name {name!r} is {len(name)} characters long, over the limit of "
            f"{DNS1123_LABEL_MAX}; shorten namespace {local_namespace!r} or use strategy SelectedName",
        )
    if not is_dns1123_label(name):
        return InvalidName(name, f"remote namespace name {name!r} is not a valid DNS-1123 label")
    return name


def mapping_problem(local_namespace: str, entry: Mapping[str, Any] | None) -> str | None:
    """Why the pool refused to map ``local_namespace`` (a NamespaceMap ``currentMapping`` entry), or None
    while the mapping is fine or still in progress. Liqo leaves pods in such a namespace Pending in
    silence; we name the cause and the fix."""
    if not entry or entry.get("phase") != "CreationLoopBackOff":
        return None
    remote = str(entry.get("remoteNamespace") or "")
    if len(remote) > DNS1123_LABEL_MAX:
        return (
            f"the pool cannot create remote namespace {remote!r}: {len(remote)} characters, over the "
            f"limit of {DNS1123_LABEL_MAX}; shorten namespace {local_namespace!r} or set "
            "namespaceMappingStrategy: SelectedName with a shorter remoteNamespaceName in its "
            "NamespaceOffloading; the pod waits until then"
        )
    if remote and not is_dns1123_label(remote):
        return (
            f"the pool cannot create remote namespace {remote!r}: not a valid DNS-1123 label; set "
            "namespaceMappingStrategy: SelectedName with a valid remoteNamespaceName in the "
            "NamespaceOffloading; the pod waits until then"
        )
    return (
        f"the pool keeps failing to create remote namespace {remote!r} for namespace "
        f"{local_namespace!r} (mapping phase CreationLoopBackOff); "
        "the pod waits until the mapping is Accepted"
    )


def remote_configmap_name(name: str, local_cluster_id: str) -> str:
    """``kube-root-ca.crt`` becomes ``kube-root-ca.crt.<first 5 chars of the consumer id>`` (Liqo rule).

    The pool has its own ``kube-root-ca.crt`` in every namespace; the rename avoids the collision. An ``a`` is
    appended when the suffix ends with a non-alphanumeric character, to keep the name valid.
    """
    if name != c.ROOT_CA_CONFIGMAP:
        return name
    renamed = f"{c.ROOT_CA_CONFIGMAP}.{local_cluster_id[:5]}"
    if not renamed[-1].isascii() or not renamed[-1].isalnum():
        renamed += "a"
    return renamed


def is_reserved_configmap_name(name: str, local_cluster_id: str) -> bool:
    """True for a LOCAL ConfigMap whose name is the one the root CA copy takes on the pool.

    Such an object cannot be copied under its own name without overwriting the renamed root CA (and a pod
    mounting it would get the CA instead), so it is never a reflection target.
    """
    renamed = remote_configmap_name(c.ROOT_CA_CONFIGMAP, local_cluster_id)
    return name != c.ROOT_CA_CONFIGMAP and name == renamed


def local_configmap_name(remote_name: str, local_cluster_id: str) -> str:
    """Inverse of ``remote_configmap_name`` (maps remote events on the renamed CA back to the local key)."""
    if remote_name == remote_configmap_name(c.ROOT_CA_CONFIGMAP, local_cluster_id):
        return c.ROOT_CA_CONFIGMAP
    return remote_name


def service_account_secret_name(pod_name: str) -> str:
    """Remote Secret holding a pod's TokenAPI tokens."""
    return f"{pod_name}-token"


def service_account_token_key(volume_name: str, path: str) -> str:
    """Key of one token in that Secret: ``<volume>-<hex(sha256(path))[:6]>``."""
    return f"{volume_name}-{hashlib.sha256(path.encode()).hexdigest()[:6]}"
