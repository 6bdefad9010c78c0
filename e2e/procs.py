"""How the harness ends a child process and reads its log: one policy for every process it starts (the
planes' components, kubelets, containerd, metrics-server, the fake kubelet, vkbridge, the bench's tunnel).

Free of product code: the fake kubelet's launcher uses it too (import-linter contract).
"""

from __future__ import annotations

import logging
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

log = logging.getLogger(__name__)


def end_process(
    popen: subprocess.Popen[bytes], grace: float, sig: int = signal.SIGTERM, name: str = ""
) -> int:
    """Send ``sig`` (a process that has exited is left alone), give it ``grace`` seconds, then SIGKILL,
    so a hung child never outlives the harness; always reaped. Its exit code. With ``name``, a kill is
    logged (a component that ignores SIGTERM is worth knowing about)."""
    if popen.poll() is None:
        popen.send_signal(sig)
        try:
            popen.wait(grace)
        except subprocess.TimeoutExpired:
            if name:
                log.warning("%s did not stop after %s; killing it", name, signal.Signals(sig).name)
            popen.kill()
            popen.wait()
    return popen.returncode


def log_tail(path: Path, n: int, missing: str = "") -> str:
    """The last ``n`` lines of a child's log for an error message (``missing`` when it has none yet)."""
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return missing


def start_or_stop(start: Callable[[], object], stop: Callable[[], object]) -> None:
    """Run ``start``; when it fails (Ctrl-C too), ``stop`` what it had started before re-raising, so a
    half-started testbed piece leaves no process, address or object behind."""
    try:
        start()
    except BaseException:
        stop()
        raise
