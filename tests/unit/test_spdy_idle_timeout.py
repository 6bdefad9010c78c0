"""A streaming connection with no frame either way for the idle timeout is closed, as the kubelet's
``--streaming-connection-idle-timeout`` (spdystream's idle timer) closes it (issue 35, confirm or refute).

Before, an exec or port-forward session whose client stayed connected but silent was held for ever.
client-go pings every 5 s, so a live kubectl is never closed by it. In memory, on the product classes.
"""

from __future__ import annotations

import asyncio
import time

from tests.unit.streamfakes import HeldTransport, framing
from vkbridge.kubeletapi.streams import spdy
from vkbridge.kubeletapi.streams.channels import V4
from vkbridge.kubeletapi.streams.spdyconn import STREAMING_IDLE_TIMEOUT, SpdyConnection, SpdyExecFront

IDLE = 0.3


def idle_connection(*streams: tuple[int, str]) -> tuple[SpdyConnection, HeldTransport, spdy.FrameEncoder]:
    return framing(*streams, idle_timeout=IDLE)


def test_the_default_is_the_kubelets_four_hours() -> None:
    assert STREAMING_IDLE_TIMEOUT == 4 * 3600


async def test_an_exec_session_whose_client_stays_silent_is_closed_at_the_idle_timeout() -> None:
    conn, transport, _ = idle_connection((1, "error"), (3, "stdin"), (5, "stdout"))
    front = SpdyExecFront(conn, V4)
    started = time.monotonic()
    event = await asyncio.wait_for(front.receive(), 5.0)
    assert event.kind == "gone"  # the relay ends the session and closes the pool stream
    assert time.monotonic() - started >= IDLE * 0.9
    assert transport.is_closing() and conn.gone.is_set()
    assert all(st.reset for st in conn.streams.values())


async def test_a_client_that_pings_keeps_its_connection_past_the_idle_timeout() -> None:
    conn, transport, client = idle_connection((1, "error"), (3, "stdin"), (5, "stdout"))
    for i in range(10):  # 1 s of pings, every third of the timeout
        conn.data_received(client.encode(spdy.Ping(2 * i + 1)))
        await asyncio.sleep(IDLE / 3)
        assert not conn.gone.is_set(), f"closed after {i + 1} pings"
    await asyncio.wait_for(conn.gone.wait(), 5.0)  # silent from here on: closed
    assert transport.is_closing()


async def test_our_own_output_counts_as_activity() -> None:
    conn, _, _ = idle_connection((1, "error"), (3, "stdin"), (5, "stdout"))
    stdout = conn.by_kind["stdout"]
    for _ in range(6):  # a command printing while nobody types: not idle
        conn.send_data(stdout, b"tick\n")
        await asyncio.sleep(IDLE / 3)
    assert not conn.gone.is_set()
