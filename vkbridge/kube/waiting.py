"""Waiting on an asyncio.Event with a timeout, without ever swallowing a cancellation.

Python 3.11's ``asyncio.wait_for`` returns the inner result when the awaited event is set in the same loop
iteration as the task is cancelled, dropping the ``CancelledError`` (fixed in 3.12, which rebuilt it on
``asyncio.timeout``). A loop like the Node controller's then waits again forever and SIGTERM hangs
(seen in CI: 31 s, then SIGKILL). ``asyncio.timeout`` awaits in the task itself, so a pending cancel
always wins; the product uses only this.
"""

from __future__ import annotations

import asyncio

__all__ = ["wait_event"]


async def wait_event(event: asyncio.Event, timeout: float | None) -> bool:
    """Wait until ``event`` is set (True) or ``timeout`` seconds pass (False; None waits for ever); a cancel
    always propagates."""
    try:
        async with asyncio.timeout(timeout):
            await event.wait()
    except TimeoutError:
        return False
    return True
