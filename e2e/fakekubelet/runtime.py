"""The fake container runtime: a container is a local process group, or (no-exec) just a future.

Each process runs in its own session so a signal reaches the whole group, like a cgroup kill. Group ids
are recorded as files under ``<workdir>/pgids`` so the launcher can still clean up if this process is
SIGKILLed.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import logging
import os
import signal
from collections.abc import Mapping, Sequence
from pathlib import Path

from .podlogs import ContainerLog

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1


class StartError(Exception):
    """The command could not be started (kubelet reports reason StartError, exit code 128)."""


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def exit_code(returncode: int) -> int:
    return 128 - returncode if returncode < 0 else returncode


class GroupTracker:
    """Remembers live process groups on disk; kill_all() is the shutdown path."""

    def __init__(self, root: Path) -> None:
        self.root = root / "pgids"
        self.root.mkdir(parents=True, exist_ok=True)
        self.live: set[int] = set()

    def add(self, pgid: int) -> None:
        self.live.add(pgid)
        (self.root / str(pgid)).touch()

    def remove(self, pgid: int) -> None:
        self.live.discard(pgid)
        with contextlib.suppress(FileNotFoundError):
            (self.root / str(pgid)).unlink()

    def signal(self, pgid: int, sig: int) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)

    def kill_all(self) -> None:
        for pgid in list(self.live):
            self.signal(pgid, signal.SIGKILL)
            self.remove(pgid)


class Proc:
    """A running container attempt. ``wait`` returns the exit code; ``force_exit`` fakes a crash."""

    async def wait(self) -> int:
        raise NotImplementedError

    def send(self, sig: int) -> None:
        raise NotImplementedError

    def force_exit(self, code: int) -> None:
        raise NotImplementedError

    def schedule_exit(self, seconds: float, code: int) -> asyncio.TimerHandle:
        return asyncio.get_running_loop().call_later(seconds, self.force_exit, code)


class FakeProc(Proc):
    """No-exec mode: no process at all; SIGTERM is honoured at once."""

    def __init__(self) -> None:
        self._done: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def wait(self) -> int:
        return await asyncio.shield(self._done)

    def force_exit(self, code: int) -> None:
        if not self._done.done():
            self._done.set_result(code)

    def send(self, sig: int) -> None:
        self.force_exit(128 + sig)


class LocalProc(Proc):
    """A process group whose stdout and stderr go to a CRI log file."""

    def __init__(
        self, proc: asyncio.subprocess.Process, logfile: ContainerLog, tracker: GroupTracker
    ) -> None:
        self._proc = proc
        self._log = logfile
        self._tracker = tracker
        self._forced: int | None = None
        self.pgid = proc.pid
        tracker.add(self.pgid)
        assert proc.stdout is not None and proc.stderr is not None
        self._pumps = [
            asyncio.create_task(self._pump(proc.stdout, "stdout")),
            asyncio.create_task(self._pump(proc.stderr, "stderr")),
        ]
        self._result: asyncio.Task[int] = asyncio.create_task(self._reap())

    async def _pump(self, reader: asyncio.StreamReader, stream: str) -> None:
        while chunk := await reader.read(65536):
            self._log.write(stream, chunk)

    async def _reap(self) -> int:
        try:
            rc = await self._proc.wait()
            # The container ends with its main process: kill what it left behind, as a cgroup kill would.
            self._tracker.signal(self.pgid, signal.SIGKILL)
            _, pending = await asyncio.wait(self._pumps, timeout=2)
            for task in pending:
                task.cancel()
            return self._forced if self._forced is not None else exit_code(rc)
        finally:
            self._tracker.remove(self.pgid)
            self._log.close()

    async def wait(self) -> int:
        return await asyncio.shield(self._result)

    def send(self, sig: int) -> None:
        if self._proc.returncode is None:
            self._tracker.signal(self.pgid, sig)

    def force_exit(self, code: int) -> None:
        if self._proc.returncode is None:
            self._forced = code
            self._tracker.signal(self.pgid, signal.SIGKILL)


async def spawn(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: Path,
    logfile: ContainerLog,
    tracker: GroupTracker,
) -> LocalProc:
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=dict(env),
            cwd=cwd,
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
    except OSError as exc:
        logfile.close()
        raise StartError(f"failed to start container process {list(argv)!r}: {exc.strerror or exc}") from exc
    return LocalProc(proc, logfile, tracker)
