"""WebSocket port-forward: the port count one byte of channel numbers carries, and base64 channels.

issue 35: with 129 ports the 257th channel does not fit ``bytes([channel])`` and the session failed
with a server error after the upgrade; the kubelet's channels wrap (``byte(i)``) onto the first ports'.
We refuse before the upgrade (400). In base64 the kubelet writes ``'0' + channel``, so a fifth port's
data channel 10 is ``:``, not ``10``.
"""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.streamfakes import CollectingWriter
from vkbridge.kubeletapi.streams.channels import V4, V4_B64, decode_ws, encode_ws
from vkbridge.kubeletapi.streams.portforward import PoolPortForward, PortForwardError, WsPortForward, ws_ports


def test_a_websocket_port_forward_of_more_ports_than_channel_bytes_is_refused_before_the_upgrade() -> None:
    with pytest.raises(PortForwardError, match="129 ports"):
        ws_ports([",".join(str(1000 + i) for i in range(129))])
    assert len(ws_ports([",".join(str(1000 + i) for i in range(128))])) == 128


async def test_a_websocket_port_forward_of_128_ports_opens_every_channel() -> None:
    pool = PoolPortForward(asyncio.StreamReader(), CollectingWriter())  # type: ignore[arg-type]
    sent: list[bytes | str] = []

    async def send(channel: int, payload: bytes) -> None:
        sent.append(encode_ws(V4, channel, payload))

    await WsPortForward(pool, [1000 + i for i in range(128)], send).start()
    assert [m[0] for m in sent] == list(range(256))


def test_base64_channels_from_ten_on_are_the_kubelets_characters() -> None:
    assert encode_ws(V4_B64, 10, b"hi") == ":aGk="
    assert decode_ws(V4_B64, ":aGk=") == (10, b"hi")
    assert encode_ws(V4_B64, 3, b"hi") == "3aGk="  # exec's channels are digits, as before
    assert decode_ws(V4_B64, "0aGk=") == (0, b"hi")
