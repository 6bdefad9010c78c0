"""One local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler).

Processes run on 127.0.0.1 with free ports, envtest-style, each plane in its own temporary directory
(``pki/``, ``etcd/``, ``logs/<component>.log``, kubeconfigs). One CA per plane does every job: it signs
the apiserver's serving certificate, it is the ``--client-ca-file`` (so certificates issued by
``issue_client_cert`` authenticate), the KCM's cluster signing CA (so CSR-signed client certificates
authenticate and CSR-signed kubelet-serving certificates verify) and the ``--kubelet-certificate-authority``
(so fake kubelets and vkbridge must serve a certificate from it with IP SAN 127.0.0.1). One CA keeps the
test trust simple; real clusters separate these roles, which nothing under test depends on.

Identities: admin (O system:masters) for tests, kube-apiserver-kubelet-client (O system:masters) toward
kubelets, system:kube-scheduler, and system:kube-controller-manager, which is also in system:masters because
with ``--use-service-account-credentials=false`` its own RBAC role cannot, e.g., sign CSRs.
"""

from __future__ import annotations

import atexit
import base64
import datetime as dt
import ipaddress
import json
import logging
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from cryptography.hazmat.primitives.asymmetric.types import CertificateIssuerPublicKeyTypes

from e2e.binaries import find_binaries
from e2e.liqo_chart import liqo_crds_dir
from e2e.pki import CertAuthority, Issued, rsa_key_pair, write_pem
from e2e.procs import LoggedProcess
from e2e.waiting import wait_until

log = logging.getLogger(__name__)

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
STOP_GRACE_S = 10.0
FRONT_PROXY_CN = "front-proxy-client"
_ports_lock = threading.Lock()
_ports_handed_out: set[int] = set()


class PlaneError(RuntimeError):
    """A control plane failed to start or to answer; the message carries the component's log tail."""


class KubectlError(subprocess.CalledProcessError):
    def __str__(self) -> str:
        return f"{super().__str__()}\nstderr: {(self.stderr or '').strip()[-2000:]}"


def free_port() -> int:
    """A free loopback port never handed out before by this process (two planes start concurrently)."""
    with _ports_lock:
        for _ in range(100):
            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port: int = s.getsockname()[1]
            if port not in _ports_handed_out:
                _ports_handed_out.add(port)
                return port
    raise PlaneError("no free loopback port")


# The harness's one poll (e2e/waiting.py), by the name the plane fixtures and tests import from here.
wait_for = wait_until


class ControlPlane:
    """A control plane in a temp dir; ``start()`` it, ``stop()`` it (also at interpreter exit)."""

    ip = "127.0.0.1"

    def __init__(
        self,
        name: str,
        *,
        base_dir: Path | None = None,
        service_cidr: str = "10.0.0.0/24",
        grace: str = "20s",
        bins: Mapping[str, Path] | None = None,
        extra_args: Mapping[str, Sequence[str]] | None = None,
    ) -> None:
        self.name = name
        self.bin: dict[str, Path] = dict(bins) if bins is not None else find_binaries()
        if base_dir is not None:
            base_dir.mkdir(parents=True, exist_ok=True)
        self.base_dir = Path(tempfile.mkdtemp(prefix=f"vkb-{name}-", dir=base_dir))
        self.service_cidr = service_cidr
        self.grace = grace
        self.extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        self.port = free_port()
        self.url = f"https://{self.ip}:{self.port}"
        self.etcd_port, self._etcd_peer_port = free_port(), free_port()
        self.etcd_url = f"http://{self.ip}:{self.etcd_port}"
        self.kcm_port, self.scheduler_port = free_port(), free_port()
        self.ca = CertAuthority.create(f"vkbridge-test-{name}-ca")
        self.ca_pem = self.ca.cert_pem
        self._pki = self.base_dir / "pki"
        self._logs = self.base_dir / "logs"
        self._logs.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._stopped = False
        self._procs: dict[str, LoggedProcess] = {}
        self._write_pki()
        self.admin_kubeconfig = self._client_kubeconfig("admin", ["system:masters"])
        self._ssl_admin = ssl.create_default_context(cadata=self.ca_pem.decode())
        self._ssl_admin.load_cert_chain(self._pki / "admin.crt", self._pki / "admin.key")
        self._ssl_anon = ssl.create_default_context(cadata=self.ca_pem.decode())
        atexit.register(self.stop)

    def __repr__(self) -> str:
        return f"ControlPlane({self.name!r}, url={self.url!r}, dir={str(self.base_dir)!r})"

    # ---- files -------------------------------------------------------------------------------------

    def _write_pki(self) -> None:
        pki, ca = self._pki, self.ca
        ca.write(pki, "ca")
        first_service_ip = str(next(ipaddress.ip_network(self.service_cidr).hosts()))
        serving_dns = ["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"]
        serving_dns.append("kubernetes.default.svc.cluster.local")
        self._serving_ips, self._serving_dns = [self.ip, first_service_ip], serving_dns
        self._write_pair(
            "apiserver",
            ca.issue("kube-apiserver", server=True, ips=self._serving_ips, dns=serving_dns),
        )
        self._write_pair(
            "apiserver-kubelet-client",
            ca.issue("kube-apiserver-kubelet-client", ["system:masters"], client=True),
        )
        # The aggregation layer's client toward extension API servers (e2e/metrics_server.py).
        self._write_pair("front-proxy-client", ca.issue(FRONT_PROXY_CN, client=True))
        for comp in ("kube-controller-manager", "kube-scheduler"):
            self._write_pair(f"{comp}-serving", ca.issue(comp, server=True, ips=[self.ip], dns=["localhost"]))
        sa_key, sa_pub = rsa_key_pair()
        write_pem(pki / "sa.key", sa_key)
        write_pem(pki / "sa.pub", sa_pub, 0o644)

    def _write_pair(self, stem: str, issued: Issued) -> tuple[Path, Path]:
        assert issued.key_pem is not None
        return write_pem(self._pki / f"{stem}.crt", issued.cert_pem, 0o644), write_pem(
            self._pki / f"{stem}.key", issued.key_pem
        )

    def _client_kubeconfig(self, cn: str, orgs: Sequence[str], stem: str | None = None) -> Path:
        stem = stem or cn
        cert, key = self._write_pair(stem, self.ca.issue(cn, orgs, client=True))
        return self.write_kubeconfig(
            self.base_dir / f"{stem}.kubeconfig", cert.read_bytes(), key.read_bytes(), name=self.name
        )

    # ---- public helpers ----------------------------------------------------------------------------

    def issue_client_cert(
        self,
        cn: str,
        orgs: Sequence[str] = (),
        lifetime: dt.timedelta = dt.timedelta(days=365),
        public_key: CertificateIssuerPublicKeyTypes | None = None,
    ) -> tuple[bytes, bytes | None]:
        """A client certificate the apiserver accepts as user cn in groups orgs (key None if public_key)."""
        issued = self.ca.issue(cn, orgs, client=True, lifetime=lifetime, public_key=public_key)
        return issued.cert_pem, issued.key_pem

    def kubeconfig_dict(
        self, cert_pem: bytes, key_pem: bytes, server: str | None = None, name: str | None = None
    ) -> dict[str, Any]:
        """A client-certificate kubeconfig; server defaults to this plane (e.g. pass a tunnel's URL)."""
        name = name or self.name

        def b64(data: bytes) -> str:
            return base64.b64encode(data).decode()

        return {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": name,
            "clusters": [
                {
                    "name": name,
                    "cluster": {"server": server or self.url, "certificate-authority-data": b64(self.ca_pem)},
                }
            ],
            "users": [
                {
                    "name": name,
                    "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
                }
            ],
            "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        }

    def write_kubeconfig(
        self, path: Path, cert_pem: bytes, key_pem: bytes, server: str | None = None, name: str | None = None
    ) -> Path:
        data = yaml.safe_dump(self.kubeconfig_dict(cert_pem, key_pem, server=server, name=name))
        return write_pem(Path(path), data.encode())

    def kubectl(
        self, *args: str, input: str | bytes | None = None, check: bool = True, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl as admin (system:masters); stderr is included in the error when check fails."""
        argv = [str(self.bin["kubectl"]), f"--kubeconfig={self.admin_kubeconfig}", *args]
        text_in = input.decode() if isinstance(input, bytes) else input
        res = subprocess.run(
            argv, input=text_in, capture_output=True, text=True, timeout=timeout, check=False
        )
        if check and res.returncode != 0:
            raise KubectlError(res.returncode, argv, res.stdout, res.stderr)
        return res

    def api(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        content_type: str = "application/json",
        admin: bool = True,
        timeout: float = 30,
    ) -> tuple[int, Any]:
        """A raw API request (admin cert, or anonymous); returns (status, decoded JSON or text)."""
        data = None if body is None else (body if isinstance(body, bytes) else json.dumps(body).encode())
        req = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", content_type)
        ctx = self._ssl_admin if admin else self._ssl_anon
        try:
            with urllib.request.urlopen(req, context=ctx, timeout=timeout) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as e:
            status, raw = e.code, e.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode(errors="replace")

    def log_tail(self, component: str, n: int = 40) -> str:
        path = self._logs / f"{component}.log"
        if not path.exists():
            return f"(no log for {component})"
        with path.open("rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 256 * 1024))
            lines = f.read().decode(errors="replace").splitlines()
        return "\n".join(lines[-n:])

    def pids(self) -> dict[str, int]:
        return {n: p.popen.pid for n, p in self._procs.items() if p.popen is not None and p.alive()}

    def rss_bytes(self) -> dict[str, int]:
        """Resident memory per running component, from /proc (for measurements)."""
        out = {}
        for n, pid in self.pids().items():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            for line in status.splitlines():
                if line.startswith("VmRSS:"):
                    out[n] = int(line.split()[1]) * 1024
        return out

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self, timeout: float = 120, crds: bool = False) -> ControlPlane:
        """Start every component and wait until each answers its health endpoint.

        With ``crds`` the Liqo CRDs are installed before kube-controller-manager starts, so its garbage
        collector watches them from the start (it picks up CRDs added later only at its next 30 s
        discovery sync, which would delay owner-reference deletion of ShadowPod-owned pods in tests).
        """
        with self._lock:
            if self._stopped:
                raise PlaneError(f"{self.name}: a stopped plane cannot be restarted")
            deadline = time.monotonic() + timeout
            t0 = time.monotonic()
            try:
                self._start_component("etcd")
                self._await("etcd", deadline, self._etcd_healthy)
                self._start_component("kube-apiserver")
                self._await("kube-apiserver", deadline, self._apiserver_ready)
                if crds:
                    self.install_crds(timeout=max(10.0, deadline - time.monotonic()))
                self._start_component("kube-controller-manager")
                self._start_component("kube-scheduler")
                self._await("kube-controller-manager", deadline, lambda: self._healthz(self.kcm_port))
                self._await("kube-scheduler", deadline, lambda: self._healthz(self.scheduler_port))
            except BaseException:
                self._terminate_all()
                raise
            log.info(
                "plane %s up in %.1fs at %s (%s)", self.name, time.monotonic() - t0, self.url, self.base_dir
            )
            return self

    def stop(self) -> None:
        """Terminate every process (SIGTERM, SIGKILL after 10 s) and delete the plane dir; idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            atexit.unregister(self.stop)
            self._terminate_all()
            if os.environ.get("VKBRIDGE_KEEP_PLANE_DIRS") == "1":
                log.warning("keeping %s", self.base_dir)
            else:
                shutil.rmtree(self.base_dir, ignore_errors=True)

    def keep(self) -> None:
        """Leave this plane running after the interpreter exits (debugging: VKBRIDGE_KEEP_PLANES=1)."""
        atexit.unregister(self.stop)
        with self._lock:
            for p in self._procs.values():
                p.close_log()

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def restart_apiserver(self, timeout: float = 120) -> None:
        """Stop kube-apiserver and start it again on the same port and etcd (resilience tests)."""
        with self._lock:
            if self._stopped or "kube-apiserver" not in self._procs:
                raise PlaneError(f"{self.name}: restart_apiserver needs a started plane")
            self._procs["kube-apiserver"].end(STOP_GRACE_S)
            self._start_component("kube-apiserver")
            self._await("kube-apiserver", time.monotonic() + timeout, self._apiserver_ready)

    def add_serving_ip(self, ip: str, timeout: float = 20) -> None:
        """Opt-in: the apiserver's serving certificate also names ip (a testbed address that a forwarder
        such as e2e/tunnel.py listens on, for pods that cannot reach loopback). kube-apiserver reloads
        its certificate files when they change; if it has not within timeout, it is restarted."""
        with self._lock:
            if ip in self._serving_ips:
                return
            self._serving_ips.append(ip)
            ips, dns = self._serving_ips, self._serving_dns
            issued = self.ca.issue("kube-apiserver", server=True, ips=ips, dns=dns)
            assert issued.key_pem is not None
            for suffix, data, mode in ((".key", issued.key_pem, 0o600), (".crt", issued.cert_pem, 0o644)):
                tmp = write_pem(self._pki / f"apiserver{suffix}.new", data, mode)
                os.replace(tmp, self._pki / f"apiserver{suffix}")
        deadline = time.monotonic() + timeout
        while not self._serves_for(ip):
            if time.monotonic() > deadline:
                log.warning("%s: serving certificate not reloaded in %.0fs; restarting kube-apiserver",
                            self.name, timeout)  # fmt: skip
                self.restart_apiserver()
                return
            time.sleep(0.25)

    def _serves_for(self, ip: str) -> bool:
        """Whether the apiserver's current serving certificate verifies for ip."""
        try:
            with (
                socket.create_connection((self.ip, self.port), timeout=5) as sock,
                self._ssl_anon.wrap_socket(sock, server_hostname=ip),
            ):
                return True
        except (OSError, ssl.SSLError):
            return False

    def compact_etcd(self) -> int:
        """Compact etcd at its current revision (physically); returns that revision.

        Watches and lists are served from the apiserver's watch cache (1.36 also serves exact-revision lists
        from cache snapshots), which keeps its own event window: an old resourceVersion gets 410 after
        ``restart_apiserver()`` (the new cache starts at the current revision), or at once on a plane started
        with ``extra_args={"kube-apiserver": ["--watch-cache=false"]}``.
        """
        rev = int(
            self._etcd_post("/v3/kv/range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"]
        )
        self._etcd_post("/v3/kv/compaction", {"revision": str(rev), "physical": True})
        return rev

    def _etcd_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        req = urllib.request.Request(
            self.etcd_url + path,
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(req, timeout=30) as resp:
            result: dict[str, Any] = json.loads(resp.read())
        return result

    def install_crds(self, source: Path | None = None, timeout: float = 60) -> list[str]:
        """Server-side apply Liqo's CRDs (all its chart's), wait until each is Established; returns names."""
        src = source or crd_source()
        if not src.is_dir():
            raise PlaneError(f"CRD directory {src} does not exist (VKBRIDGE_LIQO_CRDS)")
        files = sorted(p for p in src.iterdir() if p.suffix in (".yaml", ".yml", ".json"))
        names = []
        for f in files:
            for doc in yaml.safe_load_all(f.read_text()):
                if isinstance(doc, dict) and doc.get("kind") == "CustomResourceDefinition":
                    names.append(doc["metadata"]["name"])
        if not names:
            raise PlaneError(f"no CustomResourceDefinition manifests in {src}")
        # Server-side: the CRDs exceed the 256 KiB last-applied annotation of client-side apply.
        self.kubectl(
            "apply",
            "--server-side",
            "--force-conflicts",
            "--field-manager=vkbridge-e2e",
            *[f"-f={f}" for f in files],
            timeout=timeout,
        )
        self.kubectl(
            "wait",
            "--for=condition=Established",
            f"--timeout={int(timeout)}s",
            *[f"crd/{n}" for n in names],
            timeout=timeout + 10,
        )
        return names

    # ---- internals ---------------------------------------------------------------------------------

    def _start_component(self, name: str) -> None:
        """Its binary, its flags, then the plane's extra ones for it (last, so they win)."""
        flags: dict[str, Callable[[], list[str]]] = {
            "etcd": self._etcd_flags,
            "kube-apiserver": self._apiserver_flags,
            "kube-controller-manager": self._kcm_flags,
            "kube-scheduler": lambda: self._component_common("kube-scheduler", self.scheduler_port),
        }
        argv = [str(self.bin[name]), *flags[name](), *self.extra_args.get(name, [])]
        proc = LoggedProcess(name, argv, self._logs / f"{name}.log")
        self._procs[name] = proc
        proc.start()

    def _await(self, name: str, deadline: float, healthy: Callable[[], bool]) -> None:
        proc = self._procs[name]
        while True:
            if not proc.alive():
                code = proc.popen.returncode if proc.popen else None
                raise PlaneError(
                    f"{self.name}: {name} exited with {code}; last lines:\n{self.log_tail(name)}"
                )
            if healthy():
                return
            if time.monotonic() >= deadline:
                raise PlaneError(
                    f"{self.name}: {name} not healthy in time; last lines:\n{self.log_tail(name)}"
                )
            time.sleep(0.1)

    def _terminate_all(self) -> None:
        # Clients first, etcd last: the apiserver shuts down cleanly only while etcd answers.
        clients = [self._procs[n] for n in reversed(COMPONENTS) if n in self._procs and n != "etcd"]
        for p in clients:
            p.signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        for p in clients:
            p.reap(deadline)
        if "etcd" in self._procs:
            self._procs["etcd"].end(STOP_GRACE_S)

    def _get(self, url: str, ctx: ssl.SSLContext | None) -> bool:
        try:
            with urllib.request.urlopen(url, context=ctx, timeout=5) as resp:
                return bool(resp.status == 200)
        except (OSError, ValueError):
            return False

    def _etcd_healthy(self) -> bool:
        return self._get(self.etcd_url + "/health", None)

    def _apiserver_ready(self) -> bool:
        return self._get(self.url + "/readyz", self._ssl_anon)

    def _healthz(self, port: int) -> bool:
        return self._get(f"https://{self.ip}:{port}/healthz", self._ssl_anon)

    def _etcd_flags(self) -> list[str]:
        peer = f"http://{self.ip}:{self._etcd_peer_port}"
        return [
            f"--name={self.name}",
            f"--data-dir={self.base_dir / 'etcd'}",
            f"--listen-client-urls={self.etcd_url}",
            f"--advertise-client-urls={self.etcd_url}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster={self.name}={peer}",
            "--unsafe-no-fsync=true",
        ]

    def _apiserver_flags(self) -> list[str]:
        pki = self._pki
        return [
            f"--etcd-servers={self.etcd_url}",
            *self._serving_flags(self.port, "apiserver"),
            f"--advertise-address={self.ip}",
            f"--cert-dir={pki}",
            f"--client-ca-file={pki / 'ca.crt'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={self.url}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={self.service_cidr}",
            "--allow-privileged=true",
            "--enable-admission-plugins=NodeRestriction",
            f"--kubelet-client-certificate={pki / 'apiserver-kubelet-client.crt'}",
            f"--kubelet-client-key={pki / 'apiserver-kubelet-client.key'}",
            f"--kubelet-certificate-authority={pki / 'ca.crt'}",
            "--kubelet-preferred-address-types=InternalIP",
            "--endpoint-reconciler-type=none",
            # Aggregation layer (inert until an APIService names a Service): the front proxy identity is a
            # plane-CA certificate only FRONT_PROXY_CN may use; routing to the Service's endpoints because
            # the testbed has no kube-proxy for ClusterIPs.
            f"--requestheader-client-ca-file={pki / 'ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_CN}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--enable-aggregator-routing=true",
            # Without it a SIGTERM waits up to 60 s for the open watches of KCM, scheduler and vkbridge.
            "--shutdown-watch-termination-grace-period=2s",
        ]

    def _component_common(self, comp: str, port: int) -> list[str]:
        # The KCM runs every controller under its own identity (--use-service-account-credentials=false),
        # which the bootstrap RBAC role system:kube-controller-manager does not cover (e.g. CSR signing
        # writes certificatesigningrequests/status): so it is also in system:masters.
        orgs = ["system:masters"] if comp == "kube-controller-manager" else []
        kubeconfig = self._client_kubeconfig(f"system:{comp}", orgs, stem=comp)
        return [
            *kubeconfig_flags(kubeconfig),
            *self._serving_flags(port, f"{comp}-serving"),
            "--leader-elect=false",
        ]

    def _serving_flags(self, port: int, pem_stem: str) -> list[str]:
        """On the plane's IP, with the component's plane-CA pair pki/<pem_stem>.crt|key."""
        return serving_flags(self.ip, port, self._pki / f"{pem_stem}.crt", self._pki / f"{pem_stem}.key")

    def _kcm_flags(self) -> list[str]:
        pki = self._pki
        return [
            *self._component_common("kube-controller-manager", self.kcm_port),
            "--controllers=*",
            f"--node-monitor-grace-period={self.grace}",
            "--node-monitor-period=2s",
            "--use-service-account-credentials=false",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
            f"--service-cluster-ip-range={self.service_cidr}",
            # HPAs react within seconds (tests/integration/test_top_and_hpa.py); inert without HPAs.
            "--horizontal-pod-autoscaler-sync-period=3s",
            "--horizontal-pod-autoscaler-cpu-initialization-period=10s",
            "--horizontal-pod-autoscaler-initial-readiness-delay=5s",
        ]


def kubeconfig_flags(kubeconfig: Path) -> list[str]:
    """A component's one identity toward the plane: for its own calls and for delegated authn/authz."""
    return [
        f"--kubeconfig={kubeconfig}",
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
    ]


def serving_flags(ip: str, port: int, cert: Path, key: Path) -> list[str]:
    """How a Kubernetes component (the generic API server's flags) serves HTTPS."""
    return [
        f"--bind-address={ip}",
        f"--secure-port={port}",
        f"--tls-cert-file={cert}",
        f"--tls-private-key-file={key}",
    ]


def crd_source() -> Path:
    """Where the Liqo CRDs come from: $VKBRIDGE_LIQO_CRDS, else every CRD of Liqo's chart at the pinned
    version (e2e/liqo_chart.py: fetched from Liqo's Go module into the binary store once per machine)."""
    env = os.environ.get("VKBRIDGE_LIQO_CRDS")
    return Path(env) if env else liqo_crds_dir()
