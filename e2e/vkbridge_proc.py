"""Run vkbridge exactly as deployed: a subprocess with Liqo's flags, its log captured to a file.

Used by the integration tests, the resilience scenarios and the README demo.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from e2e.controlplane import free_port
from e2e.procs import end_process

REPO = Path(__file__).resolve().parent.parent


@dataclass
class VkbridgeOptions:
    home_kubeconfig: Path
    slug: str
    consumer_id: str
    secret_name: str
    tenant_ns: str
    node_ip: str = "127.0.0.1"
    listen_port: int = 0
    metrics_port: int = 0
    lease_duration: str = "40s"
    ping_interval: str = "2s"
    ping_timeout: str = "1s"
    status_interval: str = "20s"
    certificate_type: str = "self-signed"
    pod_workers: int = 10
    verbosity: int = 2
    nodename: str = ""  # "" = slug; another name makes a second virtual node of the same peering
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def argv(self) -> list[str]:
        if not self.listen_port:
            self.listen_port = free_port()
        if not self.metrics_port:
            self.metrics_port = free_port()
        return [
            f"--home-kubeconfig={self.home_kubeconfig}",
            f"--foreign-kubeconfig-secret-name={self.secret_name}",
            f"--nodename={self.nodename or self.slug}",
            f"--tenant-namespace={self.tenant_ns}",
            "--liqo-namespace=liqo",
            f"--home-cluster-id={self.consumer_id}",
            f"--foreign-cluster-id={self.slug}",
            f"--node-ip={self.node_ip}",
            f"--listen-port={self.listen_port}",
            f"--certificate-type={self.certificate_type}",
            "--metrics-enabled=true",
            f"--metrics-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.metrics_port}",  # the same server
            f"--node-lease-duration={self.lease_duration}",
            f"--node-ping-interval={self.ping_interval}",
            f"--node-ping-timeout={self.ping_timeout}",
            f"--node-status-interval={self.status_interval}",
            "--node-check-network=false",
            "--create-node=true",
            f"--pod-reflection-workers={self.pod_workers}",
            f"--klog.v={self.verbosity}",
            *self.extra_args,
        ]


class VkbridgeProcess:
    """One vkbridge subprocess; `stop()` sends SIGTERM (as Kubernetes does), `kill()` SIGKILL."""

    def __init__(self, opts: VkbridgeOptions, log_path: Path) -> None:
        self.opts = opts
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None

    def start(self) -> VkbridgeProcess:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        node = self.opts.nodename or self.opts.slug
        env = {**os.environ, "POD_NAME": f"vk-{node}-0", "POD_NAMESPACE": self.opts.tenant_ns}
        env.update(self.opts.env)
        with open(self.log_path, "ab") as out:
            out.write(f"---- start {time.strftime('%H:%M:%S')} ----\n".encode())
            out.flush()
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "vkbridge", *self.opts.argv()],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True,
            )  # fmt: skip
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 10.0) -> int | None:
        if self.proc is None:
            return self.exit_code
        self.exit_code = end_process(self.proc, timeout)
        return self.exit_code

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(5)

    def metrics(self) -> dict[str, float]:
        """/metrics as {'name{labels}': value}; {} when the endpoint does not answer."""
        url = f"http://127.0.0.1:{self.opts.metrics_port}/metrics"
        try:
            with urllib.request.urlopen(url, timeout=5) as resp:
                text = resp.read().decode()
        except OSError:
            return {}
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                key, _, value = line.rpartition(" ")
                with contextlib.suppress(ValueError):
                    out[key] = float(value)
        return out

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def wait_for_log(self, pattern: str, timeout: float = 30.0, start: int = 0) -> re.Match[str]:
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            m = rx.search(self.log_text(), start)
            if m:
                return m
            if not self.alive():
                raise RuntimeError(f"vkbridge exited ({self.proc and self.proc.returncode}):\n{self.tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"no log line matching {pattern!r} after {timeout:.0f}s:\n{self.tail()}")
            time.sleep(0.1)

    def tail(self, n: int = 60) -> str:
        return "\n".join(self.log_text().splitlines()[-n:])

    def rss_bytes(self) -> int:
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        except (FileNotFoundError, ProcessLookupError):
            pass
        return 0


def metric_sum(values: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the samples of `name` (from `VkbridgeProcess.metrics`) whose labels include `labels`."""
    total = 0.0
    for key, value in values.items():
        base, _, rest = key.partition("{")
        if base == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total
