"""pytest plugin: the pool around vkbridge (fake workers, tunnel, emulator, peering bundle), session-scoped.

Registered from tests/conftest.py. Order of bring-up: fake workers and the tunnel, then the bundle (tenant
namespaces, credentials through the tunnel), then the emulator, which finds a settled peering.
``offload_namespace`` / ``offload_namespace_async`` offload a consumer namespace the GUIDE §3.7 way and
wait until the pool accepted it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e.bundle import Bundle, create_bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle, launch_emulator
from e2e.emulator import names as n
from e2e.emulator.kube import Kube, api_path
from e2e.fakekubelet import FakeKubeletHandle, launch_fake_kubelets
from e2e.tunnel import TunnelProxy

SLUG = "c0123456789ab"
CONSUMER_ID = "c-1a2b3c4d"
POOL_NODES = ["pool-worker-0", "pool-worker-1"]
OFFLOAD_TIMEOUT_S = 30.0


@pytest.fixture(scope="session")
def pool_workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("pool")


@pytest.fixture(scope="session")
def pool_ca_files(pool: ControlPlane, pool_workdir: Path) -> tuple[Path, Path]:
    """The pool's client CA as files (the emulator signs with it), key mode 0600."""
    return pool.ca.write(pool_workdir / "pki", "pool-ca")


@pytest.fixture(scope="session")
def fake_nodes(pool: ControlPlane, pool_workdir: Path) -> Iterator[FakeKubeletHandle]:
    """Two fake worker nodes on the pool that run what is bound to them."""
    cert, key = pool.ca.issue("system:node:pool-workers", ["system:nodes"], server=True, ips=["127.0.0.1"])
    assert key is not None
    handle = launch_fake_kubelets(pool.admin_kubeconfig, POOL_NODES, cert, key, pool_workdir / "fakekubelet")
    yield handle
    handle.stop()


@pytest.fixture(scope="session")
def tunnel(pool: ControlPlane) -> Iterator[TunnelProxy]:
    """The Cloudflare tunnel stand-in: vkbridge reaches the pool API only through it."""
    proxy = TunnelProxy("127.0.0.1", pool.port)
    proxy.start()
    yield proxy
    proxy.stop()


@pytest.fixture(scope="session")
def bundle(consumer: ControlPlane, pool: ControlPlane, tunnel: TunnelProxy) -> Bundle:
    """The peering bundle for SLUG/CONSUMER_ID, its kubeconfig pointing through the tunnel.

    Objects only: request ``emulator`` too for the Liqo controllers that make it live.
    """
    return create_bundle(consumer, pool, slug=SLUG, consumer_id=CONSUMER_ID, pool_server_url=tunnel.url)


@pytest.fixture(scope="session")
def emulator(
    consumer: ControlPlane,
    pool: ControlPlane,
    bundle: Bundle,
    fake_nodes: FakeKubeletHandle,
    tunnel: TunnelProxy,
    pool_ca_files: tuple[Path, Path],
    pool_workdir: Path,
) -> Iterator[EmulatorHandle]:
    """The Liqo parts around vkbridge for the session's peering."""
    consumer_ca = consumer.ca.write(pool_workdir / "pki", "consumer-ca")  # for the consumer pod webhook
    handle = launch_emulator(
        consumer_kubeconfig=consumer.admin_kubeconfig,
        pool_kubeconfig=pool.admin_kubeconfig,
        consumer_id=bundle.consumer_id,
        slug=bundle.slug,
        pool_ca_cert=pool_ca_files[0],
        pool_ca_key=pool_ca_files[1],
        consumer_ca_cert=consumer_ca[0],
        consumer_ca_key=consumer_ca[1],
        workdir=pool_workdir / "emulator",
        api_server_url=tunnel.url,
    )
    yield handle
    handle.stop()


@pytest.fixture
def offload(consumer: ControlPlane, pool: ControlPlane, emulator: EmulatorHandle) -> Callable[[str], str]:
    """offload(ns) -> remote namespace, for sync tests (async tests: offload_namespace_async)."""
    return lambda ns: offload_namespace(consumer, pool, ns)


def namespace_offloading(ns: str) -> dict[str, object]:
    """GUIDE §3.7: DefaultName, LocalAndRemote, and the clusterSelector Liqo v1.2 needs."""
    return {
        "apiVersion": n.OFFLOADING,
        "kind": "NamespaceOffloading",
        "metadata": {"name": n.OFFLOADING_NAME, "namespace": ns},
        "spec": {
            "namespaceMappingStrategy": "DefaultName",
            "podOffloadingStrategy": "LocalAndRemote",
            "clusterSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": "liqo.io/type", "operator": "In", "values": ["virtual-node"]}
                        ]
                    }
                ]
            },
        },
    }


async def offload_namespace_async(
    consumer: Kube, pool: Kube, ns: str, *, slug: str = SLUG, consumer_id: str = CONSUMER_ID,
    timeout: float = OFFLOAD_TIMEOUT_S,
) -> str:  # fmt: skip
    """Offload ns; returns the remote namespace once both NamespaceMaps say Accepted and it exists."""
    remote = n.remote_namespace(ns, consumer_id)
    await consumer.ensure(api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS, ns), namespace_offloading(ns))
    maps = (
        (consumer, api_path(n.OFFLOADING, n.NAMESPACEMAPS, n.consumer_tenant_ns(slug), slug)),
        (pool, api_path(n.OFFLOADING, n.NAMESPACEMAPS, n.pool_tenant_ns(consumer_id), slug)),
    )
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        states = []
        for kube, path in maps:
            nm = await kube.get_or_none(path) or {}
            states.append(((nm.get("status") or {}).get("currentMapping") or {}).get(ns))
        ns_obj = await pool.get_or_none(api_path("v1", "namespaces", name=remote))
        want = {"remoteNamespace": remote, "phase": "Accepted"}
        if all(s == want for s in states) and ns_obj and not ns_obj["metadata"].get("deletionTimestamp"):
            return remote
        if loop.time() > deadline:
            raise TimeoutError(f"namespace {ns} not offloaded after {timeout:.0f}s: mappings {states}")
        await asyncio.sleep(0.1)


def offload_namespace(
    consumer: ControlPlane, pool: ControlPlane, ns: str, *, slug: str = SLUG, consumer_id: str = CONSUMER_ID,
    timeout: float = OFFLOAD_TIMEOUT_S,
) -> str:  # fmt: skip
    """Sync twin of offload_namespace_async for sync fixtures and tests (don't call it on a running loop)."""
    remote = n.remote_namespace(ns, consumer_id)
    status, body = consumer.api(
        "POST", api_path(n.OFFLOADING, n.NAMESPACEOFFLOADINGS, ns), namespace_offloading(ns)
    )
    if status not in (201, 409):
        raise RuntimeError(f"creating NamespaceOffloading in {ns}: {status} {body}")
    want = {"remoteNamespace": remote, "phase": "Accepted"}
    maps = (
        (consumer, api_path(n.OFFLOADING, n.NAMESPACEMAPS, n.consumer_tenant_ns(slug), slug)),
        (pool, api_path(n.OFFLOADING, n.NAMESPACEMAPS, n.pool_tenant_ns(consumer_id), slug)),
    )
    deadline = time.monotonic() + timeout
    while True:
        states = []
        for plane, path in maps:
            st, nm = plane.api("GET", path)
            states.append(
                ((nm.get("status") or {}).get("currentMapping") or {}).get(ns) if st == 200 else None
            )
        st, ns_obj = pool.api("GET", api_path("v1", "namespaces", name=remote))
        if all(s == want for s in states) and st == 200 and not ns_obj["metadata"].get("deletionTimestamp"):
            return remote
        if time.monotonic() > deadline:
            raise TimeoutError(f"namespace {ns} not offloaded after {timeout:.0f}s: mappings {states}")
        time.sleep(0.1)
