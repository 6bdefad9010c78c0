"""Referenced Secrets/ConfigMaps on the pool: exactly what offloaded pods reference (GUIDE §8, DESIGN §1).

Also pins invariants 2 (ownership guard), 3 (UID-precondition deletes, via the shared-Secret test) and 7
(Secret data never reaches the log or an Event).
"""

from __future__ import annotations

import base64
import contextlib
import secrets as pyrandom
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from reflectors.forge import constants as c
from reflectors.forge.names import remote_configmap_name
from tests.fixtures_vkbridge import node_ready, vkbridge_options
from tests.integration.helpers import get, must, phase, wait_until
from tests.support.offload import Offload

pytestmark = pytest.mark.integration


def secret_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/secrets" + (f"/{name}" if name else "")


def configmap_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/configmaps" + (f"/{name}" if name else "")


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(name: str, data: dict[str, str], *, type_: str = "Opaque",
           annotations: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "annotations": annotations or {}},
        "type": type_,
        "data": {k: b64(v) for k, v in data.items()},
    }


def configmap(name: str, data: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def add_secret(offload: Offload, name: str, data: dict[str, str], **kw: Any) -> dict[str, Any]:
    """Create the Secret in the offloaded namespace at home (``kw``: those of ``secret``)."""
    return must(offload.consumer, "POST", secret_path(offload.ns), secret(name, data, **kw))


def add_configmap(offload: Offload, name: str, data: dict[str, str]) -> dict[str, Any]:
    return must(offload.consumer, "POST", configmap_path(offload.ns), configmap(name, data))


def remote_secret(offload: Offload, name: str) -> dict[str, Any] | None:
    """The pool's Secret ``name`` in the remote namespace (ours or not); None while there is none."""
    return get(offload.pool, secret_path(offload.remote_ns, name))


def remote_configmap(offload: Offload, name: str) -> dict[str, Any] | None:
    return get(offload.pool, configmap_path(offload.remote_ns, name))


def with_refs(pod: dict[str, Any], *, env_secrets: tuple[str, ...] = (), volume_configmaps: tuple[str, ...] = (),
              pull_secrets: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    container = pod["spec"]["containers"][0]
    container["env"] = [
        {"name": f"S{i}", "valueFrom": {"secretKeyRef": {"name": name, "key": "password"}}}
        for i, name in enumerate(env_secrets)
    ]
    pod["spec"]["volumes"] = [
        {"name": f"cm{i}", "configMap": {"name": name}} for i, name in enumerate(volume_configmaps)
    ]
    container["volumeMounts"] = [
        {"name": f"cm{i}", "mountPath": f"/etc/cm{i}"} for i in range(len(volume_configmaps))
    ]
    if pull_secrets:
        pod["spec"]["imagePullSecrets"] = [{"name": name} for name in pull_secrets]
    return pod


def ours(obj: dict[str, Any], bundle: Bundle) -> bool:
    labels = obj["metadata"].get("labels") or {}
    return labels.get(c.ORIGIN_LABEL) == bundle.consumer_id and labels.get(c.DESTINATION_LABEL) == bundle.slug


def names(plane: ControlPlane, path: str) -> set[str]:
    return {o["metadata"]["name"] for o in must(plane, "GET", path).get("items") or []}


def running(plane: ControlPlane, ns: str, name: str) -> bool:
    return phase(plane, ns, name) == "Running"


def references_root_ca(pod: dict[str, Any]) -> bool:
    for volume in pod["spec"].get("volumes") or []:
        for source in (volume.get("projected") or {}).get("sources") or []:
            if (source.get("configMap") or {}).get("name") == c.ROOT_CA_CONFIGMAP:
                return True
    return False


def stays(cond: Callable[[], bool], seconds: float, what: str) -> None:
    """Assert ``cond`` holds throughout ``seconds`` (for "must not happen" checks; polls, fails early)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert cond(), f"{what} stopped holding"
        time.sleep(0.1)


def test_exactly_the_referenced_objects_reach_the_pool(offload: Offload) -> None:
    consumer, bundle, ns = offload.consumer, offload.bundle, offload.ns
    add_secret(offload, "db-creds", {"password": "hunter2"})
    add_secret(
        offload, "regcred", {".dockerconfigjson": '{"auths":{}}'}, type_="kubernetes.io/dockerconfigjson"
    )
    add_secret(offload, "unrelated", {"password": "not for the pool"})
    add_configmap(offload, "app-config", {"app.yaml": "level: debug"})
    add_configmap(offload, "unrelated-cm", {"x": "y"})
    pod = with_refs(offload.pod("app"), env_secrets=("db-creds",), volume_configmaps=("app-config",),
                    pull_secrets=("regcred",))  # fmt: skip
    offload.post(pod)
    offload.wait_running("app")
    local_pod = offload.local("app")
    assert local_pod is not None

    root_ca = remote_configmap_name(c.ROOT_CA_CONFIGMAP, bundle.consumer_id)
    expected_configmaps = {"app-config"} | ({root_ca} if references_root_ca(local_pod) else set())
    remote_secrets = must(offload.pool, "GET", secret_path(offload.remote_ns))["items"]
    remote_configmaps = must(offload.pool, "GET", configmap_path(offload.remote_ns))["items"]
    assert {s["metadata"]["name"] for s in remote_secrets if ours(s, bundle)} == {"db-creds", "regcred"}
    assert {m["metadata"]["name"] for m in remote_configmaps if ours(m, bundle)} == expected_configmaps
    all_names = {o["metadata"]["name"] for o in remote_secrets + remote_configmaps}
    assert "unrelated" not in all_names and "unrelated-cm" not in all_names

    local_db = get(consumer, secret_path(ns, "db-creds"))
    remote_db = remote_secret(offload, "db-creds")
    assert local_db is not None and remote_db is not None
    assert remote_db["data"] == local_db["data"] and remote_db["type"] == "Opaque"
    assert any(m.get("manager") == c.FIELD_MANAGER and m.get("operation") == "Apply"
               for m in remote_db["metadata"]["managedFields"])  # fmt: skip
    remote_reg = remote_secret(offload, "regcred")
    assert remote_reg is not None and remote_reg["type"] == "kubernetes.io/dockerconfigjson"
    remote_cm = remote_configmap(offload, "app-config")
    assert remote_cm is not None and remote_cm["data"] == {"app.yaml": "level: debug"}
    if root_ca in expected_configmaps:
        local_ca = get(consumer, configmap_path(ns, c.ROOT_CA_CONFIGMAP))
        remote_ca = remote_configmap(offload, root_ca)
        assert local_ca is not None and remote_ca is not None and remote_ca["data"] == local_ca["data"]


def test_update_of_a_referenced_secret_reaches_the_pool_within_2s(offload: Offload) -> None:
    consumer, ns = offload.consumer, offload.ns
    add_secret(offload, "db-creds", {"password": "v1"})
    offload.post(with_refs(offload.pod("app"), env_secrets=("db-creds",)))
    offload.wait_running("app")
    must(consumer, "PATCH", secret_path(ns, "db-creds"), {"data": {"password": b64("v2")}},
         content_type="application/merge-patch+json")  # fmt: skip
    t0 = time.monotonic()
    wait_until(lambda: ((remote_secret(offload, "db-creds") or {}).get("data") or {}).get("password")
               == b64("v2"), 2.0, "the remote copy updated")  # fmt: skip
    print(f"\nlocal Secret update -> remote copy in {time.monotonic() - t0:.2f}s")


def test_remote_drift_is_reverted(offload: Offload) -> None:
    pool, remote_ns = offload.pool, offload.remote_ns
    add_configmap(offload, "app-config", {"mode": "prod"})
    offload.post(with_refs(offload.pod("app"), volume_configmaps=("app-config",)))
    offload.wait_running("app")
    must(pool, "PATCH", configmap_path(remote_ns, "app-config"), {"data": {"mode": "tampered"}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(lambda: ((remote_configmap(offload, "app-config") or {}).get("data") or {})
               == {"mode": "prod"}, 5, "the edited copy restored")  # fmt: skip
    old_uid = remote_configmap(offload, "app-config")["metadata"]["uid"]  # type: ignore[index]
    must(pool, "DELETE", configmap_path(remote_ns, "app-config"))
    wait_until(lambda: (remote_configmap(offload, "app-config") or {"metadata": {"uid": old_uid}})
               ["metadata"]["uid"] != old_uid, 5, "the deleted copy re-created")  # fmt: skip


def test_shared_secret_stays_until_the_last_pod_is_deleted(offload: Offload) -> None:
    consumer, ns = offload.consumer, offload.ns
    add_secret(offload, "shared", {"password": "p"})
    for name in ("a", "b"):
        offload.post(with_refs(offload.pod(name), env_secrets=("shared",)))
    for name in ("a", "b"):
        offload.wait_running(name)
    assert remote_secret(offload, "shared") is not None

    offload.delete("a")
    wait_until(lambda: offload.shadow("a") is None, 15, "a's ShadowPod gone")
    stays(lambda: remote_secret(offload, "shared") is not None, 3.0,
          "the shared Secret on the pool while b still uses it")  # fmt: skip

    offload.delete("b")
    wait_until(lambda: remote_secret(offload, "shared") is None, 20,
               "the shared Secret deleted once no pod references it")  # fmt: skip
    assert get(consumer, secret_path(ns, "shared")) is not None  # the local one is never touched


def test_missing_secret_keeps_the_pod_pending_until_it_is_created(offload: Offload) -> None:
    offload.post(with_refs(offload.pod("app"), env_secrets=("late",)))
    event = wait_until(
        lambda: offload.warning("app", 'Secret "late"'), 20, "a Warning event naming the missing Secret"
    )
    assert event["reason"] == c.EVENT_FAILED_REFLECTION
    assert offload.phase("app") == "Pending"
    assert offload.shadow("app") is None
    assert remote_secret(offload, "late") is None

    add_secret(offload, "late", {"password": "finally"})
    wait_until(lambda: offload.running("app"), 30, "app Running once its Secret exists")
    assert remote_secret(offload, "late") is not None


def _with_env_from(pod: dict[str, Any], *, secret: str, configmap: str, optional: bool) -> dict[str, Any]:
    pod["spec"]["containers"][0]["envFrom"] = [
        {"secretRef": {"name": secret, "optional": optional}},
        {"configMapRef": {"name": configmap, "optional": optional}},
    ]
    return pod


def _reasons(offload: Offload, pod: str) -> dict[str, tuple[str, str]]:
    return {e["reason"]: (e["type"], e["message"]) for e in offload.events(pod)}


def test_missing_references_get_the_upstream_virtual_kubelet_reasons_besides_failed_reflection(
    offload: Offload,
) -> None:
    """Users and tools grep for the upstream virtual-kubelet's MandatorySecretNotFound and friends: a pod
    held back for a missing required Secret/ConfigMap gets them (Warning) with Liqo's FailedReflection; a
    pod sent without missing optional ones gets OptionalSecretNotFound/OptionalConfigMapNotFound (Normal)."""
    held = _with_env_from(offload.pod("held"), secret="no-such-s", configmap="no-such-cm", optional=False)
    sent = _with_env_from(offload.pod("sent"), secret="maybe-s", configmap="maybe-cm", optional=True)
    offload.post(held)
    offload.post(sent)
    mandatory = {"FailedReflection", "MandatorySecretNotFound", "MandatoryConfigMapNotFound"}
    wait_until(lambda: mandatory <= set(_reasons(offload, "held")), 20, "the held pod's events")
    reasons = _reasons(offload, "held")
    assert reasons["MandatorySecretNotFound"] == ("Warning", 'secret "no-such-s" not found')
    assert reasons["MandatoryConfigMapNotFound"] == ("Warning", 'configmap "no-such-cm" not found')
    assert reasons["FailedReflection"][0] == "Warning"
    assert not {"OptionalSecretNotFound", "OptionalConfigMapNotFound"} & set(reasons)
    assert offload.phase("held") == "Pending"
    optional = {"SuccessfulReflection", "OptionalSecretNotFound", "OptionalConfigMapNotFound"}
    wait_until(lambda: optional <= set(_reasons(offload, "sent")), 20, "the sent pod's events")
    reasons = _reasons(offload, "sent")
    assert reasons["OptionalSecretNotFound"] == ("Normal", 'secret "maybe-s" not found')
    assert reasons["OptionalConfigMapNotFound"] == ("Normal", 'configmap "maybe-cm" not found')
    assert not {"MandatorySecretNotFound", "MandatoryConfigMapNotFound", "FailedReflection"} & set(reasons)
    wait_until(lambda: offload.running("sent"), 30, "the pod with missing optional references Running")


def test_policy_skip_and_foreign_objects_are_never_copied_or_touched(offload: Offload) -> None:
    pool, bundle, remote_ns = offload.pool, offload.bundle, offload.remote_ns
    add_secret(offload, "private", {"password": "p"}, annotations={c.SKIP_REFLECTION_ANNOTATION: "true"})
    add_secret(offload, "taken", {"password": "ours"})
    foreign = must(pool, "POST", secret_path(remote_ns), secret("taken", {"password": "theirs"}))
    offload.post(with_refs(offload.pod("skipped"), env_secrets=("private",)))
    offload.post(with_refs(offload.pod("clash"), env_secrets=("taken",)))
    wait_until(
        lambda: offload.warning("skipped", 'Secret "private"'), 20, "a Warning naming the skipped Secret"
    )
    wait_until(lambda: offload.warning("clash", 'Secret "taken"'), 20, "a Warning naming the clashing Secret")
    assert offload.phase("skipped") == "Pending" and offload.phase("clash") == "Pending"
    assert remote_secret(offload, "private") is None
    now = remote_secret(offload, "taken")
    assert now is not None
    assert now["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
    assert now["data"] == {"password": b64("theirs")} and not ours(now, bundle)


def test_secret_values_never_reach_the_log_or_events(offload: Offload) -> None:
    """The session vkbridge runs at --klog.v=2; tests/unit/test_refcount.py covers DEBUG for the reflector."""
    consumer, vkbridge, ns = offload.consumer, offload.vkbridge, offload.ns
    first, second = f"v1-{pyrandom.token_hex(16)}", f"v2-{pyrandom.token_hex(16)}"
    add_secret(offload, "token", {"password": first})
    offload.post(with_refs(offload.pod("app"), env_secrets=("token", "absent")))
    wait_until(lambda: any('Secret "absent"' in e["message"] for e in offload.events("app")), 20,
               "the Warning about the absent Secret")  # fmt: skip
    add_secret(offload, "absent", {"password": second})
    wait_until(lambda: offload.running("app"), 30, "app Running")
    must(consumer, "PATCH", secret_path(ns, "token"), {"data": {"password": b64(second + "-rotated")}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(lambda: ((remote_secret(offload, "token") or {}).get("data") or {}).get("password")
               == b64(second + "-rotated"), 5, "the rotated value on the pool")  # fmt: skip
    offload.delete("app")
    wait_until(lambda: remote_secret(offload, "token") is None, 15, "the copies released")

    log = vkbridge.log_text()
    assert f"{ns}/token" in log  # the reflector logged the object by name...
    events = " ".join(e["message"] for e in offload.events("app"))
    for value in (first, second, second + "-rotated"):
        for form in (value, b64(value)):
            assert form not in log, "a Secret value reached the vkbridge log"
            assert form not in events, "a Secret value reached an Event"


# ============================================= two virtual nodes sharing one remote namespace (issue 15)


@contextlib.contextmanager
def second_virtual_node(
    consumer: ControlPlane, bundle: Bundle, log_path: Path, virtual_node: str | None = None
) -> Iterator[str]:
    """A second vkbridge on the same peering (same consumer and pool ids, so the same remote namespaces),
    as Liqo runs one virtual kubelet per VirtualNode of a ForeignCluster; yields its node name. It reads
    the VirtualNode ``virtual_node`` (default: the first node's)."""
    node = f"{bundle.slug}-b"
    opts = vkbridge_options(
        consumer, bundle, nodename=node, env={"VIRTUALNODE_NAME": virtual_node or bundle.slug}
    )
    proc = VkbridgeProcess(opts, log_path).start()
    try:
        try:
            wait_until(lambda: node_ready(consumer, node) == "True", 60, f"node {node} Ready")
        except TimeoutError:
            print(proc.tail(80))
            raise
        yield node
    finally:
        proc.stop()
        print(f"\nsecond vkbridge log: {log_path}")
        consumer.api("DELETE", f"/api/v1/nodes/{node}")  # later tests must never be scheduled onto it
        consumer.api("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}")


def test_two_virtual_nodes_sharing_a_remote_namespace_never_delete_each_others_copies(
    offload: Offload, tmp_path: Path
) -> None:
    bundle = offload.bundle
    mark_a = f"{c.CONFIG_USER_LABEL_PREFIX}{bundle.slug}"
    add_secret(offload, "shared", {"password": "p"})
    with second_virtual_node(offload.consumer, bundle, tmp_path / "vkbridge-b.log") as node_b:
        mark_b = f"{c.CONFIG_USER_LABEL_PREFIX}{node_b}"
        for name, node in (("a", bundle.slug), ("b", node_b)):
            offload.post(with_refs(offload.pod(name, node_name=node), env_secrets=("shared",)))
        for name in ("a", "b"):
            wait_until(lambda name=name: offload.running(name), 30, f"{name} Running")

        def labels() -> dict[str, str]:
            return ((remote_secret(offload, "shared") or {}).get("metadata") or {}).get("labels") or {}

        wait_until(lambda: {mark_a, mark_b} <= labels().keys(), 10, "both nodes' marks on the shared copy")
        uid = remote_secret(offload, "shared")["metadata"]["uid"]  # type: ignore[index]

        offload.delete("a")
        wait_until(lambda: offload.shadow("a") is None, 15, "a's ShadowPod gone")
        wait_until(lambda: mark_a not in labels(), 10, "node A's mark removed")
        stays(lambda: (remote_secret(offload, "shared") or {"metadata": {}})["metadata"].get("uid") == uid, 3.0,
              "the copy node B's pod uses (never deleted, never re-created)")  # fmt: skip
        assert labels()[mark_b] == "true" and offload.running("b")

        offload.delete("b")
        wait_until(lambda: remote_secret(offload, "shared") is None, 20,
                   "the copy deleted once neither node needs it")  # fmt: skip


def test_two_virtual_nodes_with_crossed_offloading_patches_leave_their_shared_copy_at_rest(
    offload: Offload, tmp_path: Path
) -> None:
    """Node A leaves label ``tier`` out of its copies, node B (another VirtualNode) leaves ``team`` out.
    With one field manager for both, each apply removed the label the other reflects, and each node put
    its own back: the shared Secret was rewritten for ever. Now a write keeps what its patch leaves out."""
    bundle, consumer = offload.bundle, offload.consumer
    vns = f"/apis/offloading.liqo.io/v1beta1/namespaces/{bundle.tenant_ns}/virtualnodes"
    merge = "application/merge-patch+json"
    first = get(consumer, f"{vns}/{bundle.slug}")
    assert first is not None
    vn_b = f"{bundle.slug}-vn-b"
    second = {
        "apiVersion": first["apiVersion"],
        "kind": first["kind"],
        "metadata": {"name": vn_b, "namespace": bundle.tenant_ns},
        "spec": {**first["spec"], "offloadingPatch": {"labelsNotReflected": ["team"]}},
    }
    must(consumer, "POST", vns, second)
    must(consumer, "PATCH", f"{vns}/{bundle.slug}", {"spec": {"offloadingPatch": {"labelsNotReflected": ["tier"]}}},
         content_type=merge)  # fmt: skip
    try:
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "crossed", "labels": {"tier": "db", "team": "blue"}},
            "data": {"k": b64("v")},
        }
        must(consumer, "POST", f"/api/v1/namespaces/{offload.ns}/secrets", secret)
        with second_virtual_node(consumer, bundle, tmp_path / "vkbridge-b.log", virtual_node=vn_b) as node_b:
            marks = {f"{c.CONFIG_USER_LABEL_PREFIX}{bundle.slug}", f"{c.CONFIG_USER_LABEL_PREFIX}{node_b}"}
            for name, node in (("xa", bundle.slug), ("xb", node_b)):
                offload.post(with_refs(offload.pod(name, node_name=node), env_secrets=("crossed",)))
            for name in ("xa", "xb"):
                wait_until(lambda name=name: offload.running(name), 30, f"{name} Running")

            def copy_meta() -> dict[str, Any]:
                return (remote_secret(offload, "crossed") or {}).get("metadata") or {}

            wait_until(
                lambda: marks <= (copy_meta().get("labels") or {}).keys(), 10, "both marks on the copy"
            )
            time.sleep(1.0)  # the writes that settle it
            version = copy_meta().get("resourceVersion")
            stays(lambda: copy_meta().get("resourceVersion") == version, 5.0,
                  "the shared copy at rest (no node rewriting the other's labels)")  # fmt: skip
            labels = copy_meta().get("labels") or {}
            assert labels.get("tier") == "db" and labels.get("team") == "blue"  # each reflected by one node
            for name in ("xa", "xb"):
                offload.delete(name)
            wait_until(lambda: remote_secret(offload, "crossed") is None, 30, "the copy deleted at the end")
    finally:
        must(
            consumer, "PATCH", f"{vns}/{bundle.slug}", {"spec": {"offloadingPatch": None}}, content_type=merge
        )
        consumer.api("DELETE", f"{vns}/{vn_b}")


def test_local_configmap_named_like_the_renamed_root_ca_is_refused_and_never_overwrites_it(
    offload: Offload,
) -> None:
    consumer, bundle, ns = offload.consumer, offload.bundle, offload.ns
    reserved = remote_configmap_name(c.ROOT_CA_CONFIGMAP, bundle.consumer_id)
    ca_volume = {"name": "ca", "projected": {"sources": [{"configMap": {"name": c.ROOT_CA_CONFIGMAP}}]}}
    offload.post(offload.pod("ca", extra_spec={"volumes": [ca_volume]}))
    offload.wait_running("ca")
    local_ca = get(consumer, configmap_path(ns, c.ROOT_CA_CONFIGMAP))
    assert local_ca is not None
    wait_until(lambda: (remote_configmap(offload, reserved) or {}).get("data") == local_ca["data"],
               10, "the root CA copy")  # fmt: skip

    add_configmap(offload, reserved, {"ca.crt": "not the CA"})
    offload.post(with_refs(offload.pod("clash"), volume_configmaps=(reserved,)))
    wait_until(
        lambda: offload.warning("clash", "reserved"), 20, "a Warning on the pod naming the reserved ConfigMap"
    )
    wait_until(lambda: offload.warning(reserved, "reserved"), 10, "a Warning on the ConfigMap itself")
    assert offload.phase("clash") == "Pending"
    assert offload.shadow("clash") is None
    remote_ca = remote_configmap(offload, reserved)
    assert remote_ca is not None and remote_ca["data"] == local_ca["data"]


def test_offloading_patch_filters_the_labels_and_annotations_of_the_copies(offload: Offload) -> None:
    # Liqo's ForgingOpts (the VirtualNode's offloadingPatch) serve every reflector, not only the ShadowPod's.
    bundle = offload.bundle
    vn = f"/apis/offloading.liqo.io/v1beta1/namespaces/{bundle.tenant_ns}/virtualnodes/{bundle.slug}"
    merge = "application/merge-patch+json"
    patch = {"labelsNotReflected": ["internal"], "annotationsNotReflected": ["lb.example.com/pool"]}
    must(offload.consumer, "PATCH", vn, {"spec": {"offloadingPatch": patch}}, content_type=merge)
    try:
        # A ShadowPod forged without the label shows vkbridge has read the patch.
        probe = offload.pod("probe")
        probe["metadata"]["labels"] = {"internal": "yes"}
        offload.post(probe)
        wait_until(lambda: "internal" not in ((offload.shadow("probe") or {"metadata": {"labels": {"internal": 1}}})
                   ["metadata"].get("labels") or {}), 30, "the probe's ShadowPod without the label")  # fmt: skip
        cm = configmap("app-config", {"k": "v"})
        cm["metadata"]["labels"] = {"internal": "yes", "app": "a"}
        cm["metadata"]["annotations"] = {"lb.example.com/pool": "blue", "note": "kept"}
        must(offload.consumer, "POST", configmap_path(offload.ns), cm)
        offload.post(with_refs(offload.pod("app"), volume_configmaps=("app-config",)))
        offload.wait_running("app")
        remote = remote_configmap(offload, "app-config")
        assert remote is not None
        labels, annotations = (
            remote["metadata"].get("labels") or {},
            remote["metadata"].get("annotations") or {},
        )
        assert labels.get("app") == "a" and "internal" not in labels
        assert annotations.get("note") == "kept" and "lb.example.com/pool" not in annotations
    finally:
        must(offload.consumer, "PATCH", vn, {"spec": {"offloadingPatch": None}}, content_type=merge)
