"""Local Pod -> remote ShadowPod (LIQO §4.4, §4.5).

The spec is forged once, at creation, and frozen afterwards (invariant 5): most pod spec fields are immutable
and the provider would not propagate changes anyway. Only labels and annotations follow the local pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from enum import StrEnum
from typing import Any

from reflectors.forge import constants as c
from reflectors.forge.jsoncopy import json_copy
from reflectors.forge.labels import (
    LOCAL_ONLY_LABELS,
    PROVIDER_OWNED_LABELS,
    filter_keys,
    reflected_annotations,
    reflected_labels,
)
from reflectors.forge.names import (
    remote_configmap_name,
    service_account_secret_name,
    service_account_token_key,
)
from reflectors.forge.pods import (
    KubeObj,
    ReadObj,
    annotations_of,
    labels_of,
    meta,
    name_of,
    namespace_of,
    service_account_name,
    spec_of,
    uid_of,
)

# Pod spec fields copied verbatim at creation; every other field is dropped (nodeName, nodeSelector,
# affinity, schedulerName, priority*, preemptionPolicy, overhead, ephemeralContainers, os, schedulingGates,
# resourceClaims, the deprecated serviceAccount, readinessGates: nothing on the pool would set
# their conditions, so Ready is computed with them at home, forge.status.with_readiness_gates, ...). Order
# follows Liqo's RemotePodSpec, plus pod-level ``resources`` (KEP-2837, on by default since Kubernetes 1.34;
# Liqo v1.2 drops it): without it the pool would run the pod BestEffort while the grant charges its
# pod-level requests; and ``hostUsers`` (Liqo drops it): ``false`` asks for a user namespace, and running
# the pod without one would be a silent downgrade; a pool that cannot give one fails the pod, in its status
# and Events, which come home.
COPIED_SPEC_FIELDS: tuple[str, ...] = (
    "containers",
    "initContainers",
    "resources",
    "volumes",
    "activeDeadlineSeconds",
    "dnsConfig",
    "dnsPolicy",
    "enableServiceLinks",
    "hostAliases",
    "hostname",
    "hostUsers",
    "imagePullSecrets",
    "restartPolicy",
    "securityContext",
    "serviceAccountName",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "subdomain",
    "terminationGracePeriodSeconds",
    "topologySpreadConstraints",
)
# Invasive settings that may not work on the pool: always forced off. hostNetwork/hostIPC/hostPID are never
# copied, so they are off by absence: Liqo forces them false in Go fields tagged omitempty, which puts no
# such key on its ShadowPod; absent, ours is the same object on the wire (the differential suite checks).
FORCED_SPEC_FIELDS: dict[str, Any] = {
    "automountServiceAccountToken": False,
}
DEFAULT_ANTI_AFFINITY_EXCLUDED = (
    c.CONTROLLER_REVISION_HASH_LABEL,
    c.POD_TEMPLATE_HASH_LABEL,
    c.STATEFULSET_POD_NAME_LABEL,
)
CONTAINER_LISTS = ("containers", "initContainers")

SpecMutator = Callable[[KubeObj], None]


class APIServerSupport(StrEnum):
    """How offloaded pods reach the consumer API server (``--enable-apiserver-support`` + auto-detection)."""

    DISABLED = "disabled"
    LEGACY = "legacy"
    TOKENAPI = "tokenapi"
    REMOTE = "remote"  # only through the per-pod annotation: the pod talks to the pool's API server


class ForgeError(ValueError):
    """The local pod cannot be forged into a ShadowPod (reported as FailedReflection, then retried)."""


def effective_apiserver_support(mode: str, annotations: Mapping[str, str]) -> APIServerSupport:
    """The node-wide mode, overridden per pod by ``liqo.io/api-server-support: disabled|remote``.

    ``remote`` is honoured only while API server support is on: with it off, a pod annotation must not
    bring back the token volumes, automount and remote ServiceAccount the disabled mode strips (Liqo
    lets it; see ``ignored_apiserver_override``).
    """
    try:
        support = APIServerSupport(mode.lower())
    except ValueError:
        raise ValueError(f"unknown API server support mode {mode!r}") from None
    override = annotations.get(c.APISERVER_SUPPORT_ANNOTATION)
    if override == c.APISERVER_SUPPORT_ANNOTATION_DISABLED:
        return APIServerSupport.DISABLED
    if override == c.APISERVER_SUPPORT_ANNOTATION_REMOTE and support is not APIServerSupport.DISABLED:
        return APIServerSupport.REMOTE
    return support


def ignored_apiserver_override(mode: str, annotations: Mapping[str, str]) -> str | None:
    """The Warning event message for a pod asking for ``remote`` while API server support is off."""
    if annotations.get(c.APISERVER_SUPPORT_ANNOTATION) != c.APISERVER_SUPPORT_ANNOTATION_REMOTE:
        return None
    if effective_apiserver_support(mode, annotations) is APIServerSupport.REMOTE:
        return None
    return (
        f"annotation {c.APISERVER_SUPPORT_ANNOTATION}={c.APISERVER_SUPPORT_ANNOTATION_REMOTE} ignored: "
        "API server support is disabled on this virtual node, so the pod runs without service account "
        "tokens and without a remote ServiceAccount"
    )


def local_pod_uid_of(shadow: ReadObj | None) -> str | None:
    """The local pod UID a ShadowPod was made for; None when it carries none (Liqo's VK, older vkbridge)."""
    return annotations_of(shadow).get(c.LOCAL_POD_UID_ANNOTATION) or None


def is_stale_shadow(shadow: ReadObj, local_pod: ReadObj) -> bool:
    """True if ``shadow`` was made for an earlier local pod of the same name (e.g. StatefulSet web-0
    after a force delete): it must be replaced, never adopted. Unmarked ShadowPods are adopted."""
    recorded = local_pod_uid_of(shadow)
    return recorded is not None and recorded != uid_of(local_pod)


def controlling_shadow_uid(remote_pod: ReadObj | None) -> str | None:
    """The UID of the ShadowPod that controls a remote pod (the provider sets it), if any."""
    for ref in meta(remote_pod).get("ownerReferences") or ():
        if ref.get("controller") and ref.get("kind") == c.SHADOWPOD_KIND:
            return str(ref.get("uid") or "") or None
    return None


def remote_pod_of(shadow: ReadObj | None, remote_pod: ReadObj | None) -> ReadObj | None:
    """``remote_pod`` if it belongs to ``shadow``: a pod controlled by another ShadowPod (an earlier one of
    the same name, still going away) is not this one's, and its status must not be mirrored."""
    if remote_pod is None or shadow is None:
        return remote_pod
    owner = controlling_shadow_uid(remote_pod)
    return remote_pod if owner is None or owner == uid_of(shadow) else None


def forge_shadowpod(
    local_pod: ReadObj,
    *,
    remote_namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
    node_name: str,
    apiserver_support: str,
    offloading_patch: Mapping[str, Any] | None,
    existing: ReadObj | None,
    kubernetes_service_port: str = c.DEFAULT_KUBERNETES_SERVICE_PORT,
    home_apiserver_host: str = "",
    home_apiserver_port: str = "",
    kubernetes_service_ip: str = "",
    legacy_sa_secret_name: str = "",
) -> KubeObj:
    """The desired ShadowPod for ``local_pod``: a create body when ``existing`` is None, else an update body.

    The update body is ``existing`` with labels and annotations replaced and the spec untouched. Labels the
    provider writes (``liqo.io/creator-user``) are carried over so an update never fights its webhook.
    Raises ``ForgeError`` in legacy mode when a token volume needs ``legacy_sa_secret_name`` and it is empty.
    """
    patch = offloading_patch or {}
    local_labels = labels_of(local_pod)
    local_annotations = annotations_of(local_pod)
    labels = reflected_labels(
        local_labels,
        local_cluster_id=local_cluster_id,
        remote_cluster_id=remote_cluster_id,
        not_reflected=patch.get("labelsNotReflected") or (),
        node_name=node_name,
    )
    annotations = reflected_annotations(
        local_annotations, not_reflected=patch.get("annotationsNotReflected") or ()
    )
    if uid_of(local_pod):
        annotations[c.LOCAL_POD_UID_ANNOTATION] = uid_of(local_pod)  # ties the ShadowPod to this pod

    if existing is not None:
        metadata = json_copy(dict(meta(existing)))
        existing_labels = metadata.get("labels") or {}
        labels.update({k: v for k, v in existing_labels.items() if k in PROVIDER_OWNED_LABELS})
        metadata["labels"] = labels
        metadata["annotations"] = annotations
        return {
            "apiVersion": existing.get("apiVersion", c.SHADOWPOD_API_VERSION),
            "kind": existing.get("kind", c.SHADOWPOD_KIND),
            "metadata": metadata,
            "spec": json_copy(dict(existing.get("spec") or {})),
        }

    support = effective_apiserver_support(apiserver_support, local_annotations)
    mutators: list[SpecMutator] = [
        _apiserver_support_mutator(
            support,
            pod_name=name_of(local_pod),
            sa_name=service_account_name(local_pod),
            local_cluster_id=local_cluster_id,
            kubernetes_service_port=kubernetes_service_port,
            home_host=home_apiserver_host,
            home_port=home_apiserver_port,
            kubernetes_service_ip=kubernetes_service_ip,
            legacy_secret=legacy_sa_secret_name,
        ),
        _service_account_mutator(support, local_annotations),
        _node_selector_mutator(patch.get("nodeSelector") or {}),
        _tolerations_mutator(patch.get("tolerations") or ()),
        _affinity_mutator((patch.get("affinity") or {}).get("nodeAffinity")),
    ]
    anti_affinity = _anti_affinity_mutator(local_pod, local_labels, patch, node_name)
    if anti_affinity is not None:
        mutators.append(anti_affinity)
    mutators.append(_runtime_class_mutator(local_pod, patch))

    return {
        "apiVersion": c.SHADOWPOD_API_VERSION,
        "kind": c.SHADOWPOD_KIND,
        "metadata": {
            "name": name_of(local_pod),
            "namespace": remote_namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": {"pod": _remote_pod_spec(spec_of(local_pod), mutators)},
    }


def needs_update(existing: ReadObj, desired: ReadObj) -> bool:
    """Only metadata can change after creation; provider-owned labels are not drift."""
    have, want = meta(existing), meta(desired)
    return filter_keys(have.get("labels"), PROVIDER_OWNED_LABELS) != filter_keys(
        want.get("labels"), PROVIDER_OWNED_LABELS
    ) or dict(have.get("annotations") or {}) != dict(want.get("annotations") or {})


def forge_local_offloaded_label(local_pod: ReadObj) -> KubeObj | None:
    """SSA body marking the local pod as offloaded (``liqo.io/shadowPod=true``); None when already marked."""
    if labels_of(local_pod).get(c.LOCAL_POD_LABEL) == c.LOCAL_POD_LABEL_VALUE:
        return None
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name_of(local_pod),
            "namespace": namespace_of(local_pod),
            "labels": {c.LOCAL_POD_LABEL: c.LOCAL_POD_LABEL_VALUE},
        },
    }


def remote_tolerations(tolerations: Iterable[Mapping[str, Any]] | None) -> list[KubeObj]:
    """All tolerations but Liqo's virtual-node one, which would allow recursive offloading on the pool."""
    return [json_copy(dict(t)) for t in tolerations or () if t.get("key") != c.VIRTUAL_NODE_TOLERATION_KEY]


def _remote_pod_spec(local_spec: Mapping[str, Any], mutators: Iterable[SpecMutator]) -> KubeObj:
    spec: KubeObj = {}
    for field in COPIED_SPEC_FIELDS:
        value = local_spec.get(field)
        if value is not None:
            spec[field] = json_copy(value)
    spec["tolerations"] = remote_tolerations(local_spec.get("tolerations"))
    spec.update(FORCED_SPEC_FIELDS)
    for mutate in mutators:
        mutate(spec)
    if not spec["tolerations"]:
        del spec["tolerations"]
    return spec


# --- API server support (LIQO §4.5) -------------------------------------------------------------


def _apiserver_support_mutator(
    support: APIServerSupport,
    *,
    pod_name: str,
    sa_name: str,
    local_cluster_id: str,
    kubernetes_service_port: str,
    home_host: str,
    home_port: str,
    kubernetes_service_ip: str,
    legacy_secret: str,
) -> SpecMutator:
    def mutate(spec: KubeObj) -> None:
        if support is APIServerSupport.REMOTE:
            return  # the pool handles tokens and CA itself
        secret_name = (
            service_account_secret_name(pod_name) if support is APIServerSupport.TOKENAPI else legacy_secret
        )
        _remote_volumes(spec, support, secret_name, sa_name)
        _rename_root_ca_refs(spec, local_cluster_id)
        if support is APIServerSupport.DISABLED:
            return
        for list_name in CONTAINER_LISTS:
            for container in spec.get(list_name) or ():
                container["env"] = _apiserver_env(
                    container.get("env") or [], sa_name, kubernetes_service_port, home_host, home_port
                )
        if not home_host and not home_port and kubernetes_service_ip:
            spec.setdefault("hostAliases", []).append(
                {
                    "ip": kubernetes_service_ip,
                    "hostnames": [c.KUBERNETES_API_SERVICE, f"{c.KUBERNETES_API_SERVICE}.svc"],
                }
            )

    return mutate


def _remote_volumes(spec: KubeObj, support: APIServerSupport, secret_name: str, sa_name: str) -> None:
    """Projected volumes: rename the root CA, and replace or drop service account token sources."""
    for volume in spec.get("volumes") or ():
        projected = volume.get("projected")
        if not projected:
            continue
        sources: list[KubeObj] = []
        for source in projected.get("sources") or ():
            token = source.get("serviceAccountToken")
            if token is None:
                sources.append(source)
                continue
            legacy_unsupported = support is APIServerSupport.LEGACY and not str(
                volume.get("name", "")
            ).startswith(c.SERVICE_ACCOUNT_VOLUME_PREFIX)
            if support is APIServerSupport.DISABLED or legacy_unsupported:
                continue
            if not secret_name:
                raise ForgeError(f"no secret found associated with service account {sa_name!r}")
            path = token.get("path", "")
            key = (
                service_account_token_key(volume.get("name", ""), path)
                if support is APIServerSupport.TOKENAPI
                else c.SERVICE_ACCOUNT_TOKEN_KEY
            )
            replaced = {k: v for k, v in source.items() if k != "serviceAccountToken"}
            replaced["secret"] = {"name": secret_name, "items": [{"key": key, "path": path}]}
            sources.append(replaced)
        projected["sources"] = sources


def _rename_root_ca_refs(spec: KubeObj, local_cluster_id: str) -> None:
    """Point every ``kube-root-ca.crt`` reference at the reflected copy.

    Liqo renames only projected sources; a plain configMap volume or env reference would silently get the
    pool's own CA instead of the consumer's. Renaming all of them keeps the pod seeing the same CA it sees
    locally, and matches ``references.pod_references`` which reports the CA as renamed.
    """
    renamed = remote_configmap_name(c.ROOT_CA_CONFIGMAP, local_cluster_id)

    def fix(ref: KubeObj | None) -> None:
        if ref and ref.get("name") == c.ROOT_CA_CONFIGMAP:
            ref["name"] = renamed

    for volume in spec.get("volumes") or ():
        fix(volume.get("configMap"))
        for source in (volume.get("projected") or {}).get("sources") or ():
            fix(source.get("configMap"))
    for list_name in CONTAINER_LISTS:
        for container in spec.get(list_name) or ():
            for env in container.get("env") or ():
                fix((env.get("valueFrom") or {}).get("configMapKeyRef"))
            for env_from in container.get("envFrom") or ():
                fix(env_from.get("configMapRef"))


def _apiserver_env(
    envs: list[KubeObj], sa_name: str, service_port: str, home_host: str, home_port: str
) -> list[KubeObj]:
    for env in envs:
        field_ref = (env.get("valueFrom") or {}).get("fieldRef") or {}
        if field_ref.get("fieldPath") == "spec.serviceAccountName":
            # The service account name is not reflected: hard-code the local one.
            env.pop("valueFrom", None)
            env["value"] = sa_name
    host, port = c.KUBERNETES_API_SERVICE, service_port
    if home_host and home_port:
        host, port = home_host, home_port
    hostport = f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"
    return [
        *envs,
        {"name": "KUBERNETES_SERVICE_HOST", "value": host},
        {"name": "KUBERNETES_SERVICE_PORT", "value": port},
        {"name": "KUBERNETES_PORT", "value": hostport},
        {"name": f"KUBERNETES_PORT_{port}_TCP", "value": hostport},
        {"name": f"KUBERNETES_PORT_{port}_TCP_PROTO", "value": "tcp"},
        {"name": f"KUBERNETES_PORT_{port}_TCP_ADDR", "value": host},
        {"name": f"KUBERNETES_PORT_{port}_TCP_PORT", "value": port},
    ]


# --- Remaining mutators, in Liqo's order --------------------------------------------------------


def _service_account_mutator(support: APIServerSupport, annotations: Mapping[str, str]) -> SpecMutator:
    def mutate(spec: KubeObj) -> None:
        if support is APIServerSupport.REMOTE:
            name = annotations.get(c.REMOTE_SERVICE_ACCOUNT_NAME_ANNOTATION, spec.get("serviceAccountName"))
            if name:
                spec["serviceAccountName"] = name
            else:
                spec.pop("serviceAccountName", None)
            spec["automountServiceAccountToken"] = True
        else:
            # The service account does not exist on the pool: the pod would be rejected.
            spec.pop("serviceAccountName", None)

    return mutate


def _node_selector_mutator(node_selector: Mapping[str, str]) -> SpecMutator:
    def mutate(spec: KubeObj) -> None:
        if node_selector:
            spec.setdefault("nodeSelector", {}).update(node_selector)

    return mutate


def _tolerations_mutator(tolerations: Iterable[Mapping[str, Any]]) -> SpecMutator:
    def mutate(spec: KubeObj) -> None:
        spec["tolerations"].extend(json_copy(dict(t)) for t in tolerations)

    return mutate


def _affinity_mutator(node_affinity: Mapping[str, Any] | None) -> SpecMutator:
    def mutate(spec: KubeObj) -> None:
        if not node_affinity:
            return
        wanted = json_copy(dict(node_affinity))
        affinity = spec.setdefault("affinity", {})
        current = affinity.get("nodeAffinity")
        if not current:
            affinity["nodeAffinity"] = wanted
            return
        required_key = "requiredDuringSchedulingIgnoredDuringExecution"
        preferred_key = "preferredDuringSchedulingIgnoredDuringExecution"
        if wanted.get(required_key) is not None:
            if current.get(required_key) is None:
                current[required_key] = wanted[required_key]
            else:
                current[required_key].setdefault("nodeSelectorTerms", []).extend(
                    wanted[required_key].get("nodeSelectorTerms") or []
                )
        preferred = [*(current.get(preferred_key) or []), *(wanted.get(preferred_key) or [])]
        if preferred:
            current[preferred_key] = preferred

    return mutate


def _anti_affinity_mutator(
    local_pod: ReadObj, local_labels: Mapping[str, str], patch: Mapping[str, Any], node_name: str
) -> SpecMutator | None:
    """The ``liqo.io/anti-affinity-preset`` annotation; it replaces ``affinity`` wholesale, as in Liqo."""
    annotations = annotations_of(local_pod)
    preset = annotations.get(c.ANTI_AFFINITY_PRESET_ANNOTATION)
    if preset == c.ANTI_AFFINITY_PRESET_PROPAGATE:
        local_anti = (spec_of(local_pod).get("affinity") or {}).get("podAntiAffinity")

        def propagate(spec: KubeObj) -> None:
            if local_anti:
                spec["affinity"] = {"podAntiAffinity": json_copy(local_anti)}

        return propagate
    if preset not in (c.ANTI_AFFINITY_PRESET_SOFT, c.ANTI_AFFINITY_PRESET_HARD):
        return None

    # Liqo builds the set from the filtered local labels plus the nodename label (not origin/destination).
    base = filter_keys(local_labels, (*LOCAL_ONLY_LABELS, *(patch.get("labelsNotReflected") or ())))
    base[c.NODENAME_LABEL] = node_name
    match_labels = _anti_affinity_labels(base, annotations.get(c.ANTI_AFFINITY_LABELS_ANNOTATION, ""))
    term = {"topologyKey": c.HOSTNAME_LABEL, "labelSelector": {"matchLabels": match_labels}}
    if preset == c.ANTI_AFFINITY_PRESET_SOFT:
        anti: KubeObj = {
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "podAffinityTerm": term}]
        }
    else:
        anti = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}

    def preset_mutator(spec: KubeObj) -> None:
        spec["affinity"] = {"podAntiAffinity": json_copy(anti)}

    return preset_mutator


def _anti_affinity_labels(labels: Mapping[str, str], whitelist: str) -> dict[str, str]:
    if whitelist:
        keep = {k.strip() for k in whitelist.split(",")}
        return {k: v for k, v in labels.items() if k in keep}
    return filter_keys(labels, DEFAULT_ANTI_AFFINITY_EXCLUDED)


def _runtime_class_mutator(local_pod: ReadObj, patch: Mapping[str, Any]) -> SpecMutator:
    candidates = (
        annotations_of(local_pod).get(c.REMOTE_RUNTIME_CLASS_NAME_ANNOTATION),
        spec_of(local_pod).get("runtimeClassName"),
        patch.get("runtimeClassName"),
    )

    def mutate(spec: KubeObj) -> None:
        annotation, local, patched = candidates
        if annotation:
            spec["runtimeClassName"] = annotation
        elif local and local != c.LIQO_RUNTIME_CLASS_NAME:
            spec["runtimeClassName"] = local
        elif patched and patched != c.LIQO_RUNTIME_CLASS_NAME:
            spec["runtimeClassName"] = patched

    return mutate


def metadata_patch(shadow: ReadObj, desired: ReadObj) -> KubeObj:
    """Merge patch making the ShadowPod's labels and annotations exactly the desired ones."""
    patch_meta: KubeObj = {"resourceVersion": meta(shadow).get("resourceVersion")}
    for field_name in ("labels", "annotations"):
        cur = dict(meta(shadow).get(field_name) or {})
        want = dict(meta(desired).get(field_name) or {})
        diff: dict[str, str | None] = {k: v for k, v in want.items() if cur.get(k) != v}
        diff.update({k: None for k in cur if k not in want})
        if diff:
            patch_meta[field_name] = diff
    return {"metadata": patch_meta}
