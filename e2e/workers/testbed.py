"""Real worker nodes for a control plane: per node a containerd and a kubelet, on testbed addresses.

``RealWorkers(plane, ["pool-real-0"]).start()`` registers the nodes and waits until they are Ready;
``stop()`` drains them (the kubelets tear their pod sandboxes and CNI down), ends every process started
(kubelets, containerds, shims and the containers under them, by pid), unmounts everything below the
testbed's directory, deletes the CNI bridges and the testbed interface, and removes the Node objects.
``why_not()`` says why this machine cannot run them (one sentence), or None.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import secrets
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from e2e.binaries import WORKER_NAMES, BinariesNotFound, find_binaries
from e2e.controlplane import ControlPlane
from e2e.procs import start_or_stop
from e2e.workers import host
from e2e.workers.containerd import CGROUP_PARENT, CNI_BIN_DIR, CNI_PLUGINS, CniNetwork, Containerd
from e2e.workers.images import BUSYBOX, is_static_elf, write_images
from e2e.workers.kubelet import Kubelet, KubeletSpec

log = logging.getLogger(__name__)

HOST_TOOLS = ("containerd", "ctr", "runc", "containerd-shim-runc-v2", "ip", "umount")
CNI_RESULTS = Path("/var/lib/cni/results")
INSTALL_HINT = "apt-get install containerd runc containernetworking-plugins busybox-static iproute2"


def why_not() -> str | None:
    """None when this machine can run real workers, else the reason (for one clear pytest skip)."""
    if os.environ.get("VKBRIDGE_REAL_WORKERS") == "0":
        return "real workers disabled by VKBRIDGE_REAL_WORKERS=0"
    if os.geteuid() != 0:
        return "real workers need root (containerd, runc, network and mount setup)"
    missing = [t for t in HOST_TOOLS if shutil.which(t) is None]
    missing += [f"{CNI_BIN_DIR}/{p}" for p in CNI_PLUGINS if not (CNI_BIN_DIR / p).is_file()]
    if not BUSYBOX.is_file():
        missing.append(str(BUSYBOX))
    if missing:
        return f"real workers need {', '.join(missing)} ({INSTALL_HINT}, or bash hack/setup.sh)"
    if not is_static_elf(BUSYBOX):
        return f"{BUSYBOX} is not statically linked: the images need busybox-static"
    if not Path("/sys/fs/cgroup").is_dir():
        return "real workers need /sys/fs/cgroup"
    try:
        find_binaries(WORKER_NAMES, build=False)
    except BinariesNotFound as e:
        return f"no kubelet binary ({e}); bash hack/build-k8s-bins.sh builds it"
    return None


@dataclass
class RealNode:
    name: str
    ip: str
    base: Path
    containerd: Containerd
    kubelet: Kubelet

    @property
    def port(self) -> int:
        return self.kubelet.spec.port


class RealWorkers:
    """Real kubelet workers for one plane (see the module docstring)."""

    def __init__(
        self,
        plane: ControlPlane,
        node_names: Sequence[str],
        *,
        taints: Sequence[Mapping[str, str]] = (),
        labels: Mapping[str, str] | None = None,
        base_dir: Path | None = None,
        extra_images: Sequence[Path] = (),
    ) -> None:
        reason = why_not()
        if reason:
            raise RuntimeError(reason)
        self.plane, self.node_names = plane, list(node_names)
        self.taints, self.labels = list(taints), dict(labels or {})
        # Image archives (docker save / OCI) imported next to busybox and pause, e.g. vkbridge's own
        # image for a real consumer worker that runs vkbridge as a pod.
        self.extra_images = list(extra_images)
        self.kubelet_bin = find_binaries(WORKER_NAMES, build=False)["kubelet"]
        self.tag = secrets.token_hex(2)
        # Short: unix socket paths must stay under 108 bytes.
        self.base = Path(tempfile.mkdtemp(prefix=f"vkbw-{self.tag}-", dir=base_dir))
        self.interface: host.NodeAddresses | None = None
        self.claim = host.AddressClaim(f"vkbw{self.tag}")
        self.nodes: list[RealNode] = []
        self.timings: dict[str, float] = {}
        self._stopped = False
        self._cgroup_parent_existed = bool(host.cgroup_dirs(CGROUP_PARENT))

    def start(self, timeout: float = 120) -> RealWorkers:
        atexit.register(self.stop)  # after a crashed session too; runs before the planes' (LIFO)
        start_or_stop(lambda: self._start(timeout), self.stop)
        return self

    def _start(self, timeout: float) -> None:
        t0 = time.monotonic()
        count = len(self.node_names)
        ips = [str(n.network_address) for n in self.claim.pick(host.NODE_IP_RANGE, 32, count)]
        subnets = [str(n) for n in self.claim.pick(host.POD_NET_RANGE, 24, count)]
        self.interface = host.NodeAddresses(f"vkbw{self.tag}", ips).create()
        images = write_images(self.base / "images") + self.extra_images
        for i, (name, node_ip, subnet) in enumerate(zip(self.node_names, ips, subnets, strict=True)):
            base = self.base / f"n{i}"
            net = CniNetwork(name=f"vkbw-{self.tag}-{i}", bridge=f"vkbw{self.tag}b{i}", subnet=subnet)
            runtime = Containerd(base / "containerd", net)
            spec = KubeletSpec(node_name=name, node_ip=node_ip, taints=self.taints, labels=self.labels)
            kubelet = Kubelet(spec, self.plane, base / "kubelet", self.kubelet_bin, runtime.endpoint)
            self.nodes.append(RealNode(name, node_ip, base, runtime, kubelet))
            t = time.monotonic()
            runtime.start()
            self.timings["containerd_start_s"] = time.monotonic() - t
            t = time.monotonic()
            runtime.import_images(images)
            self.timings["image_import_s"] = time.monotonic() - t
            kubelet.start()
        t = time.monotonic()
        deadline = t0 + timeout
        for node in self.nodes:
            self._wait_ready(node, deadline)
        self.timings["node_ready_s"] = time.monotonic() - t
        self.timings["start_s"] = time.monotonic() - t0
        log.info("real workers %s up in %.1fs (%s)", self.node_names, self.timings["start_s"], self.base)

    def _wait_ready(self, node: RealNode, deadline: float) -> None:
        while True:
            if not node.kubelet.alive():
                raise RuntimeError(f"kubelet {node.name} exited; log tail:\n{node.kubelet.log_tail()}")
            status, body = self.plane.api("GET", f"/api/v1/nodes/{node.name}")
            if status == 200:
                conds = (body.get("status") or {}).get("conditions") or []
                if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"node {node.name} not Ready in time; kubelet log tail:\n{node.kubelet.log_tail()}\n"
                    f"containerd log tail:\n{node.containerd.log_tail()}"
                )
            time.sleep(0.5)

    # ---- teardown --------------------------------------------------------------------------------

    def drain(self, timeout: float = 30) -> list[str]:
        """Delete the pods bound to our nodes and wait until the kubelets have removed them."""
        pending: list[str] = []
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            if not node.kubelet.alive():
                continue
            selector = urllib.parse.quote(f"spec.nodeName={node.name}")
            path = f"/api/v1/pods?fieldSelector={selector}"
            status, body = self.plane.api("GET", path)
            if status != 200:
                continue
            for pod in body.get("items") or []:
                meta = pod["metadata"]
                self.plane.api(
                    "DELETE", f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                    {"gracePeriodSeconds": 1},
                )  # fmt: skip
            while time.monotonic() < deadline:
                status, body = self.plane.api("GET", path)
                pending = [p["metadata"]["name"] for p in body.get("items") or []] if status == 200 else []
                if not pending:
                    break
                time.sleep(0.25)
        return [f"pods not drained: {pending}"] if pending else []

    def stop(self) -> list[str]:
        """End and remove everything the testbed made (see the module docstring); returns problems."""
        if self._stopped:
            return []
        self._stopped = True
        atexit.unregister(self.stop)
        problems: list[str] = []
        with contextlib.suppress(OSError):  # the plane may already be gone
            problems += self.drain()
        for node in self.nodes:
            node.kubelet.stop()
        for node in self.nodes:
            problems += node.containerd.stop()
        problems += self._sweep_host()
        with contextlib.suppress(OSError):
            for node in self.nodes:
                self.plane.api("DELETE", f"/api/v1/nodes/{node.name}")
        if os.environ.get("VKBRIDGE_KEEP_PLANE_DIRS") == "1":
            log.warning("keeping %s", self.base)
        else:
            shutil.rmtree(self.base, ignore_errors=True)
        for p in problems:
            log.warning("real workers teardown: %s", p)
        return problems

    def _sweep_host(self) -> list[str]:
        problems: list[str] = []
        marks = [
            arg
            for node in self.nodes
            for arg in (
                f"--config={node.kubelet.base / 'config.yaml'}",  # the kubelet
                str(node.containerd.base / "config.toml"),  # containerd
                str(node.containerd.socket),  # its shims
            )
        ]
        stray = sorted({pid for arg in marks for pid in host.pids_with_arg(arg)})
        if stray:
            problems.append(f"processes still running after stop (killed): {stray}")
            host.kill_all(host.descendants(stray) + stray)
            host.wait_gone(stray, 5)
        left = host.unmount_under([self.base])
        if left:
            problems.append(f"mounts that would not go: {left}")
        for node in self.nodes:
            bridge = node.containerd.net.bridge
            if host.link_exists(bridge):
                for line in host.ip("-o", "link", "show", "master", bridge, check=False).splitlines():
                    veth = line.split(":")[1].strip().split("@")[0]
                    host.ip("link", "del", veth, check=False)
                host.ip("link", "del", bridge, check=False)
            for cached in CNI_RESULTS.glob(f"{node.containerd.net.name}-*"):
                cached.unlink(missing_ok=True)
        if self.interface is not None:
            self.interface.remove()
        self.claim.release()
        if not self._cgroup_parent_existed:
            host.remove_cgroup(CGROUP_PARENT, children=False)  # only if empty: others may use it now
        return problems
