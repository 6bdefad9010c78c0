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
from tests.integration.helpers import (
    events_for,
    get,
    must,
    phase,
    pod_path,
    pool_pod,
    shadow_path,
    wait_until,
)

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


def test_exactly_the_referenced_objects_reach_the_pool(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", secret_path(ns), secret("db-creds", {"password": "hunter2"}))
    must(consumer, "POST", secret_path(ns), secret("regcred", {".dockerconfigjson": '{"auths":{}}'},
                                                   type_="kubernetes.io/dockerconfigjson"))  # fmt: skip
    must(consumer, "POST", secret_path(ns), secret("unrelated", {"password": "not for the pool"}))
    must(consumer, "POST", configmap_path(ns), configmap("app-config", {"app.yaml": "level: debug"}))
    must(consumer, "POST", configmap_path(ns), configmap("unrelated-cm", {"x": "y"}))
    pod = with_refs(pool_pod(bundle.slug, "app"), env_secrets=("db-creds",), volume_configmaps=("app-config",),
                    pull_secrets=("regcred",))  # fmt: skip
    must(consumer, "POST", pod_path(ns), pod)
    wait_until(lambda: running(consumer, ns, "app"), 30, "app Running at home")
    local_pod = get(consumer, pod_path(ns, "app"))
    assert local_pod is not None

    root_ca = remote_configmap_name(c.ROOT_CA_CONFIGMAP, bundle.consumer_id)
    expected_configmaps = {"app-config"} | ({root_ca} if references_root_ca(local_pod) else set())
    remote_secrets = must(pool, "GET", secret_path(remote_ns))["items"]
    remote_configmaps = must(pool, "GET", configmap_path(remote_ns))["items"]
    assert {s["metadata"]["name"] for s in remote_secrets if ours(s, bundle)} == {"db-creds", "regcred"}
    assert {m["metadata"]["name"] for m in remote_configmaps if ours(m, bundle)} == expected_configmaps
    all_names = {o["metadata"]["name"] for o in remote_secrets + remote_configmaps}
    assert "unrelated" not in all_names and "unrelated-cm" not in all_names

    local_db = get(consumer, secret_path(ns, "db-creds"))
    remote_db = get(pool, secret_path(remote_ns, "db-creds"))
    assert local_db is not None and remote_db is not None
    assert remote_db["data"] == local_db["data"] and remote_db["type"] == "Opaque"
    assert any(m.get("manager") == c.FIELD_MANAGER and m.get("operation") == "Apply"
               for m in remote_db["metadata"]["managedFields"])  # fmt: skip
    remote_reg = get(pool, secret_path(remote_ns, "regcred"))
    assert remote_reg is not None and remote_reg["type"] == "kubernetes.io/dockerconfigjson"
    remote_cm = get(pool, configmap_path(remote_ns, "app-config"))
    assert remote_cm is not None and remote_cm["data"] == {"app.yaml": "level: debug"}
    if root_ca in expected_configmaps:
        local_ca = get(consumer, configmap_path(ns, c.ROOT_CA_CONFIGMAP))
        remote_ca = get(pool, configmap_path(remote_ns, root_ca))
        assert local_ca is not None and remote_ca is not None and remote_ca["data"] == local_ca["data"]


def test_update_of_a_referenced_secret_reaches_the_pool_within_2s(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", secret_path(ns), secret("db-creds", {"password": "v1"}))
    must(consumer, "POST", pod_path(ns), with_refs(pool_pod(bundle.slug, "app"), env_secrets=("db-creds",)))
    wait_until(lambda: running(consumer, ns, "app"), 30, "app Running")
    must(consumer, "PATCH", secret_path(ns, "db-creds"), {"data": {"password": b64("v2")}},
         content_type="application/merge-patch+json")  # fmt: skip
    t0 = time.monotonic()
    wait_until(lambda: ((get(pool, secret_path(remote_ns, "db-creds")) or {}).get("data") or {}).get("password")
               == b64("v2"), 2.0, "the remote copy updated")  # fmt: skip
    print(f"\nlocal Secret update -> remote copy in {time.monotonic() - t0:.2f}s")


def test_remote_drift_is_reverted(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", configmap_path(ns), configmap("app-config", {"mode": "prod"}))
    must(
        consumer,
        "POST",
        pod_path(ns),
        with_refs(pool_pod(bundle.slug, "app"), volume_configmaps=("app-config",)),
    )
    wait_until(lambda: running(consumer, ns, "app"), 30, "app Running")
    must(pool, "PATCH", configmap_path(remote_ns, "app-config"), {"data": {"mode": "tampered"}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(lambda: ((get(pool, configmap_path(remote_ns, "app-config")) or {}).get("data") or {})
               == {"mode": "prod"}, 5, "the edited copy restored")  # fmt: skip
    old_uid = get(pool, configmap_path(remote_ns, "app-config"))["metadata"]["uid"]  # type: ignore[index]
    must(pool, "DELETE", configmap_path(remote_ns, "app-config"))
    wait_until(lambda: (get(pool, configmap_path(remote_ns, "app-config")) or {"metadata": {"uid": old_uid}})
               ["metadata"]["uid"] != old_uid, 5, "the deleted copy re-created")  # fmt: skip


def test_shared_secret_stays_until_the_last_pod_is_deleted(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", secret_path(ns), secret("shared", {"password": "p"}))
    for name in ("a", "b"):
        must(consumer, "POST", pod_path(ns), with_refs(pool_pod(bundle.slug, name), env_secrets=("shared",)))
    for name in ("a", "b"):
        wait_until(lambda name=name: running(consumer, ns, name), 30, f"{name} Running")
    assert get(pool, secret_path(remote_ns, "shared")) is not None

    must(consumer, "DELETE", pod_path(ns, "a"))
    wait_until(lambda: get(pool, shadow_path(remote_ns, "a")) is None, 15, "a's ShadowPod gone")
    stays(lambda: get(pool, secret_path(remote_ns, "shared")) is not None, 3.0,
          "the shared Secret on the pool while b still uses it")  # fmt: skip

    must(consumer, "DELETE", pod_path(ns, "b"))
    wait_until(lambda: get(pool, secret_path(remote_ns, "shared")) is None, 20,
               "the shared Secret deleted once no pod references it")  # fmt: skip
    assert get(consumer, secret_path(ns, "shared")) is not None  # the local one is never touched


def test_missing_secret_keeps_the_pod_pending_until_it_is_created(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", pod_path(ns), with_refs(pool_pod(bundle.slug, "app"), env_secrets=("late",)))

    def waiting_event() -> dict[str, Any] | None:
        for e in events_for(consumer, ns, "app"):
            if e["type"] == "Warning" and 'Secret "late"' in e["message"]:
                return e
        return None

    event = wait_until(waiting_event, 20, "a Warning event naming the missing Secret")
    assert event["reason"] == c.EVENT_FAILED_REFLECTION
    assert phase(consumer, ns, "app") == "Pending"
    assert get(pool, shadow_path(remote_ns, "app")) is None
    assert get(pool, secret_path(remote_ns, "late")) is None

    must(consumer, "POST", secret_path(ns), secret("late", {"password": "finally"}))
    wait_until(lambda: running(consumer, ns, "app"), 30, "app Running once its Secret exists")
    assert get(pool, secret_path(remote_ns, "late")) is not None


def _with_env_from(pod: dict[str, Any], *, secret: str, configmap: str, optional: bool) -> dict[str, Any]:
    pod["spec"]["containers"][0]["envFrom"] = [
        {"secretRef": {"name": secret, "optional": optional}},
        {"configMapRef": {"name": configmap, "optional": optional}},
    ]
    return pod


def _reasons(consumer: ControlPlane, ns: str, pod: str) -> dict[str, tuple[str, str]]:
    return {e["reason"]: (e["type"], e["message"]) for e in events_for(consumer, ns, pod)}


def test_missing_references_get_the_upstream_virtual_kubelet_reasons_besides_failed_reflection(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    """Users and tools grep for the upstream virtual-kubelet's MandatorySecretNotFound and friends: a pod
    held back for a missing required Secret/ConfigMap gets them (Warning) with Liqo's FailedReflection; a
    pod sent without missing optional ones gets OptionalSecretNotFound/OptionalConfigMapNotFound (Normal)."""
    ns, _ = offloaded_ns
    held = _with_env_from(
        pool_pod(bundle.slug, "held"), secret="no-such-s", configmap="no-such-cm", optional=False
    )
    sent = _with_env_from(
        pool_pod(bundle.slug, "sent"), secret="maybe-s", configmap="maybe-cm", optional=True
    )
    must(consumer, "POST", pod_path(ns), held)
    must(consumer, "POST", pod_path(ns), sent)
    mandatory = {"FailedReflection", "MandatorySecretNotFound", "MandatoryConfigMapNotFound"}
    wait_until(lambda: mandatory <= set(_reasons(consumer, ns, "held")), 20, "the held pod's events")
    reasons = _reasons(consumer, ns, "held")
    assert reasons["MandatorySecretNotFound"] == ("Warning", 'secret "no-such-s" not found')
    assert reasons["MandatoryConfigMapNotFound"] == ("Warning", 'configmap "no-such-cm" not found')
    assert reasons["FailedReflection"][0] == "Warning"
    assert not {"OptionalSecretNotFound", "OptionalConfigMapNotFound"} & set(reasons)
    assert phase(consumer, ns, "held") == "Pending"
    optional = {"SuccessfulReflection", "OptionalSecretNotFound", "OptionalConfigMapNotFound"}
    wait_until(lambda: optional <= set(_reasons(consumer, ns, "sent")), 20, "the sent pod's events")
    reasons = _reasons(consumer, ns, "sent")
    assert reasons["OptionalSecretNotFound"] == ("Normal", 'secret "maybe-s" not found')
    assert reasons["OptionalConfigMapNotFound"] == ("Normal", 'configmap "maybe-cm" not found')
    assert not {"MandatorySecretNotFound", "MandatoryConfigMapNotFound", "FailedReflection"} & set(reasons)
    wait_until(lambda: running(consumer, ns, "sent"), 30, "the pod with missing optional references Running")


def test_policy_skip_and_foreign_objects_are_never_copied_or_touched(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    must(consumer, "POST", secret_path(ns), secret("private", {"password": "p"},
                                                   annotations={c.SKIP_REFLECTION_ANNOTATION: "true"}))  # fmt: skip
    must(consumer, "POST", secret_path(ns), secret("taken", {"password": "ours"}))
    foreign = must(pool, "POST", secret_path(remote_ns), secret("taken", {"password": "theirs"}))
    must(
        consumer, "POST", pod_path(ns), with_refs(pool_pod(bundle.slug, "skipped"), env_secrets=("private",))
    )
    must(consumer, "POST", pod_path(ns), with_refs(pool_pod(bundle.slug, "clash"), env_secrets=("taken",)))

    def warned(pod: str, text: str) -> bool:
        return any(e["type"] == "Warning" and text in e["message"] for e in events_for(consumer, ns, pod))

    wait_until(lambda: warned("skipped", 'Secret "private"'), 20, "a Warning naming the skipped Secret")
    wait_until(lambda: warned("clash", 'Secret "taken"'), 20, "a Warning naming the clashing Secret")
    assert phase(consumer, ns, "skipped") == "Pending" and phase(consumer, ns, "clash") == "Pending"
    assert get(pool, secret_path(remote_ns, "private")) is None
    now = get(pool, secret_path(remote_ns, "taken"))
    assert now is not None
    assert now["metadata"]["resourceVersion"] == foreign["metadata"]["resourceVersion"]
    assert now["data"] == {"password": b64("theirs")} and not ours(now, bundle)


def test_secret_values_never_reach_the_log_or_events(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    """The session vkbridge runs at --klog.v=2; tests/unit/test_refcount.py covers DEBUG for the reflector."""
    ns, remote_ns = offloaded_ns
    first, second = f"v1-{pyrandom.token_hex(16)}", f"v2-{pyrandom.token_hex(16)}"
    must(consumer, "POST", secret_path(ns), secret("token", {"password": first}))
    must(
        consumer,
        "POST",
        pod_path(ns),
        with_refs(pool_pod(bundle.slug, "app"), env_secrets=("token", "absent")),
    )
    wait_until(lambda: any('Secret "absent"' in e["message"] for e in events_for(consumer, ns, "app")), 20,
               "the Warning about the absent Secret")  # fmt: skip
    must(consumer, "POST", secret_path(ns), secret("absent", {"password": second}))
    wait_until(lambda: running(consumer, ns, "app"), 30, "app Running")
    must(consumer, "PATCH", secret_path(ns, "token"), {"data": {"password": b64(second + "-rotated")}},
         content_type="application/merge-patch+json")  # fmt: skip
    wait_until(lambda: ((get(pool, secret_path(remote_ns, "token")) or {}).get("data") or {}).get("password")
               == b64(second + "-rotated"), 5, "the rotated value on the pool")  # fmt: skip
    must(consumer, "DELETE", pod_path(ns, "app"))
    wait_until(lambda: get(pool, secret_path(remote_ns, "token")) is None, 15, "the copies released")

    log = vkbridge.log_text()
    assert f"{ns}/token" in log  # the reflector logged the object by name...
    events = " ".join(e["message"] for e in events_for(consumer, ns, "app"))
    for value in (first, second, second + "-rotated"):
        for form in (value, b64(value)):
            assert form not in log, "a Secret value reached the vkbridge log"
            assert form not in events, "a Secret value reached an Event"


# ============================================= two virtual nodes sharing one remote namespace (issue 15)


@contextlib.contextmanager
def second_virtual_node(consumer: ControlPlane, bundle: Bundle, log_path: Path) -> Iterator[str]:
    """A second vkbridge on the same peering (same consumer and pool ids, so the same remote namespaces),
    as Liqo runs one virtual kubelet per VirtualNode of a ForeignCluster; yields its node name."""
    node = f"{bundle.slug}-b"
    opts = vkbridge_options(consumer, bundle, nodename=node, env={"VIRTUALNODE_NAME": bundle.slug})
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
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str], tmp_path: Path,
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    mark_a = f"{c.CONFIG_USER_LABEL_PREFIX}{bundle.slug}"
    must(consumer, "POST", secret_path(ns), secret("shared", {"password": "p"}))
    with second_virtual_node(consumer, bundle, tmp_path / "vkbridge-b.log") as node_b:
        mark_b = f"{c.CONFIG_USER_LABEL_PREFIX}{node_b}"
        for name, node in (("a", bundle.slug), ("b", node_b)):
            pod = with_refs(pool_pod(bundle.slug, name, node_name=node), env_secrets=("shared",))
            must(consumer, "POST", pod_path(ns), pod)
        for name in ("a", "b"):
            wait_until(lambda name=name: running(consumer, ns, name), 30, f"{name} Running")

        def labels() -> dict[str, str]:
            return ((get(pool, secret_path(remote_ns, "shared")) or {}).get("metadata") or {}).get(
                "labels"
            ) or {}

        wait_until(lambda: {mark_a, mark_b} <= labels().keys(), 10, "both nodes' marks on the shared copy")
        uid = get(pool, secret_path(remote_ns, "shared"))["metadata"]["uid"]  # type: ignore[index]

        must(consumer, "DELETE", pod_path(ns, "a"))
        wait_until(lambda: get(pool, shadow_path(remote_ns, "a")) is None, 15, "a's ShadowPod gone")
        wait_until(lambda: mark_a not in labels(), 10, "node A's mark removed")
        stays(lambda: (get(pool, secret_path(remote_ns, "shared")) or {"metadata": {}})["metadata"].get("uid")
              == uid, 3.0, "the copy node B's pod uses (never deleted, never re-created)")  # fmt: skip
        assert labels()[mark_b] == "true" and running(consumer, ns, "b")

        must(consumer, "DELETE", pod_path(ns, "b"))
        wait_until(lambda: get(pool, secret_path(remote_ns, "shared")) is None, 20,
                   "the copy deleted once neither node needs it")  # fmt: skip


def test_local_configmap_named_like_the_renamed_root_ca_is_refused_and_never_overwrites_it(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    reserved = remote_configmap_name(c.ROOT_CA_CONFIGMAP, bundle.consumer_id)
    ca_volume = {"name": "ca", "projected": {"sources": [{"configMap": {"name": c.ROOT_CA_CONFIGMAP}}]}}
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "ca", extra_spec={"volumes": [ca_volume]}))
    wait_until(lambda: running(consumer, ns, "ca"), 30, "ca Running")
    local_ca = get(consumer, configmap_path(ns, c.ROOT_CA_CONFIGMAP))
    assert local_ca is not None
    wait_until(lambda: (get(pool, configmap_path(remote_ns, reserved)) or {}).get("data") == local_ca["data"],
               10, "the root CA copy")  # fmt: skip

    must(consumer, "POST", configmap_path(ns), configmap(reserved, {"ca.crt": "not the CA"}))
    must(
        consumer,
        "POST",
        pod_path(ns),
        with_refs(pool_pod(bundle.slug, "clash"), volume_configmaps=(reserved,)),
    )

    def warned(name: str) -> bool:
        return any(
            e["type"] == "Warning" and "reserved" in e["message"] for e in events_for(consumer, ns, name)
        )

    wait_until(lambda: warned("clash"), 20, "a Warning on the pod naming the reserved ConfigMap")
    wait_until(lambda: warned(reserved), 10, "a Warning on the ConfigMap itself")
    assert phase(consumer, ns, "clash") == "Pending"
    assert get(pool, shadow_path(remote_ns, "clash")) is None
    remote_ca = get(pool, configmap_path(remote_ns, reserved))
    assert remote_ca is not None and remote_ca["data"] == local_ca["data"]
