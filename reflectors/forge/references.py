"""Secrets and ConfigMaps a pod references: exactly what Extend copies to the pool (DESIGN §1, GUIDE §8)."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from reflectors.forge import constants as c
from reflectors.forge.names import remote_configmap_name
from reflectors.forge.pods import ReadObj, annotations_of, spec_of
from reflectors.forge.shadowpod import APIServerSupport, effective_apiserver_support

RefKind = Literal["Secret", "ConfigMap"]
SECRET: RefKind = "Secret"
CONFIGMAP: RefKind = "ConfigMap"
# What travels to the pool only: ephemeral containers are never copied to the ShadowPod (see
# shadowpod.COPIED_SPEC_FIELDS), so what only they reference must not be copied either.
CONTAINER_LISTS = ("containers", "initContainers")


@dataclass(frozen=True, order=True)
class Reference:
    """One referenced object, by its LOCAL name.

    ``optional`` is True only if every reference to the object is marked optional, so the pod can start
    without it. ``renamed`` marks ``kube-root-ca.crt``, which lives remotely under ``remote_name``.
    imagePullSecrets cannot be marked optional and are reported as required.
    """

    kind: RefKind
    name: str
    optional: bool = False
    renamed: bool = False

    def remote_name(self, local_cluster_id: str) -> str:
        return remote_configmap_name(self.name, local_cluster_id) if self.renamed else self.name


def _raw_refs(pod: ReadObj) -> Iterator[tuple[RefKind, str, bool]]:
    spec = spec_of(pod)
    for volume in spec.get("volumes") or ():
        if secret := volume.get("secret"):
            yield SECRET, secret.get("secretName") or "", bool(secret.get("optional"))
        if configmap := volume.get("configMap"):
            yield CONFIGMAP, configmap.get("name") or "", bool(configmap.get("optional"))
        for source in (volume.get("projected") or {}).get("sources") or ():
            if secret := source.get("secret"):
                yield SECRET, secret.get("name") or "", bool(secret.get("optional"))
            if configmap := source.get("configMap"):
                yield CONFIGMAP, configmap.get("name") or "", bool(configmap.get("optional"))
    for list_name in CONTAINER_LISTS:
        for container in spec.get(list_name) or ():
            yield from _container_refs(container)
    for pull_secret in spec.get("imagePullSecrets") or ():
        yield SECRET, pull_secret.get("name") or "", False


def _container_refs(container: Mapping[str, Any]) -> Iterator[tuple[RefKind, str, bool]]:
    for env in container.get("env") or ():
        value_from = env.get("valueFrom") or {}
        if ref := value_from.get("secretKeyRef"):
            yield SECRET, ref.get("name") or "", bool(ref.get("optional"))
        if ref := value_from.get("configMapKeyRef"):
            yield CONFIGMAP, ref.get("name") or "", bool(ref.get("optional"))
    for env_from in container.get("envFrom") or ():
        if ref := env_from.get("secretRef"):
            yield SECRET, ref.get("name") or "", bool(ref.get("optional"))
        if ref := env_from.get("configMapRef"):
            yield CONFIGMAP, ref.get("name") or "", bool(ref.get("optional"))


def pod_references(pod: ReadObj, apiserver_support: str = "disabled") -> tuple[Reference, ...]:
    """Every Secret/ConfigMap the pod references, deduplicated, sorted by (kind, name).

    With the per-pod annotation ``liqo.io/api-server-support: remote`` honoured (API server support on)
    the pod talks to the pool's API server and mounts the pool's own ``kube-root-ca.crt``; that reference
    is then not ours to reflect and is omitted. With support off the annotation is ignored, as in the forge.
    """
    remote_apiserver = (
        effective_apiserver_support(apiserver_support, annotations_of(pod)) is APIServerSupport.REMOTE
    )
    optional_by_key: dict[tuple[RefKind, str], bool] = {}
    for kind, name, optional in _raw_refs(pod):
        if not name:
            continue
        key = (kind, name)
        optional_by_key[key] = optional_by_key.get(key, True) and optional
    refs = []
    for (kind, name), optional in optional_by_key.items():
        is_root_ca = kind == CONFIGMAP and name == c.ROOT_CA_CONFIGMAP
        if is_root_ca and remote_apiserver:
            continue
        refs.append(Reference(kind, name, optional, renamed=is_root_ca))
    return tuple(sorted(refs))


# The upstream virtual-kubelet's reasons (node/env.go), told in addition to Liqo's FailedReflection.
EVENT_MANDATORY_NOT_FOUND: dict[RefKind, str] = {
    SECRET: "MandatorySecretNotFound",
    CONFIGMAP: "MandatoryConfigMapNotFound",
}
EVENT_OPTIONAL_NOT_FOUND: dict[RefKind, str] = {
    SECRET: "OptionalSecretNotFound",
    CONFIGMAP: "OptionalConfigMapNotFound",
}


EventType = Literal["Normal", "Warning"]


def not_found_events(absent: tuple[Reference, ...], *, optional: bool) -> list[tuple[EventType, str, str]]:
    """(type, reason, message) per missing reference of one kind of optionality, upstream's wording.

    Mandatory ones are Warnings (the pod is held back); optional ones are Normal (the pod is sent
    without them, which is what ``optional`` asks for; upstream emits a Warning there).
    """
    kind_word = {SECRET: "secret", CONFIGMAP: "configmap"}
    out: list[tuple[EventType, str, str]] = []
    for ref in absent:
        if ref.optional != optional:
            continue
        reasons = EVENT_OPTIONAL_NOT_FOUND if optional else EVENT_MANDATORY_NOT_FOUND
        etype: EventType = "Normal" if optional else "Warning"
        out.append((etype, reasons[ref.kind], f"{kind_word[ref.kind]} {c.go_quote(ref.name)} not found"))
    return out


def secret_names(refs: tuple[Reference, ...]) -> frozenset[str]:
    return frozenset(r.name for r in refs if r.kind == SECRET)


def configmap_names(refs: tuple[Reference, ...]) -> frozenset[str]:
    return frozenset(r.name for r in refs if r.kind == CONFIGMAP)
