"""The pool emulator and the bundle, on the two real control planes (no vkbridge involved).

These pin the Liqo behaviour vkbridge relies on: offloading -> remote namespace, ShadowPod -> owned Pod,
credentials through the tunnel, the quota webhook, the consumer pod webhook, Renew signing, and re-signing
at 2/3 of the lifetime.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import functools
import hashlib
import ipaddress
import re
import uuid
from collections.abc import AsyncIterator, Callable
from fractions import Fraction
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from e2e import waiting
from e2e.bundle import (
    Bundle,
    decode_kubeconfig_secret,
    kubeconfig_dict,
    make_csr,
    new_key,
    private_pem,
)
from e2e.controlplane import ControlPlane
from e2e.demo import burst_hello
from e2e.emulator import EmulatorHandle, identity_cn
from e2e.emulator import names as n
from e2e.emulator.certs import renewal_due_at
from e2e.emulator.kube import ApiError, Credentials, Kube, api_path
from e2e.emulator.pod_webhook import (
    CONFIG_NAME,
    SCHEDULING_LABEL,
    MutationError,
    json_patch,
    mutate,
    schedules_remotely,
)
from e2e.emulator.quota_webhook import check, pod_cost
from e2e.fixtures_pool import namespace_offloading, offload_namespace_async
from e2e.tunnel import TunnelProxy
from tests.integration.helpers import fresh_peering

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

WEBHOOK_DENIED = 'admission webhook "shadowpod.validate.liqo.io" denied the request: '


# Answers the emulator's API gives while it settles count as "not yet".
eventually = functools.partial(
    waiting.eventually, interval=0.1, not_yet=(TimeoutError, ApiError, OSError, aiohttp.ClientError)
)


@pytest.fixture
async def ck(consumer: ControlPlane) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(consumer.admin_kubeconfig, name="consumer") as k:
        yield k


@pytest.fixture
async def pk(pool: ControlPlane) -> AsyncIterator[Kube]:
    async with Kube.from_kubeconfig(pool.admin_kubeconfig, name="pool") as k:
        yield k


@pytest.fixture
async def tenant(bundle: Bundle, emulator: EmulatorHandle) -> AsyncIterator[Kube]:
    """The pool as the tenant identity of the bundle, through the tunnel."""
    async with bundle.kube() as k:
        yield k


def shadowpod(name: str, ns: str, requests: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": n.OFFLOADING,
        "kind": "ShadowPod",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {
                n.ORIGIN: "c-1a2b3c4d",
                n.DESTINATION: "c0123456789ab",
                # Another virtual node's label: the session's vkbridge (when running) must leave it alone.
                "offloading.liqo.io/nodename": "emulator-test-node",
                "app": name,
            },
            "annotations": {"example.com/note": "copied"},
        },
        "spec": {
            "pod": {
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox:1.36",
                        "command": ["sleep", "3600"],
                        "resources": {"requests": requests or {"cpu": "10m", "memory": "16Mi"}},
                    }
                ],
                "restartPolicy": "Never",
                "terminationGracePeriodSeconds": 1,
            }
        },
    }


async def whoami(kube: Kube, timeout: float = 10.0) -> dict[str, Any]:
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    got = await kube.request(
        "POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review, timeout=timeout
    )
    info: dict[str, Any] = got["status"]["userInfo"]
    return info


@pytest.fixture
async def offloaded_ns(
    emulator: EmulatorHandle, consumer: ControlPlane, ck: Kube, pk: Kube, fresh_ns: Callable[..., str]
) -> tuple[str, str]:
    """A fresh consumer namespace offloaded through the running emulator: (local, remote)."""
    ns = await asyncio.to_thread(fresh_ns, consumer)
    return ns, await offload_namespace_async(ck, pk, ns)


# ---- pure rules ------------------------------------------------------------------------------------


def test_identity_cn_and_quota_messages_follow_liqo() -> None:
    assert identity_cn("c0123456789ab", "c-1a2b3c4d") == "c0123456789ab-" + _sha6("c-1a2b3c4d")
    spec = {
        "containers": [
            {"resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"resources": {"requests": {"cpu": "500m"}}},
        ],
        "initContainers": [{"resources": {"requests": {"cpu": "2", "memory": "64Mi"}}}],
    }
    assert pod_cost(spec) == {"cpu": Fraction(2), "memory": Fraction(2**30)}
    grant = {"cpu": "4", "memory": "8Gi"}
    assert check({"cpu": Fraction(5)}, grant, {"cpu": Fraction(1, 10)}) == (
        "peering cpu quota usage exceeded - free 3900m / requested 5"
    )
    assert check({"memory": Fraction(2**33)}, grant, {"memory": Fraction(64 * 2**20)}) == (
        "peering memory quota usage exceeded - free 8128Mi / requested 8Gi"
    )
    assert check({"cpu": Fraction(4)}, grant, {}) is None
    assert (
        check({"nvidia.com/gpu": Fraction(1)}, grant, {})
        == "nvidia.com/gpu quota limit not found for this peering"
    )


LIQO_TOLERATION = {"key": "virtual-node.liqo.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}
POOL_TOLERATION = {
    "key": "multicloud.io/pool",
    "operator": "Equal",
    "value": "c0123456789ab",
    "effect": "NoSchedule",
}
IS_VIRTUAL = {"key": "liqo.io/type", "operator": "In", "values": ["virtual-node"]}
NOT_VIRTUAL = {"key": "liqo.io/type", "operator": "NotIn", "values": ["virtual-node"]}


def _nso(strategy: str, *terms: dict[str, Any]) -> dict[str, Any]:
    spec: dict[str, Any] = {"podOffloadingStrategy": strategy}
    if terms:
        spec["clusterSelector"] = {"nodeSelectorTerms": list(terms)}
    return {"metadata": {"name": "offloading", "namespace": "ns"}, "spec": spec}


def test_pod_mutations_follow_liqo() -> None:
    """pkg/webhooks/pod/mutations.go of Liqo v1.2, case by case."""
    guide = namespace_offloading("ns")  # GUIDE §3.7: LocalAndRemote with the virtual-node selector
    pod = {
        "spec": {"tolerations": [POOL_TOLERATION], "nodeSelector": {"multicloud.io/pool": "c0123456789ab"}}
    }
    assert mutate(guide, pod) == {
        "tolerations": [POOL_TOLERATION, LIQO_TOLERATION],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [IS_VIRTUAL]},
                        {"matchExpressions": [NOT_VIRTUAL]},
                    ]
                }
            }
        },
    }
    assert pod["spec"]["tolerations"] == [POOL_TOLERATION], "the input is not modified"
    # LocalAndRemote without a selector: the toleration only; a pod already tolerating: no duplicate.
    assert mutate(_nso("LocalAndRemote"), {"spec": {}}) == {"tolerations": [LIQO_TOLERATION]}
    assert mutate(_nso("LocalAndRemote"), {"spec": {"tolerations": [dict(LIQO_TOLERATION)]}}) == {}
    # Remote without a selector: one term requiring a virtual node.
    assert mutate(_nso("Remote"), {"spec": {}})["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [IS_VIRTUAL]}]
            }
        }
    }
    # Remote with a selector, pod with its own required terms: (X||Y) && (S+In), matchFields dropped,
    # preferred terms and pod affinity kept.
    sel = {"key": "topology.kubernetes.io/region", "operator": "In", "values": ["eu"]}
    x = {"key": "disk", "operator": "Exists"}
    y = {"key": "gpu", "operator": "DoesNotExist"}
    preferred = [{"weight": 1, "preference": {"matchExpressions": [x]}}]
    own = {
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]},
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [x],
                        "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}],
                    },
                    {"matchExpressions": [y]},
                ]
            },
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        },
    }
    got = mutate(_nso("Remote", {"matchExpressions": [sel]}), {"spec": {"affinity": own}})["affinity"]
    assert got["podAffinity"] == own["podAffinity"]
    assert got["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] == preferred
    assert got["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] == {
        "nodeSelectorTerms": [
            {"matchExpressions": [x, sel, IS_VIRTUAL]},
            {"matchExpressions": [y, sel, IS_VIRTUAL]},
        ]
    }
    # An empty required selector is replaced, not merged (it would select nothing).
    empty: dict[str, Any] = {
        "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}
    }
    assert mutate(guide, {"spec": {"affinity": empty}})["affinity"]["nodeAffinity"] == {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [IS_VIRTUAL]}, {"matchExpressions": [NOT_VIRTUAL]}]
        }
    }
    # The Liqo runtime class and the Local strategy leave the pod alone; an unknown strategy is an error.
    assert mutate(_nso("Remote"), {"spec": {"runtimeClassName": "liqo"}}) == {}
    assert mutate(_nso("Local", {"matchExpressions": [sel]}), {"spec": {}}) == {}
    with pytest.raises(MutationError):
        mutate(_nso("Everywhere"), {"spec": {}})
    assert json_patch({"tolerations": [LIQO_TOLERATION]}) == [
        {"op": "add", "path": "/spec/tolerations", "value": [LIQO_TOLERATION]}
    ]
    # Which namespaces Liqo labels liqo.io/scheduling-enabled=true (the webhook's namespaceSelector).
    assert schedules_remotely(guide) and schedules_remotely(_nso("Remote"))
    assert not schedules_remotely(_nso("Local")) and not schedules_remotely(None)
    deleting = {**guide, "metadata": {"name": "offloading", "deletionTimestamp": "2026-01-01T00:00:00Z"}}
    assert not schedules_remotely(deleting)


# ---- (a)(b)(c) offloading --------------------------------------------------------------------------


async def test_offloading_yields_remote_namespace_and_accepted_mapping(
    bundle: Bundle, ck: Kube, pk: Kube, offloaded_ns: tuple[str, str]
) -> None:
    ns, remote = offloaded_ns
    assert remote == f"{ns}-{bundle.consumer_id}"

    want = {"remoteNamespace": remote, "phase": "Accepted"}
    consumer_nm = await ck.get(api_path(n.OFFLOADING, n.NAMESPACEMAPS, bundle.tenant_ns, bundle.slug))
    pool_nm = await pk.get(api_path(n.OFFLOADING, n.NAMESPACEMAPS, bundle.remote_tenant_ns, bundle.slug))
    assert consumer_nm["spec"]["desiredMapping"][ns] == remote
    assert consumer_nm["status"]["currentMapping"][ns] == want
    assert pool_nm["status"]["currentMapping"][ns] == want
    labels = pool_nm["metadata"]["labels"]
    assert labels[n.REPLICATION_ORIGIN] == bundle.consumer_id and labels[n.REPLICATION_STATUS] == "true"

    remote_ns = await pk.get(api_path("v1", "namespaces", name=remote))
    assert remote_ns["metadata"]["labels"][n.REMOTE_CLUSTER_ID] == bundle.consumer_id
    assert remote_ns["metadata"]["annotations"] == {
        n.NS_MANAGED_BY_MAP: f"{bundle.remote_tenant_ns}/{bundle.slug}",
        n.NS_ORIGINAL_NAME: ns,
    }
    rb = await pk.get(api_path(n.RBAC, "rolebindings", remote, bundle.remote_tenant_ns))
    assert rb["roleRef"]["name"] == n.VK_REMOTE_CLUSTERROLE
    assert rb["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": bundle.consumer_id}
    ]

    nso_path = api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS, ns, n.OFFLOADING_NAME)
    nso = await eventually(lambda: _with_phase(ck, nso_path, "Ready"), 10, "NamespaceOffloading Ready")
    assert nso["status"]["remoteNamespaceName"] == remote

    # Deleting the NamespaceOffloading removes the entry and the remote namespace.
    await ck.delete(nso_path)

    async def gone() -> bool:
        c = await ck.get(api_path(n.OFFLOADING, n.NAMESPACEMAPS, bundle.tenant_ns, bundle.slug))
        p = await pk.get(api_path(n.OFFLOADING, n.NAMESPACEMAPS, bundle.remote_tenant_ns, bundle.slug))
        return (
            ns not in (c["spec"].get("desiredMapping") or {})
            and ns not in ((c.get("status") or {}).get("currentMapping") or {})
            and ns not in ((p.get("status") or {}).get("currentMapping") or {})
            and await pk.get_or_none(api_path("v1", "namespaces", name=remote)) is None
        )

    await eventually(gone, 90, "mapping entry and remote namespace removed")


async def _with_phase(ck: Kube, path: str, phase: str) -> dict[str, Any] | None:
    obj = await ck.get(path)
    return obj if (obj.get("status") or {}).get("offloadingPhase") == phase else None


async def test_namespaceoffloading_without_selector_selects_no_cluster(
    emulator: EmulatorHandle, bundle: Bundle, consumer: ControlPlane, ck: Kube, fresh_ns: Any
) -> None:
    """Liqo v1.1.2/v1.2.0 quirk (GUIDE §3.7): no clusterSelector -> NoClusterSelected, nothing mapped."""
    ns = await asyncio.to_thread(fresh_ns, consumer)
    body = {
        "apiVersion": n.OFFLOADING,
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading"},
        "spec": {},
    }
    await ck.create(api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS, ns), body)
    path = api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS, ns, "offloading")
    await eventually(lambda: _with_phase(ck, path, "NoClusterSelected"), 10, "NoClusterSelected")
    nm = await ck.get(api_path(n.OFFLOADING, n.NAMESPACEMAPS, bundle.tenant_ns, bundle.slug))
    assert ns not in (nm["spec"].get("desiredMapping") or {})


async def test_restarted_emulator_converges(
    emulator: EmulatorHandle, bundle: Bundle, ck: Kube, pk: Kube, offloaded_ns: tuple[str, str]
) -> None:
    """Level-based: what changed while it was down is reconciled when it comes back."""
    ns, remote = offloaded_ns
    old_port = emulator.webhook_port
    await asyncio.to_thread(emulator.stop)
    try:
        await ck.delete(api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS, ns, n.OFFLOADING_NAME))
        vwc = await pk.get_or_none(
            api_path(n.ADMISSIONREG, "validatingwebhookconfigurations", name=n.WEBHOOK_NAME)
        )
        assert vwc is None, "a stopped emulator leaves no webhook behind to block ShadowPods"
    finally:
        await asyncio.to_thread(emulator.start)
    assert emulator.webhook_port > 0 and old_port > 0
    await eventually(
        lambda: _absent(pk, api_path("v1", "namespaces", name=remote)), 90, "stale remote namespace removed"
    )
    vwc = await pk.get(api_path(n.ADMISSIONREG, "validatingwebhookconfigurations", name=n.WEBHOOK_NAME))
    assert vwc["webhooks"][0]["clientConfig"]["url"].endswith(f":{emulator.webhook_port}/validate/shadowpods")


async def _absent(kube: Kube, path: str) -> bool:
    return await kube.get_or_none(path) is None


# ---- (d) ShadowPod -> Pod ----------------------------------------------------------------------------


async def test_shadowpod_becomes_running_pod_owned_by_it_and_is_recreated(
    pk: Kube, tenant: Kube, offloaded_ns: tuple[str, str]
) -> None:
    _, remote = offloaded_ns
    sp = await tenant.create(api_path(n.OFFLOADING, n.SHADOWPODS, remote), shadowpod("web", remote))
    pod_path = api_path("v1", "pods", remote, "web")

    async def running_pod(not_uid: str = "") -> dict[str, Any] | None:
        pod = await pk.get(pod_path)
        ok = (pod.get("status") or {}).get("phase") == "Running" and pod["metadata"]["uid"] != not_uid
        return pod if ok and not pod["metadata"].get("deletionTimestamp") else None

    pod = await eventually(running_pod, 60, "pod Running")
    refs = pod["metadata"]["ownerReferences"]
    assert [(r["kind"], r["name"], r["uid"], r.get("controller")) for r in refs] == [
        ("ShadowPod", "web", sp["metadata"]["uid"], True)
    ]
    assert pod["metadata"]["labels"][n.MANAGED_BY] == "shadowpod"
    assert pod["metadata"]["labels"]["app"] == "web"
    assert pod["metadata"]["annotations"]["example.com/note"] == "copied"
    assert pod["spec"]["containers"][0]["command"] == ["sleep", "3600"]
    sp_path = api_path(n.OFFLOADING, n.SHADOWPODS, remote, "web")
    await eventually(lambda: _sp_phase(pk, sp_path, "Running"), 10, "ShadowPod status Running")

    # A deleted pod comes back with a new UID, still owned by the ShadowPod.
    await pk.delete(pod_path, uid=pod["metadata"]["uid"], grace=0)
    again = await eventually(lambda: running_pod(not_uid=pod["metadata"]["uid"]), 60, "pod re-created")
    assert again["metadata"]["ownerReferences"][0]["uid"] == sp["metadata"]["uid"]

    # A terminal ShadowPod is left alone: its pod is not re-created any more.
    await pk.patch(f"{sp_path}/status", {"status": {"phase": "Succeeded"}})
    await eventually(lambda: _sp_phase(pk, sp_path, "Succeeded"), 10, "ShadowPod Succeeded")
    await pk.delete(pod_path, uid=again["metadata"]["uid"], grace=0)
    await eventually(lambda: _absent(pk, pod_path), 30, "pod deleted")
    await asyncio.sleep(1.0)  # give a wrong re-creation the time to show up
    assert await pk.get_or_none(pod_path) is None


async def _sp_phase(kube: Kube, path: str, phase: str) -> bool:
    return ((await kube.get(path)).get("status") or {}).get("phase") == phase


# ---- bundle credentials and the tunnel --------------------------------------------------------------


async def test_bundle_kubeconfig_authenticates_through_the_tunnel_and_blackhole_cuts_it(
    emulator: EmulatorHandle, bundle: Bundle, tunnel: TunnelProxy, ck: Kube, pool: ControlPlane
) -> None:
    cluster = bundle.kubeconfig["clusters"][0]["cluster"]
    assert cluster["server"] == tunnel.url != pool.url
    assert "insecure-skip-tls-verify" not in cluster
    assert base64.b64decode(cluster["certificate-authority-data"]) == pool.ca_pem
    secret = await ck.get(api_path("v1", "secrets", bundle.tenant_ns, bundle.secret_name))
    assert decode_kubeconfig_secret(secret)["clusters"][0]["cluster"]["server"] == tunnel.url
    cert = x509.load_pem_x509_certificate(bundle.cert_pem)
    assert (
        cert.subject.rfc4514_string()
        == f"CN={identity_cn(bundle.slug, bundle.consumer_id)},O={bundle.consumer_id}"
    )

    async with bundle.kube() as tenant:
        info = await whoami(tenant)
        assert info["username"] == bundle.identity_cn == f"{bundle.slug}-{_sha6(bundle.consumer_id)}"
        assert bundle.consumer_id in info["groups"] and "system:masters" not in info["groups"]
        # Narrow rights in its tenant namespace: its own ResourceSlice, nothing else.
        await tenant.get(api_path(n.AUTH, n.RESOURCESLICES, bundle.remote_tenant_ns, bundle.slug))
        for path in (
            api_path("v1", "secrets", bundle.remote_tenant_ns),
            api_path(n.AUTH, n.RESOURCESLICES, bundle.remote_tenant_ns),
        ):
            with pytest.raises(ApiError) as err:
                await tenant.get(path)
            assert err.value.status == 403
        with pytest.raises(ApiError) as err:
            await tenant.patch(
                api_path(n.AUTH, n.RESOURCESLICES, bundle.remote_tenant_ns, bundle.slug, "status"),
                {"status": {"resources": {"cpu": "1000"}}},
            )
        assert err.value.status == 403

        tunnel.blackhole()
        try:
            with pytest.raises((TimeoutError, OSError, aiohttp.ClientError)):
                await whoami(tenant, timeout=2.0)
        finally:
            tunnel.restore()
        info = await eventually(
            lambda: whoami(tenant, timeout=3.0), 30.0, "the pool through the restored tunnel"
        )
        assert info["username"] == bundle.identity_cn


def _sha6(consumer_id: str) -> str:
    return hashlib.sha256(consumer_id.encode()).hexdigest()[:12]


# ---- (g) quota webhook ------------------------------------------------------------------------------


async def test_quota_webhook_denies_over_grant_and_frees_terminal_pods(
    bundle: Bundle, pk: Kube, tenant: Kube, offloaded_ns: tuple[str, str]
) -> None:
    _, remote = offloaded_ns
    coll = api_path(n.OFFLOADING, n.SHADOWPODS, remote)
    assert bundle.grant["ephemeral-storage"] == "20Gi"

    with pytest.raises(ApiError) as err:
        await tenant.create(coll, shadowpod("huge", remote, {"cpu": "100", "memory": "16Mi"}))
    assert err.value.status == 403
    assert re.fullmatch(
        re.escape(WEBHOOK_DENIED) + r"peering cpu quota usage exceeded - free \d+m? / requested 100",
        err.value.message,
    ), err.value.message

    with pytest.raises(ApiError) as err:
        await tenant.create(coll, shadowpod("gpu", remote, {"cpu": "10m", "nvidia.com/gpu": "1"}))
    assert err.value.message == WEBHOOK_DENIED + "nvidia.com/gpu quota limit not found for this peering"

    # Cumulative: 15Gi of 20Gi held, 10Gi more does not fit.
    first = shadowpod("first", remote, {"cpu": "10m", "memory": "16Mi", "ephemeral-storage": "15Gi"})
    await tenant.create(coll, first)
    second = shadowpod("second", remote, {"cpu": "10m", "memory": "16Mi", "ephemeral-storage": "10Gi"})
    with pytest.raises(ApiError) as err:
        await tenant.create(coll, second)
    assert (
        err.value.message
        == WEBHOOK_DENIED + "peering ephemeral-storage quota usage exceeded - free 5Gi / requested 10Gi"
    )

    # A terminal ShadowPod frees its share at once (Liqo keeps it counted: liqo#3137).
    await pk.patch(f"{coll}/first/status", {"status": {"phase": "Succeeded"}})
    await eventually(lambda: tenant.create(coll, second), 15, "second admitted once first is terminal")
    # Give the grant back now rather than when the namespace goes (later tests share it).
    for name in ("second", "first"):
        await tenant.delete(f"{coll}/{name}")


# ---- consumer pod webhook ---------------------------------------------------------------------------


def burst_pod(slug: str) -> dict[str, Any]:
    """GUIDE §3.8 as the demo runs it (no Liqo toleration: the consumer pod webhook adds it), named afresh."""
    return {**burst_hello(slug), "metadata": {"generateName": "burst-hello-"}}


def liqo_tolerations(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [t for t in pod["spec"].get("tolerations") or [] if t.get("key") == LIQO_TOLERATION["key"]]


async def _labelled(ck: Kube, ns: str, want: bool = True) -> bool:
    got = await ck.get(api_path("v1", "namespaces", name=ns))
    return ((got["metadata"].get("labels") or {}).get(SCHEDULING_LABEL) == "true") == want


async def test_pod_webhook_tolerates_virtual_node_in_offloaded_namespaces_only(
    bundle: Bundle, consumer: ControlPlane, ck: Kube, fresh_ns: Any, offloaded_ns: tuple[str, str]
) -> None:
    ns, _ = offloaded_ns
    plain = await asyncio.to_thread(fresh_ns, consumer)
    await eventually(lambda: _labelled(ck, ns), 10, f"{SCHEDULING_LABEL} on the offloaded namespace")

    pod = await ck.create(api_path("v1", "pods", ns), burst_pod(bundle.slug))
    assert liqo_tolerations(pod) == [LIQO_TOLERATION]
    assert {**POOL_TOLERATION, "value": bundle.slug} in pod["spec"]["tolerations"]
    assert pod["spec"]["nodeSelector"] == {"multicloud.io/pool": bundle.slug}
    # GUIDE §3.7 selector with LocalAndRemote: "a virtual node, or any other node".
    assert pod["spec"]["affinity"] == {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [IS_VIRTUAL]}, {"matchExpressions": [NOT_VIRTUAL]}]
            }
        }
    }
    already = burst_pod(bundle.slug)
    already["spec"]["tolerations"].append(dict(LIQO_TOLERATION))
    pod = await ck.create(api_path("v1", "pods", ns), already)
    assert liqo_tolerations(pod) == [LIQO_TOLERATION], "no duplicate"

    pod = await ck.create(api_path("v1", "pods", plain), burst_pod(bundle.slug))
    assert liqo_tolerations(pod) == [] and "affinity" not in pod["spec"]
    assert await _labelled(ck, plain, want=False)

    # No NamespaceOffloading any more: the label goes and pods are left alone again.
    await ck.delete(api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS, ns, n.OFFLOADING_NAME))
    await eventually(lambda: _labelled(ck, ns, want=False), 10, f"{SCHEDULING_LABEL} removed")
    pod = await ck.create(api_path("v1", "pods", ns), burst_pod(bundle.slug))
    assert liqo_tolerations(pod) == [] and "affinity" not in pod["spec"]


async def test_pod_webhook_is_unregistered_on_stop_and_ignored_when_dead(
    emulator: EmulatorHandle, bundle: Bundle, consumer: ControlPlane, ck: Kube, offloaded_ns: tuple[str, str]
) -> None:
    ns, _ = offloaded_ns
    await eventually(lambda: _labelled(ck, ns), 10, f"{SCHEDULING_LABEL} on the offloaded namespace")
    pods = api_path("v1", "pods", ns)
    mwc_path = api_path(n.ADMISSIONREG, "mutatingwebhookconfigurations", name=CONFIG_NAME)
    mwc = await ck.get(mwc_path)
    [hook] = mwc["webhooks"]
    assert hook["name"] == "pod.mutate.liqo.io"
    assert hook["clientConfig"]["url"] == f"https://127.0.0.1:{emulator.pod_webhook_port}/mutate/pod"
    assert base64.b64decode(hook["clientConfig"]["caBundle"]) == consumer.ca_pem
    assert hook["failurePolicy"] == "Ignore"
    assert hook["namespaceSelector"] == {"matchLabels": {SCHEDULING_LABEL: "true"}}
    assert [(r["operations"], r["resources"]) for r in hook["rules"]] == [(["CREATE"], ["pods"])]

    await asyncio.to_thread(emulator.stop)
    try:
        assert await ck.get_or_none(mwc_path) is None, "SIGTERM unregisters the pod webhook"
        await asyncio.to_thread(emulator.start)
        mwc = await ck.get(mwc_path)
        assert mwc["webhooks"][0]["clientConfig"]["url"].endswith(f":{emulator.pod_webhook_port}/mutate/pod")
        # Killed, the registration stays behind; failurePolicy Ignore still admits pods, unmutated.
        await asyncio.to_thread(emulator.kill)
        assert await ck.get_or_none(mwc_path) is not None
        pod = await ck.create(pods, burst_pod(bundle.slug))
        assert liqo_tolerations(pod) == []
    finally:
        if not emulator.alive():
            await asyncio.to_thread(emulator.start)

    async def mutated() -> bool:
        return liqo_tolerations(await ck.create(pods, burst_pod(bundle.slug))) == [LIQO_TOLERATION]

    await eventually(mutated, 15, "pods mutated again once the emulator is back")


# ---- (f) Renew -------------------------------------------------------------------------------------


def renew_body(bundle: Bundle, csr_pem: bytes, name: str) -> dict[str, Any]:
    return {
        "apiVersion": n.AUTH,
        "kind": "Renew",
        "metadata": {"name": name, "namespace": bundle.remote_tenant_ns},
        "spec": {
            "consumerClusterID": bundle.consumer_id,
            "csr": base64.b64encode(csr_pem).decode(),
            "identityType": "ResourceSlice",
            "resourceSliceRef": {"name": bundle.slug},
        },
    }


async def test_renew_signs_exact_subject_only(
    bundle: Bundle, tenant: Kube, pk: Kube, tunnel: TunnelProxy
) -> None:
    coll = api_path(n.AUTH, n.RENEWS, bundle.remote_tenant_ns)
    key = new_key()
    good = f"renew-ok-{uuid.uuid4().hex[:6]}"
    await tenant.create(
        coll, renew_body(bundle, make_csr(key, bundle.identity_cn, [bundle.consumer_id]), good)
    )

    async def signed() -> bytes | None:
        r = await tenant.get(f"{coll}/{good}")
        crt = ((r.get("status") or {}).get("authParams") or {}).get("signedCRT")
        return base64.b64decode(crt) if crt else None

    cert_pem = await eventually(signed, 15, "Renew signed")
    kcfg = kubeconfig_dict(tunnel.url, bundle.ca_pem, cert_pem, private_pem(key), name="renewed")
    async with Kube.from_kubeconfig(kcfg) as renewed:
        info = await whoami(renewed)
    assert info["username"] == bundle.identity_cn
    assert bundle.consumer_id in info["groups"] and "system:masters" not in info["groups"]

    wrong_subjects = {
        "escalate": (bundle.identity_cn, ["system:masters"]),
        "extra-group": (bundle.identity_cn, [bundle.consumer_id, "system:masters"]),
        "other-cn": ("admin", [bundle.consumer_id]),
    }
    names = {}
    for label, (cn, orgs) in wrong_subjects.items():
        name = f"renew-{label}-{uuid.uuid4().hex[:6]}"
        names[name] = label
        await tenant.create(coll, renew_body(bundle, make_csr(new_key(), cn, orgs), name))
    for name in names:

        async def denied(name: str = name) -> bool:
            events = await pk.get(
                api_path("v1", "events", bundle.remote_tenant_ns)
                + f"?fieldSelector=involvedObject.name%3D{name}"
            )
            return any(e["reason"] == "RenewDenied" for e in events["items"])

        await eventually(denied, 15, f"RenewDenied event for {names[name]}")
        r = await pk.get(f"{coll}/{name}")
        assert not (r.get("status") or {}).get("authParams"), f"{names[name]} must not be signed"


# ---- (e) ResourceSlice re-signing at 2/3 of the lifetime --------------------------------------------


async def test_resourceslice_cert_resigned_at_two_thirds_and_propagated(
    consumer: ControlPlane,
    pool: ControlPlane,
    tunnel: TunnelProxy,
    pool_ca_files: tuple[Path, Path],
    pool_workdir: Path,
    ck: Kube,
    pk: Kube,
) -> None:
    peering = fresh_peering(
        consumer, pool, tunnel.url, pool_ca_files, pool_workdir, "30s", "replicator,resourceslice"
    )
    async with peering as (b, _):
        slug, cid = b.slug, b.consumer_id
        first = x509.load_pem_x509_certificate(b.cert_pem)
        due = renewal_due_at(first)
        rs_path = api_path(n.AUTH, n.RESOURCESLICES, b.remote_tenant_ns, slug)

        async def resigned() -> x509.Certificate | None:
            rs = await pk.get(rs_path)
            crt = x509.load_pem_x509_certificate(base64.b64decode(rs["status"]["authParams"]["signedCRT"]))
            return crt if crt.serial_number != first.serial_number else None

        new = await eventually(resigned, 40, "certificate re-signed")
        signed_at = new.not_valid_before_utc + dt.timedelta(seconds=5)  # the emulator backdates by 5 s
        assert due - dt.timedelta(seconds=1) <= signed_at < first.not_valid_after_utc, (due, signed_at)
        assert new.subject == first.subject
        fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
        assert new.public_key().public_bytes(*fmt) == first.public_key().public_bytes(*fmt), (
            "same CSR, same key"
        )

        new_pem = new.public_bytes(serialization.Encoding.PEM)

        async def propagated() -> dict[str, Any] | None:
            secret = await ck.get(api_path("v1", "secrets", b.tenant_ns, b.secret_name))
            kcfg = decode_kubeconfig_secret(secret)
            user = kcfg["users"][0]["user"]
            return kcfg if base64.b64decode(user["client-certificate-data"]) == new_pem else None

        kcfg = await eventually(propagated, 10, "new certificate in the kubeconfig Secret")
        assert base64.b64decode(kcfg["users"][0]["user"]["client-key-data"]) == b.key_pem, "key kept"
        consumer_rs = await eventually(
            lambda: _replicated(ck, api_path(n.AUTH, n.RESOURCESLICES, b.tenant_ns, slug), new_pem),
            10,
            "status replicated to the consumer",
        )
        assert consumer_rs["status"]["resources"] == b.grant
        async with Kube.from_kubeconfig(kcfg) as renewed:
            assert (await whoami(renewed))["username"] == identity_cn(slug, cid)


async def _replicated(ck: Kube, path: str, cert_pem: bytes) -> dict[str, Any] | None:
    rs = await ck.get(path)
    crt = ((rs.get("status") or {}).get("authParams") or {}).get("signedCRT")
    return rs if crt and base64.b64decode(crt) == cert_pem else None


# ---- consumer CSR approval --------------------------------------------------------------------------


def serving_csr(cn: str) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    csr = x509.CertificateSigningRequestBuilder().subject_name(name).add_extension(san, critical=False)
    return csr.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


def csr_body(pem: bytes) -> dict[str, Any]:
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"generateName": "vk-serving-"},
        "spec": {
            "request": base64.b64encode(pem).decode(),
            "signerName": "kubernetes.io/kubelet-serving",
            "usages": ["digital signature", "server auth"],
        },
    }


async def test_kubelet_serving_csr_of_a_tenant_serviceaccount_is_approved(
    emulator: EmulatorHandle, bundle: Bundle, consumer: ControlPlane, ck: Kube
) -> None:
    csrs = api_path("certificates.k8s.io/v1", "certificatesigningrequests")
    sa, role = f"vk-{uuid.uuid4().hex[:6]}", f"emulator-test-csr-{uuid.uuid4().hex[:6]}"
    await ck.create(api_path("v1", "serviceaccounts", bundle.tenant_ns), {"metadata": {"name": sa}})
    await ck.create(
        api_path(n.RBAC, "clusterroles"),
        {
            "metadata": {"name": role},
            "rules": [{"apiGroups": ["certificates.k8s.io"], "resources": ["certificatesigningrequests"],
                       "verbs": ["create", "get"]}],
        },
    )  # fmt: skip
    await ck.create(
        api_path(n.RBAC, "clusterrolebindings"),
        {
            "metadata": {"name": role},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": bundle.tenant_ns}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        },
    )
    created: list[str] = []
    try:
        tr = await ck.create(
            api_path("v1", "serviceaccounts", bundle.tenant_ns, sa, "token"),
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": 600},
            },
        )
        as_sa = Kube(Credentials(server=consumer.url, ca_pem=consumer.ca_pem, token=tr["status"]["token"]))
        # The admin's CSR goes first: the approver sees it before the SA's and must leave it alone.
        by_admin = await ck.create(csrs, csr_body(serving_csr(f"system:node:{bundle.slug}")))
        created.append(by_admin["metadata"]["name"])
        async with as_sa:
            by_sa = await eventually(
                lambda: as_sa.create(csrs, csr_body(serving_csr(f"system:node:{bundle.slug}"))),
                10,
                "CSR created by the tenant ServiceAccount (RBAC settling)",
            )
        created.append(by_sa["metadata"]["name"])

        async def issued() -> dict[str, Any] | None:
            got = await ck.get(f"{csrs}/{by_sa['metadata']['name']}")
            return got if (got.get("status") or {}).get("certificate") else None

        done = await eventually(issued, 30, "kubelet-serving certificate issued")
        first = done["status"]["conditions"][0]
        assert (first["type"], first["reason"]) == ("Approved", "LiqoApproval")
        cert = x509.load_pem_x509_certificate(base64.b64decode(done["status"]["certificate"]))
        assert (
            cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{bundle.slug}"
        )
        admin_csr = await ck.get(f"{csrs}/{by_admin['metadata']['name']}")
        assert not (admin_csr.get("status") or {}).get("conditions"), (
            "only tenant ServiceAccounts are approved"
        )
    finally:
        for name in created:
            await ck.delete(f"{csrs}/{name}")
        await ck.delete(api_path(n.RBAC, "clusterrolebindings", name=role))
        await ck.delete(api_path(n.RBAC, "clusterroles", name=role))
        await ck.delete(api_path("v1", "serviceaccounts", bundle.tenant_ns, sa))
