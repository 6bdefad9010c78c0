"""Start the fake kubelet as a subprocess for tests and stop it without leaking container processes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from e2e.procs import end_process, log_tail

from .app import READY_FILE

REPO = Path(__file__).resolve().parents[2]


@dataclass
class FakeKubeletHandle:
    process: subprocess.Popen[bytes]
    workdir: Path
    ports: dict[str, int]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def log_path(self) -> Path:
        return self.workdir / "fakekubelet.log"

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        return log_tail(self.log_path, lines)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM (the process kills its containers), SIGKILL if needed, then sweep leftover groups."""
        end_process(self.process, timeout)
        pgids = self.workdir / "pgids"
        if pgids.is_dir():
            for entry in pgids.iterdir():
                with contextlib.suppress(ValueError, ProcessLookupError, PermissionError):
                    os.killpg(int(entry.name), signal.SIGKILL)
                entry.unlink(missing_ok=True)

    async def astop(self, timeout: float = 15.0) -> None:
        await asyncio.to_thread(self.stop, timeout)

    def __enter__(self) -> FakeKubeletHandle:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def _write_private(path: Path, data: bytes) -> None:
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def launch_fake_kubelets(
    kubeconfig: Path,
    nodes: list[str],
    serving_cert: bytes,
    serving_key: bytes,
    workdir: Path,
    no_exec: bool = False,
    *,
    client_ca: bytes | None = None,
    extra_args: Sequence[str] = (),
    log_level: str = "info",
    events: str = "all",
    timeout: float = 60.0,
) -> FakeKubeletHandle:
    """Spawn ``python -m e2e.fakekubelet`` and block until its ready file lists every node's port."""
    workdir.mkdir(parents=True, exist_ok=True)
    tls = workdir / "tls"
    tls.mkdir(exist_ok=True)
    (tls / "serving.crt").write_bytes(serving_cert)
    _write_private(tls / "serving.key", serving_key)
    ready = workdir / READY_FILE
    ready.unlink(missing_ok=True)
    cmd = [
        sys.executable,
        "-m",
        "e2e.fakekubelet",
        "--kubeconfig",
        str(kubeconfig),
        *[arg for node in nodes for arg in ("--node", node)],
        "--serving-cert",
        str(tls / "serving.crt"),
        "--serving-key",
        str(tls / "serving.key"),
        "--workdir",
        str(workdir),
        "--log-level",
        log_level,
        "--events",
        events,
    ]
    if client_ca is not None:
        (tls / "client-ca.crt").write_bytes(client_ca)
        cmd += ["--client-ca", str(tls / "client-ca.crt")]
    if no_exec:
        cmd.append("--no-exec")
    cmd += list(extra_args)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }
    with (workdir / "fakekubelet.log").open("ab") as logfile:
        proc = subprocess.Popen(
            cmd, cwd=REPO, env=env, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True
        )
    handle = FakeKubeletHandle(proc, workdir, {})
    deadline = time.monotonic() + timeout
    while not ready.exists():
        if proc.poll() is not None:
            raise RuntimeError(f"fake kubelet exited with {proc.returncode}:\n{handle.log_tail()}")
        if time.monotonic() > deadline:
            handle.stop()
            raise TimeoutError(f"fake kubelet not ready after {timeout}s:\n{handle.log_tail()}")
        time.sleep(0.05)
    handle.info = json.loads(ready.read_text())
    handle.ports = {k: int(v) for k, v in handle.info["ports"].items()}
    return handle
