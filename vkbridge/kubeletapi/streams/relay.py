"""Relays one exec/attach session between a front (the API server's SPDY or WebSocket stream to us)
and the pool's stream (WebSocket ``v5.channel.k8s.io``, or SPDY/3.1 where the pool forbids that).

The front hides its framing behind ``ExecFront``; the relay only moves bytes and decides the end:
the pool side ending (process exited) writes its Status to the front; the front going away (kubectl
interrupted) closes the pool stream, which ends the remote process like a kubelet would.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import json
import re
from dataclasses import dataclass
from typing import Any, Final, Literal

import aiohttp

from vkbridge.kubeletapi.streams.channels import ERROR, STDERR, STDOUT, exit_code_of, internal_error
from vkbridge.kubeletapi.streams.poolstream import PoolStream
from vkbridge.logs import get_logger

__all__ = ["MAX_STATUS_BYTES", "ExecFront", "Inbound", "RelayResult", "StatusBuffer", "relay"]

log = get_logger("vkbridge.kubeletapi.relay")

InboundKind = Literal["stdin", "stdin_eof", "resize", "gone"]
_INTERRUPT_GRACE: Final = 2.0
#: The pool's error channel carries one Status (a few hundred bytes; a long command line makes it
#: longer): what is kept of it, so a pool that never stops writing there cannot grow our memory.
MAX_STATUS_BYTES: Final = 64 * 1024
_TAIL_BYTES: Final = 512  # kept from the end too: where a Status's ExitCode cause is
_MESSAGE_CHARS: Final = 1000
_EXIT_CODE: Final = re.compile(rb'\{"reason":"ExitCode","message":"(-?[0-9]{1,10})"')
_MESSAGE: Final = re.compile(rb'"message":"((?:[^"\\]|\\.)*)')


@dataclass(frozen=True)
class Inbound:
    """One event from the client side: stdin bytes, stdin EOF, a resize (JSON object) or its end."""

    kind: InboundKind
    data: bytes = b""


class ExecFront(abc.ABC):
    """The client-facing side of a session, whatever its framing."""

    protocol: str

    @abc.abstractmethod
    async def receive(self) -> Inbound:
        """The next client event; ``gone`` once the client left (then forever)."""

    @abc.abstractmethod
    async def send(self, channel: int, data: bytes) -> None:
        """stdout (1) or stderr (2) bytes, with backpressure."""

    @abc.abstractmethod
    async def finish(self, status: dict[str, Any]) -> None:
        """End the session: close the output streams, write the Status (per protocol), close."""

    @abc.abstractmethod
    async def abort(self) -> None:
        """The client is gone or the session failed: release everything without a Status."""


@dataclass(frozen=True)
class RelayResult:
    status: dict[str, Any] | None  # None when the client left first
    exit_code: int | None


class StatusBuffer:
    """The error channel's bytes, bounded: the first ``limit`` and the last ``_TAIL_BYTES``."""

    def __init__(self, limit: int = MAX_STATUS_BYTES) -> None:
        self.limit = limit
        self.head = bytearray()
        self.tail = b""
        self.total = 0

    def add(self, data: bytes) -> None:
        self.total += len(data)
        room = self.limit - len(self.head)
        if room > 0:
            self.head += data[:room]
        self.tail = (self.tail + data[-_TAIL_BYTES:])[-_TAIL_BYTES:]

    def status(self, pool: PoolStream) -> dict[str, Any]:
        if self.total <= self.limit:
            return _status_from(bytes(self.head), pool)
        return _truncated_status(bytes(self.head), self.tail, self.total, self.limit)


def _truncated_status(head: bytes, tail: bytes, total: int, limit: int) -> dict[str, Any]:
    """A Status from a cut one: its message's start with a note, and its exit code when the end has it."""
    found = _MESSAGE.search(head)
    text = head if found is None else found.group(1)
    try:
        message = json.loads(b'"' + text[: _MESSAGE_CHARS * 6].rstrip(b"\\") + b'"') if found else None
    except ValueError:
        message = None
    if not isinstance(message, str):
        message = text.decode("utf-8", "replace")
    note = f"... [truncated: the pool sent {total} bytes on the error stream; the first {limit} were kept]"
    code = _EXIT_CODE.search(tail)
    if code is None:
        return internal_error(message[:_MESSAGE_CHARS] + note)
    return {
        "metadata": {},
        "status": "Failure",
        "message": message[:_MESSAGE_CHARS] + note,
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": code.group(1).decode()}]},
    }


async def relay(front: ExecFront, pool: PoolStream) -> RelayResult:
    """Run until one side ends; always closes the pool stream and finishes or aborts the front."""
    status_buf = StatusBuffer()

    async def upstream() -> bool:
        """True when the client left; False when the pool stopped taking input (it is ending)."""
        while True:
            ev = await front.receive()
            if ev.kind == "gone":
                return True
            try:
                if ev.kind == "stdin":
                    await pool.send_stdin(ev.data)
                elif ev.kind == "stdin_eof":
                    await pool.close_stdin()
                elif ev.kind == "resize":
                    await pool.resize(ev.data)
            except (ConnectionError, OSError, aiohttp.ClientError):
                return False

    async def downstream() -> None:
        async for channel, payload in pool.messages():
            if channel in (STDOUT, STDERR):
                if payload:
                    await front.send(channel, payload)
            elif channel == ERROR:
                status_buf.add(payload)

    up = asyncio.create_task(upstream(), name="exec-upstream")
    down = asyncio.create_task(downstream(), name="exec-downstream")
    try:
        await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        client_left = up.done() and (up.exception() is not None or up.result())
        if client_left and not down.done():
            # The client went away: stop the remote side, as a kubelet's stream end does.
            down.cancel()
            await asyncio.gather(down, return_exceptions=True)
            if (exc := up.exception()) is not None:
                log.warning("exec relay: client side failed", error=f"{type(exc).__name__}: {exc}")
            await front.abort()
            return RelayResult(None, None)
        await asyncio.wait({down})  # the pool side is ending: let it deliver the Status
        up.cancel()
        await asyncio.gather(up, return_exceptions=True)
        if (exc := down.exception()) is not None:
            status = internal_error(f"error relaying the stream: {type(exc).__name__}: {exc}")
        else:
            status = status_buf.status(pool)
        await front.finish(status)
        return RelayResult(status, exit_code_of(status))
    except BaseException:
        for t in (up, down):
            t.cancel()
        await asyncio.gather(up, down, return_exceptions=True)
        # Interrupted (shutdown): tell the client, or kubectl would read the silence as success.
        with contextlib.suppress(Exception):
            async with asyncio.timeout(_INTERRUPT_GRACE):
                await front.finish(internal_error("stream interrupted: the virtual kubelet is stopping"))
        with contextlib.suppress(Exception):
            await front.abort()
        raise
    finally:
        with contextlib.suppress(Exception):
            await pool.close()


def _status_from(raw: bytes, pool: PoolStream) -> dict[str, Any]:
    if raw:
        try:
            status = json.loads(raw)
        except ValueError:
            return internal_error(raw.decode("utf-8", "replace")[:1000])  # v1-v3 style text error
        if isinstance(status, dict):
            return status
    return internal_error(f"the pool stream ended without an exit status ({pool.end_reason()})")
