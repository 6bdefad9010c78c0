"""The exec relay's handling of the pool's error stream (in-memory fronts and pool streams; no I/O)."""

from __future__ import annotations

import asyncio
import json
import tracemalloc
from collections.abc import AsyncIterator
from typing import Any

from vkbridge.kubeletapi.streams.channels import ERROR, STDOUT, V5, exit_code_of
from vkbridge.kubeletapi.streams.poolstream import PoolStream
from vkbridge.kubeletapi.streams.relay import ExecFront, Inbound, relay

MiB = 1024 * 1024


class QuietFront(ExecFront):
    """A client that sends nothing and stays until the session ends; records what it is given."""

    protocol = V5

    def __init__(self) -> None:
        self.out = b""
        self.status: dict[str, Any] | None = None

    async def receive(self) -> Inbound:
        await asyncio.Event().wait()  # never: the pool side ends the session
        raise AssertionError("unreachable")

    async def send(self, channel: int, data: bytes) -> None:
        self.out += data

    async def finish(self, status: dict[str, Any]) -> None:
        self.status = status

    async def abort(self) -> None:
        pass


class ScriptedPool(PoolStream):
    protocol = V5
    transport = "websocket"

    def __init__(self, chunks: list[tuple[int, bytes]]) -> None:
        self._chunks = chunks

    async def send_stdin(self, data: bytes) -> None:
        pass

    async def close_stdin(self) -> None:
        pass

    async def resize(self, size_json: bytes) -> None:
        pass

    async def messages(self) -> AsyncIterator[tuple[int, bytes]]:
        for chunk in self._chunks:
            yield chunk

    def end_reason(self) -> str:
        return "test"

    async def close(self) -> None:
        pass


def chunked(data: bytes, size: int = 64 * 1024) -> list[tuple[int, bytes]]:
    return [(ERROR, data[i : i + size]) for i in range(0, len(data), size)]


async def test_a_status_with_a_huge_message_is_truncated_with_a_note_and_keeps_its_exit_code() -> None:
    status = {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: sh -c " + "x" * (4 * MiB),
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    front = QuietFront()
    pool = ScriptedPool([(STDOUT, b"hi\n"), *chunked(json.dumps(status, separators=(",", ":")).encode())])
    result = await relay(front, pool)
    assert front.out == b"hi\n"
    assert front.status is not None and result.status == front.status
    message = front.status["message"]
    assert message.startswith("command terminated with non-zero exit code: sh -c xxx")
    assert len(message) < 2000 and "truncated" in message and "65536" in message  # the bound, named
    assert result.exit_code == exit_code_of(front.status) == 3  # kubectl still exits with the code


async def test_a_pool_flooding_the_error_stream_does_not_grow_our_memory() -> None:
    front = QuietFront()
    junk = b"E" * (64 * 1024)
    pool = ScriptedPool([(ERROR, junk)] * 320)  # 20 MiB that never make a Status
    tracemalloc.start()
    try:
        result = await relay(front, pool)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * MiB, f"{peak / MiB:.1f} MiB held for a 20 MiB flood"
    assert result.status is not None and result.status["reason"] == "InternalError"
    assert result.status["message"].startswith("EEEE") and "truncated" in result.status["message"]
    assert result.exit_code is None


async def test_an_ordinary_status_passes_unchanged() -> None:
    status = {"metadata": {}, "status": "Success"}
    front = QuietFront()
    result = await relay(front, ScriptedPool([(ERROR, json.dumps(status).encode())]))
    assert result.status == status and result.exit_code == 0
