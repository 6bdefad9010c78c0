"""pytest plugin: vkbridge running as deployed against the session's planes, pool emulator and bundle."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle
from e2e.fixtures_pool import offload_namespace
from e2e.identity import service_account_kubeconfig
from e2e.liqo_vk import LiqoVkProcess, ensure_foreign_cluster, impl_from_env
from e2e.vkbridge_proc import VkbridgeOptions, VkbridgeProcess
from e2e.waiting import wait_until as wait_until  # re-exported: tests import it from here


def node_ready(consumer: ControlPlane, name: str) -> str | None:
    status, node = consumer.api("GET", f"/api/v1/nodes/{name}")
    if status != 200:
        return None
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return None


@pytest.fixture(scope="session")
def vk_home_kubeconfig(
    consumer: ControlPlane, bundle: Bundle, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    return service_account_kubeconfig(consumer, bundle, tmp_path_factory.mktemp("vk-identity"))


def vkbridge_options(consumer: ControlPlane, bundle: Bundle, home_kubeconfig: Path | None = None,
                     **kw: Any) -> VkbridgeOptions:  # fmt: skip
    """Options for a vkbridge on the session's planes: the deployed identity when given, else admin."""
    kw.setdefault("certificate_type", "kubelet" if home_kubeconfig else "self-signed")
    return VkbridgeOptions(
        home_kubeconfig=home_kubeconfig or consumer.admin_kubeconfig,
        slug=bundle.slug,
        consumer_id=bundle.consumer_id,
        secret_name=bundle.secret_name,
        tenant_ns=bundle.tenant_ns,
        **kw,
    )


@pytest.fixture(scope="session")
def vkbridge(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, emulator: EmulatorHandle,
    vk_home_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[VkbridgeProcess]:  # fmt: skip
    """The session's vkbridge, as deployed (its ServiceAccount and RBAC, a CSR-issued serving
    certificate); Ready before any test uses it; stopped (SIGTERM) at the end.
    VKBRIDGE_IMPL=liqo runs Liqo's own virtual kubelet there instead (see start_impl)."""
    log_path = tmp_path_factory.mktemp("vkbridge") / "vkbridge.log"
    proc = start_impl(impl_from_env(), consumer, bundle, vk_home_kubeconfig, log_path)
    yield proc
    code = proc.stop()
    print(f"\nvkbridge log: {log_path} (exit {code})")


def start_impl(
    impl: str, consumer: ControlPlane, bundle: Bundle, home_kubeconfig: Path | None, log_path: Path
) -> VkbridgeProcess:
    """Start `impl` ("vkbridge" or "liqo") on the bundle's node and wait until the node is Ready.

    Liqo's VK runs with the admin kubeconfig and a self-signed serving certificate (our least RBAC and
    CSR flow are vkbridge's); it also needs the pool's ForeignCluster on the consumer."""
    if impl == "liqo":
        ensure_foreign_cluster(consumer, bundle.slug, bundle.tenant_ns)
        proc: VkbridgeProcess = LiqoVkProcess(vkbridge_options(consumer, bundle), log_path).start()
    else:
        proc = VkbridgeProcess(vkbridge_options(consumer, bundle, home_kubeconfig), log_path).start()

    def ready() -> bool:
        if isinstance(proc, LiqoVkProcess):
            proc.check_running()
        return node_ready(consumer, bundle.slug) == "True" and proc.alive()

    try:
        wait_until(ready, 90, f"the virtual node to be Ready ({impl})", interval=0.2)
    except (TimeoutError, RuntimeError):
        print(proc.tail(80))
        proc.stop()
        raise
    return proc


@pytest.fixture
def offloaded_ns(
    consumer: ControlPlane, pool: ControlPlane, vkbridge: VkbridgeProcess, fresh_ns: Any
) -> tuple[str, str]:
    """A fresh consumer namespace, offloaded; returns (local, remote)."""
    local = fresh_ns(consumer)
    remote = offload_namespace(consumer, pool, local)
    return local, remote


def log_dir(request: pytest.FixtureRequest) -> Path:
    return Path(str(request.config.rootpath)) / ".pytest-logs"
