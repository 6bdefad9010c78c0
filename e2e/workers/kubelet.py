"""One real kubelet (v1.36 from the build) registered with a control plane, on its own containerd.

Settings that make it run in this container (cgroup v1, no systemd): ``failCgroupV1: false``,
``cgroupDriver: cgroupfs``, ``cgroupsPerQOS: false``, ``enforceNodeAllocatable: []``, ``failSwapOn: false``.
Authentication and authorization as on a real node: client certificates from the plane's CA (which is
also the CA the API server verifies kubelet serving certificates against) and webhook authorization.
Image garbage collection and eviction are off: the locally made images cannot be pulled again.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.controlplane import ControlPlane, free_port
from e2e.pki import write_pem
from e2e.procs import end_process, log_tail

log = logging.getLogger(__name__)


@dataclass
class KubeletSpec:
    node_name: str
    node_ip: str
    port: int = field(default_factory=free_port)
    healthz_port: int = field(default_factory=free_port)
    taints: Sequence[Mapping[str, str]] = ()
    labels: Mapping[str, str] = field(default_factory=dict)


def kubelet_config(spec: KubeletSpec, base: Path, runtime_endpoint: str) -> dict[str, Any]:
    pki = base / "pki"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": spec.node_ip,
        "port": spec.port,
        "readOnlyPort": 0,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": spec.healthz_port,
        "containerRuntimeEndpoint": runtime_endpoint,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": False,
        "enforceNodeAllocatable": [],
        "failSwapOn": False,
        "failCgroupV1": False,
        "tlsCertFile": str(pki / "kubelet.crt"),
        "tlsPrivateKeyFile": str(pki / "kubelet.key"),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(pki / "ca.crt")},
        },
        "authorization": {"mode": "Webhook"},
        "podLogsDir": str(base / "pod-logs"),
        "volumePluginDir": str(base / "volume-plugins"),
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {},
        "registerWithTaints": [dict(t) for t in spec.taints],
        "registerNode": True,
        "serializeImagePulls": False,
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "shutdownGracePeriod": "0s",
    }


class Kubelet:
    """A kubelet process under base; ``start()`` it, ``stop()`` it."""

    def __init__(
        self, spec: KubeletSpec, plane: ControlPlane, base: Path, binary: Path, runtime: str
    ) -> None:
        self.spec, self.plane, self.base, self.binary, self.runtime = spec, plane, base, binary, runtime
        self.log_path = base / "kubelet.log"
        self.popen: subprocess.Popen[bytes] | None = None

    def _write_files(self) -> Path:
        pki = self.base / "pki"
        name = f"system:node:{self.spec.node_name}"
        write_pem(pki / "ca.crt", self.plane.ca_pem, 0o644)
        serving = self.plane.ca.issue(
            name, ["system:nodes"], server=True, ips=[self.spec.node_ip], dns=[self.spec.node_name]
        )
        client = self.plane.ca.issue(name, ["system:nodes"], client=True)
        assert serving.key_pem is not None and client.key_pem is not None
        write_pem(pki / "kubelet.crt", serving.cert_pem, 0o644)
        write_pem(pki / "kubelet.key", serving.key_pem)
        write_pem(pki / "client.crt", client.cert_pem, 0o644)
        write_pem(pki / "client.key", client.key_pem)
        kubeconfig = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "plane", "cluster": {"server": self.plane.url,
                                                       "certificate-authority": str(pki / "ca.crt")}}],
            "users": [{"name": "node", "user": {"client-certificate": str(pki / "client.crt"),
                                                "client-key": str(pki / "client.key")}}],
            "contexts": [{"name": "node", "context": {"cluster": "plane", "user": "node"}}],
            "current-context": "node",
        }  # fmt: skip
        (self.base / "kubeconfig").write_text(yaml.safe_dump(kubeconfig))
        config = self.base / "config.yaml"
        config.write_text(yaml.safe_dump(kubelet_config(self.spec, self.base, self.runtime)))
        return config

    def argv(self, config: Path) -> list[str]:
        labels = ",".join(f"{k}={v}" for k, v in self.spec.labels.items())
        return [
            str(self.binary),
            f"--config={config}",
            f"--kubeconfig={self.base / 'kubeconfig'}",
            f"--root-dir={self.base / 'root'}",
            f"--cert-dir={self.base / 'pki'}",
            f"--hostname-override={self.spec.node_name}",
            f"--node-ip={self.spec.node_ip}",
            *([f"--node-labels={labels}"] if labels else []),
            "--v=2",
        ]

    def start(self) -> Kubelet:
        self.base.mkdir(parents=True, exist_ok=True)
        argv = self.argv(self._write_files())
        with self.log_path.open("ab") as logf:
            self.popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT, start_new_session=True
            )
        return self

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 10) -> None:
        if self.popen is not None:
            end_process(self.popen, grace, name=f"kubelet {self.spec.node_name}")

    def log_tail(self, n: int = 40) -> str:
        return log_tail(self.log_path, n, "(no kubelet log)")
