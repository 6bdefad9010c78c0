"""Exec over the WebSocket channel protocols (technotes 1.6), running the command as a local process.

Channels: 0 stdin, 1 stdout, 2 stderr, 3 error/status, 4 resize; v5 adds ``[255, ch]`` = close ``ch``.
base64 variants carry an ASCII channel digit and base64 text. ``ExecSession`` talks to ``Channels``:
``WsChannels`` here, ``execspdy.SpdyChannels`` for SPDY/3.1 (streams named by type, not numbered).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import json
import logging
import os
import pty
import signal
import struct
import termios
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from aiohttp import WSMsgType, web

from .runtime import GroupTracker, exit_code

log = logging.getLogger(__name__)

V5 = "v5.channel.k8s.io"
V4 = "v4.channel.k8s.io"
V4_B64 = "v4.base64.channel.k8s.io"
V1 = "channel.k8s.io"
V1_B64 = "base64.channel.k8s.io"
PROTOCOLS = (V5, V4, V4_B64, V1, V1_B64)
STDIN, STDOUT, STDERR, ERROR, RESIZE, CLOSE = 0, 1, 2, 3, 4, 255


def is_base64(proto: str) -> bool:
    return "base64" in proto


def encode(proto: str, channel: int, data: bytes) -> bytes | str:
    if is_base64(proto):
        return str(channel) + base64.b64encode(data).decode()
    return bytes([channel]) + data


def decode(proto: str, msg: bytes | str) -> tuple[int, bytes]:
    if isinstance(msg, str):
        if not msg:
            return -1, b""
        return int(msg[0]), base64.b64decode(msg[1:]) if is_base64(proto) else msg[1:].encode()
    if not msg:
        return -1, b""
    return msg[0], bytes(msg[1:])


def status_payload(proto: str, code: int | None, error: str | None, argv: Sequence[str]) -> bytes | None:
    """metav1.Status for v4/v5; plain error text (or nothing) for the older protocols."""
    if proto in (V5, V4, V4_B64):
        if error is not None:
            st: dict[str, Any] = {
                "metadata": {},
                "status": "Failure",
                "message": error,
                "reason": "InternalError",
                "code": 500,
            }
        elif code:
            st = {
                "metadata": {},
                "status": "Failure",
                "message": f"command terminated with non-zero exit code: error executing command "
                f"[{' '.join(argv)}], exit code {code}",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
            }
        else:
            st = {"metadata": {}, "status": "Success"}
        return json.dumps(st).encode()
    if error is not None:
        return error.encode()
    if code:
        return f"command terminated with non-zero exit code: exit status {code}".encode()
    return None


@dataclass(frozen=True)
class ExecRequest:
    argv: list[str]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @classmethod
    def from_query(cls, query: Mapping[str, str], commands: list[str]) -> ExecRequest:
        def flag(*names: str) -> bool:
            return any(query.get(n, "").lower() in ("1", "true") for n in names)

        tty = flag("tty")
        return cls(
            argv=commands,
            stdin=flag("input", "stdin"),
            stdout=flag("output", "stdout"),
            stderr=flag("error", "stderr") and not tty,
            tty=tty,
        )


def _set_ctty() -> None:  # child, after setsid(): make the pty slave our controlling terminal
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _winsize(fd: int, payload: bytes) -> None:
    with contextlib.suppress(ValueError, OSError, KeyError, TypeError):
        size = json.loads(payload)
        fcntl.ioctl(
            fd, termios.TIOCSWINSZ, struct.pack("HHHH", int(size["Height"]), int(size["Width"]), 0, 0)
        )


class Channels(Protocol):
    """The client side of one exec, whatever the wire: numbered channels in, numbered channels out."""

    async def send(self, channel: int, data: bytes) -> None: ...

    def incoming(self) -> AsyncIterator[tuple[int, bytes]]:
        """(channel, data) until the client leaves; stdin's end is ``(CLOSE, bytes([STDIN]))``."""
        ...

    async def close(self) -> None: ...


class WsChannels:
    """Channels over a prepared WebSocket in one of PROTOCOLS."""

    def __init__(self, ws: web.WebSocketResponse, proto: str) -> None:
        self.ws, self.proto = ws, proto
        self._send_lock = asyncio.Lock()

    async def send(self, channel: int, data: bytes) -> None:
        msg = encode(self.proto, channel, data)
        async with self._send_lock:
            if self.ws.closed:
                return
            if isinstance(msg, str):
                await self.ws.send_str(msg)
            else:
                await self.ws.send_bytes(msg)

    async def incoming(self) -> AsyncIterator[tuple[int, bytes]]:
        async for msg in self.ws:
            if msg.type not in (WSMsgType.BINARY, WSMsgType.TEXT):
                continue
            channel, data = decode(self.proto, msg.data)
            if channel != CLOSE or self.proto == V5:
                yield channel, data

    async def close(self) -> None:
        await self.ws.close()


class ExecSession:
    """One exec: process <-> client until the process ends (or the client leaves, which kills it)."""

    def __init__(
        self,
        chan: Channels,
        proto: str,
        req: ExecRequest,
        env: Mapping[str, str],
        cwd: Path,
        tracker: GroupTracker,
    ) -> None:
        self.chan = chan
        self.proto = proto
        self.req = req
        self.env = dict(env)
        self.cwd = cwd
        self.tracker = tracker

    async def send(self, channel: int, data: bytes) -> None:
        await self.chan.send(channel, data)

    async def run(self) -> None:
        first = STDOUT if self.req.stdout else STDERR if self.req.stderr else ERROR
        await self.send(first, b"")
        code: int | None = None
        error: str | None = None
        try:
            if self.req.tty:
                code = await self._run_tty()
            else:
                code = await self._run_pipes()
        except OSError as exc:
            error = f"failed to exec in container: {self.req.argv!r}: {exc.strerror or exc}"
        except _ClientGone:
            return
        payload = status_payload(self.proto, code, error, self.req.argv)
        if payload is not None:
            await self.send(ERROR, payload)
        await self.chan.close()

    async def _run_pipes(self) -> int:
        pipe = asyncio.subprocess.PIPE
        devnull = asyncio.subprocess.DEVNULL
        proc = await asyncio.create_subprocess_exec(
            *self.req.argv,
            stdin=pipe if self.req.stdin else devnull,
            stdout=pipe if self.req.stdout else devnull,
            stderr=pipe if self.req.stderr else devnull,
            env=self.env,
            cwd=self.cwd,
            start_new_session=True,
        )
        self.tracker.add(proc.pid)
        pumps = []
        if proc.stdout is not None:
            pumps.append(asyncio.create_task(self._pump(proc.stdout.read, STDOUT)))
        if proc.stderr is not None:
            pumps.append(asyncio.create_task(self._pump(proc.stderr.read, STDERR)))

        async def write_stdin(data: bytes) -> None:
            if proc.stdin is not None and not proc.stdin.is_closing():
                with contextlib.suppress(ConnectionError):
                    proc.stdin.write(data)
                    await proc.stdin.drain()

        def close_stdin() -> None:
            if proc.stdin is not None:
                proc.stdin.close()

        reader = asyncio.create_task(self._read_client(write_stdin, close_stdin, None))
        return await self._finish(proc, pumps, reader)

    async def _run_tty(self) -> int:
        master, slave = pty.openpty()
        try:
            proc = await asyncio.create_subprocess_exec(
                *self.req.argv,
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env={**self.env, "TERM": self.env.get("TERM", "xterm")},
                cwd=self.cwd,
                start_new_session=True,
                preexec_fn=_set_ctty,
            )
        except BaseException:
            os.close(master)
            raise
        finally:
            os.close(slave)
        self.tracker.add(proc.pid)
        os.set_blocking(master, False)
        loop = asyncio.get_running_loop()
        chunks: asyncio.Queue[bytes] = asyncio.Queue()

        def readable() -> None:
            try:
                data = os.read(master, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""  # EIO: every slave fd is closed
            if not data:
                loop.remove_reader(master)
            chunks.put_nowait(data)

        loop.add_reader(master, readable)

        async def write_stdin(data: bytes) -> None:
            view = memoryview(data)
            while view:
                try:
                    n = os.write(master, view)
                    view = view[n:]
                except BlockingIOError:
                    await asyncio.sleep(0.01)
                except OSError:
                    return

        def close_stdin() -> None:
            with contextlib.suppress(OSError):
                os.write(master, b"\x04")

        pump = asyncio.create_task(self._pump(self._queue_reader(chunks), STDOUT))
        reader = asyncio.create_task(self._read_client(write_stdin, close_stdin, master))
        try:
            return await self._finish(proc, [pump], reader)
        finally:
            loop.remove_reader(master)
            os.close(master)

    @staticmethod
    def _queue_reader(chunks: asyncio.Queue[bytes]) -> Callable[[int], Any]:
        async def read(_n: int) -> bytes:
            return await chunks.get()

        return read

    async def _pump(self, read: Callable[[int], Any], channel: int) -> None:
        while data := await read(65536):
            await self.send(channel, data)

    async def _read_client(
        self,
        write_stdin: Callable[[bytes], Any],
        close_stdin: Callable[[], None],
        pty_fd: int | None,
    ) -> None:
        async for channel, data in self.chan.incoming():
            if channel == STDIN and data:
                await write_stdin(data)
            elif channel == RESIZE and pty_fd is not None:
                _winsize(pty_fd, data)
            elif channel == CLOSE and data[:1] == bytes([STDIN]):
                close_stdin()
        raise _ClientGone()

    async def _finish(
        self, proc: asyncio.subprocess.Process, pumps: list[asyncio.Task[None]], reader: asyncio.Task[None]
    ) -> int:
        waiter = asyncio.create_task(proc.wait())
        try:
            await asyncio.wait({waiter, reader}, return_when=asyncio.FIRST_COMPLETED)
            if not waiter.done():  # the client left: kill the command, as the kubelet's stream end does
                self.tracker.signal(proc.pid, signal.SIGKILL)
                await waiter
                raise _ClientGone()
            _, pending = await asyncio.wait(pumps, timeout=5)
            for t in pending:
                t.cancel()
            return exit_code(waiter.result())
        finally:
            self.tracker.signal(proc.pid, signal.SIGKILL)
            self.tracker.remove(proc.pid)
            reader.cancel()
            for t in pumps:
                t.cancel()
            await asyncio.gather(reader, *pumps, return_exceptions=True)


class _ClientGone(Exception):
    pass
