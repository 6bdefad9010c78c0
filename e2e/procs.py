"""How the harness ends a child process and reads its log: one policy for every process it starts (the
planes' components, kubelets, containerd, metrics-server, the fake kubelet, vkbridge, the bench's tunnel).

Free of product code: the fake kubelet's launcher uses it too (import-linter contract).
"""

from __future__ import annotations

import datetime as dt
import logging
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)


def raise_interrupt(signum: int, _frame: object) -> None:
    """A SIGTERM handler: TERM unwinds like Ctrl-C (finally blocks, context exits, atexit), where its
    default action exits at once and leaves every process the harness started running."""
    raise KeyboardInterrupt(f"signal {signum}")


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


@dataclass
class LoggedProcess:
    """A child whose output goes to its own log file, appended and stamped at each start, so a restarted
    component's log keeps what came before; the file is closed when the child is reaped."""

    name: str
    argv: list[str]
    log_path: Path
    popen: subprocess.Popen[bytes] | None = None
    log_file: IO[bytes] | None = field(default=None, repr=False)

    def start(self) -> None:
        self.log_file = self.log_path.open("ab")
        stamp = dt.datetime.now(dt.UTC).isoformat()
        self.log_file.write(f"=== {stamp} starting: {' '.join(self.argv)}\n".encode())
        self.log_file.flush()
        self.popen = subprocess.Popen(
            self.argv, stdin=subprocess.DEVNULL, stdout=self.log_file, stderr=subprocess.STDOUT
        )

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def signal(self, sig: int) -> None:
        if self.popen is not None:
            self.popen.send_signal(sig)  # a no-op once the process has exited and been reaped

    def reap(self, deadline: float) -> None:
        """Wait until deadline (several signalled children share one), then SIGKILL; closes the log."""
        if self.popen is not None:
            try:
                self.popen.wait(timeout=max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.warning("%s did not stop after SIGTERM; killing it", self.name)
                self.popen.kill()
                self.popen.wait()
        self.close_log()

    def end(self, grace: float) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; closes the log."""
        self.signal(signal.SIGTERM)
        self.reap(time.monotonic() + grace)

    def close_log(self) -> None:
        if self.log_file is not None:
            self.log_file.close()
            self.log_file = None
