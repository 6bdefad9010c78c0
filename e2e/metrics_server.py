"""metrics-server for one plane: a process behind the aggregation layer (``kubectl top``, HPAs).

The aggregator reaches an extension API server only through a Service. The testbed has no kube-proxy, so
the plane routes to the Service's endpoints (``--enable-aggregator-routing=true``, e2e/controlplane.py),
and an endpoint may not be a loopback address: metrics-server listens on a testbed-owned 198.18.x address
on its own veth (e2e/workers/host.py), which a selector-less Service's Endpoints names (the plane's
EndpointSlice mirroring controller makes the slice). Its serving certificate is from the plane CA for
``metrics-server.kube-system.svc`` (the name the aggregator verifies) and the APIService's caBundle is that
CA. It scrapes kubelets at their InternalIP and verifies them with the plane CA (real workers' serving
certificates and vkbridge's CSR-issued one are from it): no ``--kubelet-insecure-tls``.
"""

from __future__ import annotations

import base64
import contextlib
import logging
import uuid
from typing import Any

from e2e.binaries import find_binaries
from e2e.controlplane import ControlPlane, free_port, kubeconfig_flags, serving_flags
from e2e.pki import write_pem
from e2e.procs import LoggedProcess, log_tail, start_or_stop
from e2e.waiting import wait_until
from e2e.workers.host import NODE_IP_RANGE, AddressClaim, NodeAddresses

log = logging.getLogger(__name__)

NAME, NAMESPACE, GROUP_VERSION = "metrics-server", "kube-system", "v1beta1.metrics.k8s.io"
SERVICE_DNS = f"{NAME}.{NAMESPACE}.svc"


class MetricsServer:
    """``start()`` it on a started plane, ``stop()`` it: the process, its address and its API objects go."""

    def __init__(self, plane: ControlPlane, resolution_s: int = 10) -> None:
        self.plane, self.resolution_s = plane, resolution_s
        self.bin = find_binaries(("metrics-server",), build=False)["metrics-server"]
        self.dir = plane.base_dir / "metrics-server"
        self.port = free_port()
        self.addr: NodeAddresses | None = None
        self.claim: AddressClaim | None = None
        self.ip = ""
        self.proc: LoggedProcess | None = None
        self._created: list[str] = []

    def start(self, timeout: float = 90) -> MetricsServer:
        start_or_stop(lambda: self._start(timeout), self.stop)
        return self

    def _start(self, timeout: float) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        name = f"vkbms{uuid.uuid4().hex[:6]}"
        self.claim = AddressClaim(name)
        self.ip = str(self.claim.pick(NODE_IP_RANGE, 32, 1)[0].network_address)
        self.addr = NodeAddresses(name, [self.ip]).create()
        serving = self.plane.ca.issue(NAME, server=True, ips=[self.ip], dns=[SERVICE_DNS])
        assert serving.key_pem is not None
        crt = write_pem(self.dir / "serving.crt", serving.cert_pem, 0o644)
        key = write_pem(self.dir / "serving.key", serving.key_pem)
        ca = write_pem(self.dir / "ca.crt", self.plane.ca_pem, 0o644)
        cert_pem, key_pem = self.plane.issue_client_cert(NAME, ["system:masters"])
        assert key_pem is not None
        kubeconfig = self.plane.write_kubeconfig(self.dir / "kubeconfig", cert_pem, key_pem)
        argv = [
            str(self.bin),
            *kubeconfig_flags(kubeconfig),
            *serving_flags(self.ip, self.port, crt, key),
            f"--kubelet-certificate-authority={ca}",
            "--kubelet-preferred-address-types=InternalIP",
            "--kubelet-use-node-status-port",
            f"--metric-resolution={self.resolution_s}s",
            "--kubelet-request-timeout=5s",  # must be below the resolution
        ]
        self.proc = LoggedProcess(NAME, argv, self.dir / "metrics-server.log")
        self.proc.start()
        self._register()
        wait_until(self._available, timeout, f"{self.plane.name}: APIService {GROUP_VERSION} Available", 1.0)
        log.info("%s: metrics-server at %s:%d", self.plane.name, self.ip, self.port)

    def _post(self, path: str, body: dict[str, Any], item: str) -> None:
        status, got = self.plane.api("POST", path, body)
        if status not in (200, 201):
            raise RuntimeError(f"{self.plane.name}: creating {item}: {status} {got}")
        self._created.append(f"{path}/{body['metadata']['name']}")

    def _register(self) -> None:
        meta = {"name": NAME, "namespace": NAMESPACE, "labels": {"app.kubernetes.io/name": NAME}}
        svc_port = {"name": "https", "port": 443, "protocol": "TCP", "targetPort": self.port}
        ns_path = f"/api/v1/namespaces/{NAMESPACE}"
        self._post(f"{ns_path}/services", {"metadata": meta, "spec": {"ports": [svc_port]}}, "the Service")
        ep_port = {"name": "https", "port": self.port, "protocol": "TCP"}
        subset = {"addresses": [{"ip": self.ip}], "ports": [ep_port]}
        self._post(f"{ns_path}/endpoints", {"metadata": meta, "subsets": [subset]}, "the Endpoints")
        spec = {
            "group": "metrics.k8s.io",
            "version": "v1beta1",
            "service": {"namespace": NAMESPACE, "name": NAME, "port": 443},
            "caBundle": base64.b64encode(self.plane.ca_pem).decode(),
            "groupPriorityMinimum": 100,
            "versionPriority": 100,
        }
        self._post("/apis/apiregistration.k8s.io/v1/apiservices", {"metadata": {"name": GROUP_VERSION},
                   "spec": spec}, "the APIService")  # fmt: skip

    def _available(self) -> bool:
        if self.proc is not None and self.proc.popen is not None and not self.proc.alive():
            raise RuntimeError(f"metrics-server exited with {self.proc.popen.returncode}:\n{self.log_tail()}")
        status, got = self.plane.api("GET", f"/apis/apiregistration.k8s.io/v1/apiservices/{GROUP_VERSION}")
        conds = (got.get("status") or {}).get("conditions") or [] if status == 200 else []
        return any(c.get("type") == "Available" and c.get("status") == "True" for c in conds)

    def log_tail(self, n: int = 30) -> str:
        return log_tail(self.dir / "metrics-server.log", n)

    def stop(self) -> None:
        """End the process (TERM, then KILL), delete what was created (newest first), remove the address."""
        if self.proc is not None:
            self.proc.end(10)
        self.proc = None
        for path in reversed(self._created):
            with contextlib.suppress(OSError):
                self.plane.api("DELETE", path)
        self._created = []
        if self.addr is not None:
            self.addr.remove()
            self.addr = None
        if self.claim is not None:
            self.claim.release()
            self.claim = None

    def __enter__(self) -> MetricsServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def top_pods(plane: ControlPlane, ns: str) -> dict[str, int]:
    """``kubectl top pod`` on plane in ns: pod name -> CPU millicores (empty when it has nothing yet)."""
    res = plane.kubectl("top", "pod", "-n", ns, "--no-headers", check=False, timeout=30)
    found: dict[str, int] = {}
    for line in res.stdout.splitlines() if res.returncode == 0 else []:
        parts = line.split()
        if len(parts) >= 2 and parts[1].endswith("m") and parts[1][:-1].isdigit():
            found[parts[0]] = int(parts[1][:-1])
        elif len(parts) >= 2 and parts[1].isdigit():
            found[parts[0]] = int(parts[1]) * 1000
    return found
