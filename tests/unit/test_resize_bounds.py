"""A resize the kubelet's TerminalSize (uint16) cannot hold is skipped; nothing escapes the decoder.

issue 35: ``{"Width": 1e400}`` decodes to infinity and ``int()`` of it raised OverflowError out of the
SPDY front's ``data_received`` (asyncio then kills the whole connection with a traceback).
"""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.streamfakes import framing
from vkbridge.kubeletapi.streams import spdy
from vkbridge.kubeletapi.streams.channels import V4, ResizeDecoder
from vkbridge.kubeletapi.streams.spdyconn import SpdyExecFront


@pytest.mark.parametrize(
    "bad",
    [
        b'{"Width": 1e400, "Height": 24}',  # infinity: OverflowError
        b'{"Width": NaN, "Height": 24}',  # ValueError
        b'{"Width": 1' + b"0" * 5000 + b', "Height": 24}',  # more digits than int() converts
        b"[" * 5000,  # deeper than the JSON decoder recurses
        b'{"Width": 70000, "Height": 24}',  # beyond uint16
        b'{"Width": 80, "Height": -1}',
    ],
)
def test_a_resize_python_cannot_convert_or_uint16_cannot_hold_is_skipped(bad: bytes) -> None:
    dec = ResizeDecoder()
    assert dec.feed(bad) == []
    assert dec.feed(b'{"Width":80,"Height":24}') == [{"Width": 80, "Height": 24}]


async def test_a_resize_of_1e400_on_the_spdy_front_leaves_the_session_running() -> None:
    conn, transport, client = framing((1, "error"), (3, "stdout"), (5, "resize"))
    front = SpdyExecFront(conn, V4)
    conn.data_received(client.encode(spdy.Data(5, b'{"Width": 1e400, "Height": 24}{"Width":9,"Height":9}')))
    async with asyncio.timeout(2):
        ev = await front.receive()
    assert (ev.kind, ev.data) == ("resize", b'{"Width":9,"Height":9}')
    assert not transport.is_closing()
