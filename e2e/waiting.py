"""One way to wait for a condition, for the harness and every test: `wait_until` (blocking, for code off
the event loop) and `eventually` (async, for code on it). Both poll, because what they wait for (an API
server, a cache, a process) offers nothing to wait on, and both say what was awaited when time runs out.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")
Errors = tuple[type[BaseException], ...]


def wait_until(cond: Callable[[], T | None], timeout: float, what: str, interval: float = 0.1) -> T:
    """Call ``cond`` until it returns something truthy and return that; TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = cond()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


async def eventually(
    cond: Callable[[], T | Awaitable[T | None] | None],
    timeout: float,
    what: str,
    *,
    interval: float = 0.02,
    not_yet: Errors = (),
) -> T:
    """Await ``cond`` (plain or async) until it returns something truthy and return that. Exceptions of
    the ``not_yet`` types count as "not yet" (an API still settling); TimeoutError names ``what`` and the
    last answer."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    last: object = None
    while True:
        try:
            value = cond()
            if inspect.isawaitable(value):
                value = await value
            if value:
                return value
            last = value
        except not_yet as err:
            last = err
        if loop.time() > deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}; last: {last!r}")
        await asyncio.sleep(interval)
