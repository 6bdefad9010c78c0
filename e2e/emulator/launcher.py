"""Start the emulator as a subprocess (as in a real deployment, and so tests can kill and restart it)."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from e2e.procs import end_process, log_tail

REPO = Path(__file__).resolve().parents[2]
_STOP_GRACE_S = 10.0


class EmulatorError(RuntimeError):
    """The emulator exited or did not get ready; the message carries its log tail."""


@dataclass
class EmulatorHandle:
    argv: list[str]
    log_path: Path
    ready_file: Path
    proc: subprocess.Popen[bytes] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    _log: IO[bytes] | None = field(default=None, repr=False)

    @property
    def webhook_port(self) -> int:
        return int(self.info.get("webhook_port", 0))

    @property
    def pod_webhook_port(self) -> int:
        return int(self.info.get("pod_webhook_port", 0))

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 60) -> str:
        return log_tail(self.log_path, n, "(no log)")

    def start(self, timeout: float = 60.0) -> EmulatorHandle:
        self.ready_file.unlink(missing_ok=True)
        self._log = self.log_path.open("ab")
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
        self.proc = subprocess.Popen(
            self.argv, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + timeout
        while not self.ready_file.exists():
            if not self.alive():
                self._close_log()
                raise EmulatorError(f"emulator exited with {self.proc.returncode}:\n{self.log_tail()}")
            if time.monotonic() > deadline:
                self.stop()
                raise EmulatorError(f"emulator not ready after {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.05)
        self.info = json.loads(self.ready_file.read_text())
        atexit.register(self.stop)
        return self

    def stop(self) -> None:
        """SIGTERM (the emulator unregisters its webhook), SIGKILL after a grace period; idempotent."""
        atexit.unregister(self.stop)
        if self.proc is not None:
            end_process(self.proc, _STOP_GRACE_S)
        self._close_log()

    def kill(self) -> None:
        """SIGKILL without cleanup (crash tests: the webhook registration stays behind)."""
        atexit.unregister(self.stop)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()

    def restart(self, timeout: float = 60.0) -> EmulatorHandle:
        self.stop()
        return self.start(timeout)

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def launch_emulator(
    *,
    consumer_kubeconfig: Path,
    pool_kubeconfig: Path,
    consumer_id: str,
    slug: str,
    pool_ca_cert: Path,
    pool_ca_key: Path,
    workdir: Path,
    consumer_ca_cert: Path | None = None,
    consumer_ca_key: Path | None = None,
    propagate_kubeconfig: bool = True,
    cert_lifetime: str = "365d",
    webhook_port: int = 0,
    api_server_url: str = "",
    controllers: str | None = None,
    verbose: bool = False,
    timeout: float = 60.0,
) -> EmulatorHandle:
    """Run ``python -m e2e.emulator`` and wait until it is ready; ``.stop()`` the handle when done."""
    workdir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable,
        "-m",
        "e2e.emulator",
        f"--consumer-kubeconfig={consumer_kubeconfig}",
        f"--pool-kubeconfig={pool_kubeconfig}",
        f"--consumer-id={consumer_id}",
        f"--slug={slug}",
        f"--pool-ca-cert={pool_ca_cert}",
        f"--pool-ca-key={pool_ca_key}",
        f"--cert-lifetime={cert_lifetime}",
        f"--webhook-port={webhook_port}",
        f"--ready-file={workdir / f'emulator-{slug}.ready'}",
        f"--parent-pid={os.getpid()}",
    ]
    if consumer_ca_cert is not None and consumer_ca_key is not None:
        argv += [f"--consumer-ca-cert={consumer_ca_cert}", f"--consumer-ca-key={consumer_ca_key}"]
    if not propagate_kubeconfig:
        argv.append("--no-propagate-kubeconfig")
    if api_server_url:
        argv.append(f"--api-server-url={api_server_url}")
    if controllers:
        argv.append(f"--controllers={controllers}")
    if verbose:
        argv.append("--verbose")
    handle = EmulatorHandle(argv, workdir / f"emulator-{slug}.log", workdir / f"emulator-{slug}.ready")
    return handle.start(timeout)
