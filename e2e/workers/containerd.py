"""A testbed-owned containerd (own root, state, socket, CNI config) with the CRI plugin, one per node.

One per node because a kubelet treats every pod sandbox in its runtime as its own and kills those it
does not know: two kubelets on one containerd would kill each other's pods. Settings that make runc work
in this container (see docs/testbed-notes): ``restrict_oom_score_adj``, ``disable_apparmor``, the native
snapshotter. Network namespaces are mounted under the state dir, so teardown finds and unmounts them.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from e2e.procs import end_process, log_tail
from e2e.workers import host
from e2e.workers.images import PAUSE_IMAGE

log = logging.getLogger(__name__)

CNI_BIN_DIR = Path("/usr/lib/cni")
CNI_PLUGINS = ("bridge", "host-local", "loopback", "portmap")
# Where runc puts CRI containers' cgroups with cgroupsPerQOS off (cgroupfs driver, no pod parent).
CGROUP_PARENT = "k8s.io"


@dataclass
class CniNetwork:
    name: str
    bridge: str
    subnet: str


def config_toml(base: Path, net: CniNetwork) -> str:
    """containerd 1.6 config (version 2) confined to base."""
    q = json.dumps  # TOML basic strings are JSON strings for what we put in them
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return f"""version = 2
root = {q(str(base / "root"))}
state = {q(str(base / "state"))}
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.internal.v1.tracing", "io.containerd.tracing.processor.v1.otlp"]

[grpc]
  address = {q(str(socket_path(base)))}
[ttrpc]
  address = {q(str(base / "containerd.sock.ttrpc"))}
[debug]
  level = "info"
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = {q(str(base / "opt"))}
[{cri}]
  sandbox_image = {q(PAUSE_IMAGE)}
  restrict_oom_score_adj = true
  disable_apparmor = true
  enable_selinux = false
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  [{cri}.containerd]
    snapshotter = "native"
    default_runtime_name = "runc"
    [{cri}.containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [{cri}.containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = {q(str(base / "runc"))}
  [{cri}.cni]
    bin_dir = {q(str(CNI_BIN_DIR))}
    conf_dir = {q(str(base / "net.d"))}
    max_conf_num = 1
"""


def cni_conflist(base: Path, net: CniNetwork) -> dict[str, object]:
    """bridge + host-local (state in our dir) + portmap; no masquerade, so no iptables rules are made."""
    return {
        "cniVersion": "1.0.0",
        "name": net.name,
        "plugins": [
            {
                "type": "bridge",
                "bridge": net.bridge,
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": net.subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(base / "cni-ipam"),
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def socket_path(base: Path) -> Path:
    return base / "containerd.sock"


class Containerd:
    """containerd for one node under base; ``start()``, ``import_images()``, ``stop()``."""

    def __init__(self, base: Path, net: CniNetwork, binary: str = "containerd", ctr: str = "ctr") -> None:
        self.base, self.net, self.binary, self.ctr = base, net, binary, ctr
        self.socket = socket_path(base)
        self.log_path = base / "containerd.log"
        self.popen: subprocess.Popen[bytes] | None = None

    @property
    def endpoint(self) -> str:
        return f"unix://{self.socket}"

    def start(self, timeout: float = 30) -> Containerd:
        self.base.mkdir(parents=True, exist_ok=True)
        (self.base / "net.d").mkdir(exist_ok=True)
        conflist = cni_conflist(self.base, self.net)
        (self.base / "net.d" / "10-testbed.conflist").write_text(json.dumps(conflist))
        config = self.base / "config.toml"
        config.write_text(config_toml(self.base, self.net))
        with self.log_path.open("ab") as logf:
            self.popen = subprocess.Popen(
                [self.binary, "--config", str(config)],
                stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while self.run_ctr("version", check=False).returncode != 0:
            if self.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not start; log tail:\n{self.log_tail()}")
            time.sleep(0.1)
        return self

    def run_ctr(
        self, *args: str, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        argv = [self.ctr, "--address", str(self.socket), "--namespace", "k8s.io", *args]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: {res.stderr.strip()}")
        return res

    def import_images(self, archives: list[Path]) -> None:
        for archive in archives:
            self.run_ctr("images", "import", "--snapshotter", "native", str(archive))

    def shim_pids(self) -> list[int]:
        """The runc shims serving this containerd (they name its socket in -address)."""
        return host.pids_with_arg(str(self.socket))

    def stop(self, grace: float = 10) -> list[str]:
        """End containers (shims' descendants), shims and containerd; returns problems found."""
        problems: list[str] = []
        ids = self.container_ids()
        shims = self.shim_pids()
        in_cgroups = [p for i in ids for p in host.cgroup_pids(f"{CGROUP_PARENT}/{i}")]
        workload = host.descendants(shims) + in_cgroups
        host.kill_all(workload)
        host.kill_all(shims, signal.SIGKILL)
        left = host.wait_gone(workload + shims, grace)
        if left:
            problems.append(f"container processes still alive: {left}")
        if self.popen is not None:
            end_process(self.popen, grace)
        # Shims started after the sweep above (a last sandbox) would be orphans: sweep again.
        late = self.shim_pids()
        if late:
            late_all = host.descendants(late) + late
            host.kill_all(late_all)
            host.wait_gone(late_all, grace)
        # runc removes a container's cgroups when it is deleted; after SIGKILLs they stay behind.
        for i in ids:
            stayed = host.remove_cgroup(f"{CGROUP_PARENT}/{i}")
            if stayed:
                problems.append(f"cgroups that would not go: {stayed}")
        return problems

    def container_ids(self) -> list[str]:
        if self.popen is None or self.popen.poll() is not None:
            return []
        res = self.run_ctr("containers", "list", "--quiet", check=False, timeout=10)
        return res.stdout.split() if res.returncode == 0 else []

    def log_tail(self, n: int = 30) -> str:
        return log_tail(self.log_path, n, "(no containerd log)")
