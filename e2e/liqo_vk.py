"""Liqo v1.2's own virtual kubelet in the testbed: the oracle of the differential suite.

The binary is built from the Go module proxy by hack/build-liqo.sh (never part of the repo) and found
envtest-style: ``TEST_ASSET_LIQO_VIRTUAL_KUBELET``, ``<repo>/.k8s-bin/liqo/<ver>-linux-amd64/``, then
``${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest/liqo/<ver>-linux-amd64/``. ``LiqoVkProcess`` has
VkbridgeProcess's interface (start/stop/kill/alive/log_text/wait_for_log/tail/metrics), so a fixture can run
either implementation (``VKBRIDGE_IMPL=liqo|vkbridge``) on the same testbed.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import time
from pathlib import Path

from e2e.binaries import REPO, envtest_store, project_store
from e2e.controlplane import ControlPlane, PlaneError
from e2e.vkbridge_proc import VkbridgeOptions, VkbridgeProcess

log = logging.getLogger(__name__)

LIQO_VERSION = "v1.2.0"
BUILD_SCRIPT = REPO / "hack" / "build-liqo-vk.sh"
BINARY_ENV = "TEST_ASSET_LIQO_VIRTUAL_KUBELET"
IMPLS = ("vkbridge", "liqo")
# Our flags that Liqo's cmd/virtual-kubelet/root/flag.go (v1.2.0) does not define; pflag rejects them.
NOT_LIQO_FLAGS = ("--node-status-interval", "--health-probe-bind-address")


class LiqoUnavailable(RuntimeError):
    """Liqo's binary is in no store, even after running the build script."""


def impl_from_env() -> str:
    """The implementation the fixtures run: $VKBRIDGE_IMPL (vkbridge by default); a typo is an error."""
    impl = os.environ.get("VKBRIDGE_IMPL", "vkbridge") or "vkbridge"
    if impl not in IMPLS:
        raise ValueError(f"VKBRIDGE_IMPL={impl!r}: expected one of {', '.join(IMPLS)}")
    return impl


def _candidates() -> list[Path]:
    sub = Path("liqo") / f"{LIQO_VERSION}-linux-amd64" / "virtual-kubelet"
    return [project_store().parent / sub, envtest_store().parent / sub]


def _lookup() -> Path | None:
    env = os.environ.get(BINARY_ENV)
    if env:
        p = Path(env)
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise LiqoUnavailable(f"{BINARY_ENV}={p} is not an executable file")
        return p
    return next((p for p in _candidates() if p.is_file() and os.access(p, os.X_OK)), None)


def find_liqo_vk(*, build: bool = True) -> Path:
    """Liqo's virtual-kubelet binary, built once per machine (about 3 min cold) when missing."""
    found = _lookup()
    if found is None and build and BUILD_SCRIPT.is_file():
        lock_path = project_store().parent / ".build-liqo.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_path.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            log.warning("Liqo's virtual-kubelet missing: running %s", BUILD_SCRIPT)
            subprocess.run(["bash", str(BUILD_SCRIPT)], check=False)  # prints progress; skips when built
        found = _lookup()
    if found is None:
        raise LiqoUnavailable(
            f"Liqo {LIQO_VERSION} virtual-kubelet not found in {[str(c) for c in _candidates()]}: "
            f"build it with {BUILD_SCRIPT} or set {BINARY_ENV}"
        )
    return found


def liqo_argv(opts: VkbridgeOptions) -> list[str]:
    """Our deployed flags minus the ones Liqo does not know (Liqo's controller-manager passes the rest)."""
    return [a for a in opts.argv() if not a.startswith(NOT_LIQO_FLAGS)]


def ensure_foreign_cluster(consumer: ControlPlane, slug: str, tenant_ns: str) -> None:
    """The pool's ForeignCluster on the consumer, as Liqo's peering leaves it: role Provider, networking
    module disabled (so the VK needs no network Configuration). vkbridge never reads it."""
    path = "/apis/core.liqo.io/v1beta1/foreignclusters"
    body = {
        "apiVersion": "core.liqo.io/v1beta1",
        "kind": "ForeignCluster",
        "metadata": {"name": slug, "labels": {"liqo.io/remote-cluster-id": slug}},
        "spec": {"clusterID": slug},
    }
    status, got = consumer.api("POST", path, body)
    if status == 409:
        status, got = consumer.api("GET", f"{path}/{slug}")
    if status not in (200, 201):
        raise PlaneError(f"creating ForeignCluster {slug}: {status} {got}")
    got["status"] = {
        "role": "Provider",
        "tenantNamespace": {"local": tenant_ns},
        "modules": {
            "networking": {"enabled": False, "conditions": []},
            "authentication": {"enabled": True, "conditions": []},
            "offloading": {"enabled": True, "conditions": []},
        },
    }
    status, got = consumer.api("PUT", f"{path}/{slug}/status", got)
    if status != 200:
        raise PlaneError(f"ForeignCluster {slug} status: {status} {json.dumps(got)[:300]}")


class LiqoVkProcess(VkbridgeProcess):
    """Liqo's virtual kubelet with vkbridge's options, environment as in Liqo's Deployment."""

    def __init__(self, opts: VkbridgeOptions, log_path: Path, binary: Path | None = None) -> None:
        super().__init__(opts, log_path)
        self.binary = binary or find_liqo_vk()

    def start(self) -> LiqoVkProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        node = self.opts.nodename or self.opts.slug
        env = {
            **os.environ,
            "POD_NAME": f"vk-{node}-0",
            "POD_NAMESPACE": self.opts.tenant_ns,
            "VIRTUALNODE_NAME": self.opts.slug,  # the VirtualNode it reads at start-up
        }
        env.update(self.opts.env)
        with open(self.log_path, "ab") as out:
            out.write(f"---- start liqo {time.strftime('%H:%M:%S')} ----\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [str(self.binary), *liqo_argv(self.opts)],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True,
            )  # fmt: skip
        return self

    def check_running(self) -> None:
        """Raise with the log tail when Liqo has exited: it exits 0 after a start-up error."""
        if not self.alive():
            code = self.proc.returncode if self.proc else None
            raise RuntimeError(
                f"Liqo's virtual kubelet exited (code {code}; it exits 0 after a start-up error):\n"
                + self.tail()
            )
