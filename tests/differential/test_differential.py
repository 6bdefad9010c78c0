"""Differential suite: the same scenario against Liqo v1.2's own virtual kubelet and against vkbridge.

Each scenario runs once per implementation on a fresh offloaded namespace of the same testbed (one node,
one peering; the two never run at once), its objects are normalised (tests/differential/snapshot.py: the
ignore list of naturally unique fields) and diffed. The differences must be exactly the rows of
docs/compatibility.md for that scenario: a new difference, or a documented one that went away, fails.
This file: a pod's life (references, grant, GPU, DaemonSet, quota, deletion both ways, metadata);
test_differential_node.py: the Node, its Lease, a restart, API writes. Harness: harness.py, conftest.py.
Run alone: ``hack/test.sh tests/differential -m differential`` (Liqo's binary: hack/build-liqo.sh).
"""

from __future__ import annotations

import base64
import contextlib
import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle
from e2e.liqo_vk import LiqoVkProcess
from tests.differential import snapshot as snap
from tests.differential.harness import (
    ImplSwitch,
    Scenario,
    Snapshot,
    assert_documented,
    phase_at_least,
    pod_snapshot,
    run_both,
    running,
    settle,
)
from tests.fixtures_vkbridge import vkbridge_options
from tests.integration.helpers import (
    events_for,
    get,
    must,
    pod_path,
    pool_pod,
    rs_path,
    shadow_path,
    wait_until,
)

__all__ = ["ImplSwitch"]  # test_live_switch.py imports it from here

pytestmark = [pytest.mark.integration, pytest.mark.differential]

GPU = "nvidia.com/gpu"


def burst_hello(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str) -> Snapshot:
    pod = pool_pod(bundle.slug, "burst-hello", command="echo hello from the pool; sleep 30", restart="Never")
    must(consumer, "POST", pod_path(ns), pod)
    running(consumer, ns, "burst-hello")
    settle()
    return pod_snapshot(consumer, pool, ns, remote, "burst-hello")


def _config(consumer: ControlPlane, ns: str, kind: str, name: str, **extra: Any) -> None:
    body = {
        "metadata": {"name": name, "labels": {"app": "refs"}},
        "data": {"k1": "dmFsdWU=", "k2": "dmFsdWU="},
    }
    must(consumer, "POST", f"/api/v1/namespaces/{ns}/{kind}", {**body, **extra})


def _remote_configs(pool: ControlPlane, remote: str) -> Snapshot:
    secrets = must(pool, "GET", f"/api/v1/namespaces/{remote}/secrets")["items"]
    configmaps = must(pool, "GET", f"/api/v1/namespaces/{remote}/configmaps")["items"]
    return {
        "secrets": snap.configs(secrets),
        "configmaps": snap.configs(configmaps, skip=("kube-root-ca.crt",)),
    }


def references(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str) -> Snapshot:
    """A Secret and a ConfigMap referenced by env and by volume, one Secret and one ConfigMap nobody uses."""
    for kind, name in (("secrets", "app-secret"), ("secrets", "unused-secret"),
                       ("configmaps", "app-config"), ("configmaps", "unused-config")):  # fmt: skip
        _config(consumer, ns, kind, name)
    pod = pool_pod(bundle.slug, "refs", command="sleep 30", restart="Never")
    c = pod["spec"]["containers"][0]
    c["env"] = [
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "k1"}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "k1"}}},
    ]
    c["volumeMounts"] = [{"name": "sec", "mountPath": "/sec"}, {"name": "cfg", "mountPath": "/cfg"}]
    pod["spec"]["volumes"] = [
        {"name": "sec", "secret": {"secretName": "app-secret"}},
        {"name": "cfg", "configMap": {"name": "app-config"}},
    ]
    must(consumer, "POST", pod_path(ns), pod)
    running(consumer, ns, "refs")
    settle()
    return {**pod_snapshot(consumer, pool, ns, remote, "refs"), **_remote_configs(pool, remote)}


def image_pull_secrets(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """A pod pulling with a dockerconfigjson Secret: the ShadowPod's imagePullSecrets and the remote copy."""
    dockercfg = base64.b64encode(b'{"auths":{"registry.example":{"auth":"dTpw"}}}').decode()
    must(consumer, "POST", f"/api/v1/namespaces/{ns}/secrets", {
        "metadata": {"name": "regcred"}, "type": "kubernetes.io/dockerconfigjson",
        "data": {".dockerconfigjson": dockercfg},
    })  # fmt: skip
    pod = pool_pod(bundle.slug, "pull", command="sleep 30", restart="Never",
                   extra_spec={"imagePullSecrets": [{"name": "regcred"}]})  # fmt: skip
    must(consumer, "POST", pod_path(ns), pod)
    running(consumer, ns, "pull")
    settle()
    return {**pod_snapshot(consumer, pool, ns, remote, "pull"), **_remote_configs(pool, remote)}


def _decided(consumer: ControlPlane, ns: str, name: str) -> bool:
    st = (get(consumer, pod_path(ns, name)) or {}).get("status") or {}
    return st.get("phase") in ("Failed", "Running") or bool(events_for(consumer, ns, name))


def over_grant(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str) -> Snapshot:
    """A pod asking for more CPU than the whole grant, bound by hand (the scheduler would never bind it)."""
    pod = pool_pod(bundle.slug, "too-big", cpu="64", restart="Never", node_name=bundle.slug)
    must(consumer, "POST", pod_path(ns), pod)
    wait_until(lambda: _decided(consumer, ns, "too-big"), 60, "too-big decided")
    settle(8.0)
    return pod_snapshot(consumer, pool, ns, remote, "too-big")


def _gpu_pod(bundle: Bundle, name: str, **kw: Any) -> dict[str, Any]:
    pod = pool_pod(bundle.slug, name, command="sleep 30", restart="Never", **kw)
    res = pod["spec"]["containers"][0]["resources"]
    res["requests"][GPU] = "1"
    res["limits"] = {GPU: "1"}  # an extended resource needs a limit equal to its request
    return pod


def gpu_not_granted(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """A pod asking for a GPU the grant does not have, bound by hand (the scheduler would not bind it)."""
    must(consumer, "POST", pod_path(ns), _gpu_pod(bundle, "gpu", node_name=bundle.slug))
    wait_until(lambda: _decided(consumer, ns, "gpu"), 60, "gpu decided")
    settle(8.0)
    return pod_snapshot(consumer, pool, ns, remote, "gpu")


def _set_gpu(consumer: ControlPlane, bundle: Bundle, value: str | None) -> None:
    """The grant's GPUs: in the ResourceSlice (which the pool grants and vkbridge reads) and in the
    VirtualNode's resourceQuota (Liqo's controller-manager copies the grant there; Liqo's VK reads that)."""
    vn = f"/apis/offloading.liqo.io/v1beta1/namespaces/{bundle.tenant_ns}/virtualnodes/{bundle.slug}"
    merge = "application/merge-patch+json"
    must(consumer, "PATCH", rs_path(bundle), {"spec": {"resources": {GPU: value}}}, content_type=merge)
    must(consumer, "PATCH", vn, {"spec": {"resourceQuota": {"hard": {GPU: value}}}}, content_type=merge)


def _node_gpu(consumer: ControlPlane, bundle: Bundle) -> str | None:
    node = get(consumer, f"/api/v1/nodes/{bundle.slug}") or {}
    gpu = ((node.get("status") or {}).get("allocatable") or {}).get(GPU)
    return None if gpu is None else str(gpu)


def gpu_granted(
    switch: ImplSwitch, consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """A GPU pod when the grant has one: it travels; the pool's workers have none, so it waits there. Then
    the GPU leaves the grant: does it leave the Node? (A fresh Node afterwards either way.)"""
    _set_gpu(consumer, bundle, "1")
    try:
        wait_until(lambda: _node_gpu(consumer, bundle) == "1", 60, f"{GPU} on the node")
        must(consumer, "POST", pod_path(ns), _gpu_pod(bundle, "gpu"))
        wait_until(lambda: get(pool, pod_path(remote, "gpu")), 60, "the gpu pod on the pool")
        settle(6.0)
        out = pod_snapshot(consumer, pool, ns, remote, "gpu")
    finally:
        _set_gpu(consumer, bundle, None)
    with contextlib.suppress(TimeoutError):
        wait_until(lambda: _node_gpu(consumer, bundle) is None, 20, f"{GPU} to leave the node")
    out["node-after-grant-drop"] = {GPU: _node_gpu(consumer, bundle)}
    consumer.api("DELETE", pod_path(ns, "gpu") + "?gracePeriodSeconds=0")
    wait_until(lambda: get(pool, shadow_path(remote, "gpu")) is None, 30, "the gpu ShadowPod gone")
    switch.fresh_node()
    return out


DS_NAME = "everywhere"


def _daemonset(bundle: Bundle) -> dict[str, Any]:
    """A DaemonSet that tolerates every taint (as log shippers do) and selects the pool's node."""
    template = pool_pod(bundle.slug, command="sleep 3600", labels={"app": "ds"})
    template["spec"]["tolerations"] = [{"operator": "Exists"}]
    return {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": DS_NAME},
        "spec": {"selector": {"matchLabels": {"app": "ds"}},
                 "template": {"metadata": {"labels": {"app": "ds"}}, "spec": template["spec"]}},
    }  # fmt: skip


def _ds_pod(consumer: ControlPlane, ns: str) -> dict[str, Any] | None:
    items = must(consumer, "GET", pod_path(ns) + "?labelSelector=app%3Dds")["items"]
    return items[0] if items else None


def _ds_running_pod(consumer: ControlPlane, ns: str) -> dict[str, Any] | None:
    """The DaemonSet's Running pod, whichever it is: Liqo's VK at times deletes the first one (its remote
    ShadowPod went away during start-up) and the DaemonSet controller makes another; CI saw it once."""
    items = must(consumer, "GET", pod_path(ns) + "?labelSelector=app%3Dds")["items"]
    live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    return next((p for p in live if phase_at_least(consumer, ns, p["metadata"]["name"], ("Running",))), None)


def daemonset(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str) -> Snapshot:
    """A DaemonSet pod placed on the virtual node, in the offloaded namespace (both reflect it: Liqo
    offloads a DaemonSet pod only when its namespace's reflection runs) and in a namespace that is not
    offloaded (the fallback: Pending/OffloadingBackOff and a ReflectionDisabled Warning)."""
    plain = f"{ns}-x"
    must(consumer, "POST", "/api/v1/namespaces", {"metadata": {"name": plain}})
    sa = f"/api/v1/namespaces/{plain}/serviceaccounts/default"
    wait_until(lambda: get(consumer, sa), 30, "the default ServiceAccount")
    out: Snapshot = {}
    try:
        for where in (ns, plain):
            must(consumer, "POST", f"/apis/apps/v1/namespaces/{where}/daemonsets", _daemonset(bundle))
        pod = wait_until(lambda: _ds_running_pod(consumer, ns), 90, "a Running pod of the DaemonSet")
        name = pod["metadata"]["name"]
        stray = wait_until(lambda: _ds_pod(consumer, plain), 60, "the not-offloaded DaemonSet's pod")
        wait_until(lambda: events_for(consumer, plain, stray["metadata"]["name"]), 60, "the fallback's event")
        settle()
        offloaded = pod_snapshot(consumer, pool, ns, remote, name)
        fallback = {f"fallback-{k}": v for k, v in
                    pod_snapshot(consumer, pool, plain, remote, stray["metadata"]["name"]).items()}  # fmt: skip
        out = snap.placeholders({**offloaded, **fallback}, {
            name: "<POD>", stray["metadata"]["name"]: "<POD>", plain: "<NS>-x",
            pod["metadata"]["labels"].get("controller-revision-hash", ""): "<HASH>",
        })  # fmt: skip
    finally:
        for where in (ns, plain):
            consumer.api("DELETE", f"/apis/apps/v1/namespaces/{where}/daemonsets/{DS_NAME}")
        wait_until(
            lambda: _ds_pod(consumer, ns) is None and _ds_pod(consumer, plain) is None, 60, "ds pods gone"
        )
        consumer.api("DELETE", f"/api/v1/namespaces/{plain}")
    return out


def quota_refusal(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """A ResourceQuota in the pool namespace that admits no pod: the pool takes the ShadowPod (the grant has
    room) but its pod is refused. Waits past vkbridge's 30 s "no remote pod" notice, the same for both."""
    quota = f"/api/v1/namespaces/{remote}/resourcequotas"
    must(pool, "POST", quota, {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}})
    wait_until(lambda: (get(pool, f"{quota}/no-pods") or {}).get("status", {}).get("hard"), 30, "quota")
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "refused", restart="Never"))
    wait_until(lambda: get(pool, shadow_path(remote, "refused")), 60, "the ShadowPod")
    settle(36.0)
    out = pod_snapshot(consumer, pool, ns, remote, "refused")
    out["remote"] = {"pod": get(pool, pod_path(remote, "refused")) is not None}
    return out


def local_deletion(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """Delete the local pod: what is left on each side afterwards, and the pod's events."""
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "doomed", restart="Never"))
    running(consumer, ns, "doomed")
    must(consumer, "DELETE", pod_path(ns, "doomed"))
    wait_until(lambda: get(consumer, pod_path(ns, "doomed")) is None, 60, "doomed gone at home")
    wait_until(lambda: get(pool, pod_path(remote, "doomed")) is None, 60, "doomed gone on the pool")
    return {
        "after": {"shadowpod": get(pool, shadow_path(remote, "doomed")) is not None},
        "events": snap.events(events_for(consumer, ns, "doomed")),
    }


def _reasons(plane: ControlPlane, ns: str, name: str) -> set[str]:
    return {str(e.get("reason")) for e in events_for(plane, ns, name)}


def _pool_reasons(pool: ControlPlane, remote: str, name: str) -> set[str]:
    """Reasons of the pool's Events about the pod that both relay (Scheduled: the consumer has its own)."""
    return _reasons(pool, remote, name) - {"Scheduled"}


def _remote_deletion(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str,
                     query: str) -> Snapshot:  # fmt: skip
    """Delete the running remote pod on the pool (`query`: the DELETE's options) and let things settle:
    the pool's ShadowPod controller re-creates a pod that is gone before it reports a terminal phase.
    (Not a scenario: a graceful delete, whose kubelet reports the pod Failed a moment before it goes, races
    that re-creation in both implementations; docs/compatibility.md says what each does.)"""
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "victim"))
    running(consumer, ns, "victim")
    old = must(pool, "GET", pod_path(remote, "victim"))["metadata"]["uid"]
    must(pool, "DELETE", pod_path(remote, "victim") + query)

    def settled() -> bool:
        local = (get(consumer, pod_path(ns, "victim")) or {}).get("status") or {}
        new = get(pool, pod_path(remote, "victim")) or {}
        back = (
            new.get("metadata", {}).get("uid") not in (None, old) and new["status"].get("phase") == "Running"
        )
        return local.get("phase") in ("Succeeded", "Failed") or back

    with contextlib.suppress(TimeoutError):  # neither is a difference the snapshot shows
        wait_until(settled, 60, "victim re-created on the pool or finished at home")
        # The old pod's kubelet says Killing a moment after it is gone: wait until the pool's events arrived.
        wait_until(
            lambda: _pool_reasons(pool, remote, "victim") <= _reasons(consumer, ns, "victim"), 20, "events"
        )
    settle(3.0)
    out = pod_snapshot(consumer, pool, ns, remote, "victim")
    # The old pod's Killing comes from the pool's kubelet after the pod is gone, when it comes at all: under
    # load it missed the wait above in one implementation's run and not the other's (CI, lanes side by side).
    # Whether a remote Event is copied home is pinned by tests/integration/test_remote_events.py.
    out["events"].pop("Killing/Normal", None)
    new = get(pool, pod_path(remote, "victim"))
    out["after"] = {
        "remote-pod": "none" if new is None else ("same" if new["metadata"]["uid"] == old else "re-created"),
        "shadowpod": get(pool, shadow_path(remote, "victim")) is not None,
    }
    print(f"remote deletion {query or '(graceful)'}: {out['after']}, local {out['pod-status']}")
    return out


def remote_force_deletion(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """`kubectl delete pod --force --grace-period=0` on the pool: gone at once, no final status."""
    return _remote_deletion(consumer, pool, bundle, ns, remote, "?gracePeriodSeconds=0")


def metadata_change(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """Labels and annotations changed on the running local pod: what reaches the ShadowPod and the pool pod."""
    pod = pool_pod(bundle.slug, "relabel", labels={"app": "burst", "gone": "soon"}, annotations={"a": "1"})
    must(consumer, "POST", pod_path(ns), pod)
    running(consumer, ns, "relabel")
    patch = {"metadata": {"labels": {"tier": "web", "app": "changed", "gone": None},
                          "annotations": {"note": "hello", "a": None}}}  # fmt: skip
    must(consumer, "PATCH", pod_path(ns, "relabel"), patch, content_type="application/merge-patch+json")

    def propagated() -> bool:
        remote_pod = get(pool, pod_path(remote, "relabel")) or {}
        return bool((remote_pod.get("metadata") or {}).get("labels", {}).get("tier") == "web")

    with contextlib.suppress(TimeoutError):  # not propagating is a difference the snapshot shows
        wait_until(propagated, 20, "the new labels on the pool pod")
    settle()
    out = pod_snapshot(consumer, pool, ns, remote, "relabel")
    remote_pod = get(pool, pod_path(remote, "relabel")) or {}
    out["remote-pod"] = {
        k: (remote_pod.get("metadata") or {}).get(k) or {} for k in ("labels", "annotations")
    }
    return out


SCENARIOS: dict[str, Scenario] = {
    "burst-hello": burst_hello,
    "references": references,
    "image-pull-secrets": image_pull_secrets,
    "over-grant": over_grant,
    "gpu-not-granted": gpu_not_granted,
    "daemonset": daemonset,
    "quota-refusal": quota_refusal,
    "local-deletion": local_deletion,
    "remote-force-deletion": remote_force_deletion,
    "metadata-change": metadata_change,
}

# Scenarios that also need the switch (they restart the implementation on a fresh Node).
WITH_SWITCH: dict[str, Callable[..., Snapshot]] = {"gpu-granted": gpu_granted}


@pytest.mark.parametrize("name", [*SCENARIOS, *WITH_SWITCH])
def test_differential(
    name: str, switch: ImplSwitch, consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, fresh_ns: Any
) -> None:
    scenario = SCENARIOS.get(name) or functools.partial(WITH_SWITCH[name], switch)
    liqo, ours = run_both(switch, consumer, pool, bundle, fresh_ns, scenario)
    assert_documented(name, liqo, ours)


def test_liqo_start_up_error_fails_clearly_though_it_exits_0(
    consumer: ControlPlane, bundle: Bundle, emulator: EmulatorHandle, tmp_path: Path
) -> None:
    """Liqo's main() logs a start-up error and exits 0: check_running must still say it failed, and why."""
    opts = vkbridge_options(consumer, bundle, nodename="ghost-node", env={"VIRTUALNODE_NAME": "no-such-vn"})
    proc = LiqoVkProcess(opts, tmp_path / "liqo.log").start()
    try:
        wait_until(lambda: not proc.alive(), 60, "Liqo's VK to give up")
        assert proc.proc is not None and proc.proc.returncode == 0
        with pytest.raises(RuntimeError, match=r"exited \(code 0; it exits 0 after a start-up error\)"):
            proc.check_running()
        assert "Unable to get virtual node" in proc.log_text()
    finally:
        proc.stop()
