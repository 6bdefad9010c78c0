"""The pure parts of port-forward: stream headers, pairing, the WebSocket port list and prefix."""

from __future__ import annotations

import pytest

from vkbridge.kubeletapi.streams.portforward import (
    PairTracker,
    PortForwardError,
    StreamKey,
    lost_message,
    port_prefix,
    stream_key,
    ws_ports,
)
from vkbridge.kubeletapi.streams.spdyconn import SpdyStream


def headers(kind: str, port: str, request_id: str | None = "0") -> dict[str, list[str]]:
    h = {"streamtype": [kind], "port": [port]}
    if request_id is not None:
        h["requestid"] = [request_id]
    return h


def test_stream_key_reads_the_kubelet_headers_of_a_port_forward_stream() -> None:
    assert stream_key(headers("data", "8080", "7"), 3) == StreamKey("data", 8080, "7")
    assert stream_key(headers("ERROR", "80", "7"), 1) == StreamKey("error", 80, "7")


def test_stream_key_pairs_streams_without_request_id_by_stream_id_like_the_kubelet() -> None:
    assert stream_key(headers("error", "80", None), 5).request_id == "#5"
    assert stream_key(headers("data", "80", None), 7).request_id == "#5"


@pytest.mark.parametrize(
    ("hdrs", "message"),
    [
        ({"port": ["80"]}, "stream type is missing"),
        (headers("stdin", "80"), 'invalid stream type "stdin"'),
        ({"streamtype": ["data"]}, "port header is missing"),
        (headers("data", "http"), 'unable to parse "http" as a port'),
        (headers("data", "0"), "port 0 must be > 0 and < 65536"),
        (headers("data", "65536"), "port 65536 must be > 0"),
    ],
)
def test_stream_key_refuses_malformed_port_forward_streams_with_the_reason(
    hdrs: dict[str, list[str]], message: str
) -> None:
    with pytest.raises(PortForwardError, match=message):
        stream_key(hdrs, 1)


def stream(sid: int, kind: str) -> SpdyStream:
    return SpdyStream(sid, {}, kind)


def test_pair_tracker_completes_a_pair_in_either_order_and_keeps_requests_apart() -> None:
    t = PairTracker()
    e1, d2, d1, e2 = stream(1, "error"), stream(3, "data"), stream(5, "data"), stream(7, "error")
    assert t.add(StreamKey("error", 80, "a"), e1) is None
    assert t.add(StreamKey("data", 81, "b"), d2) is None
    assert t.add(StreamKey("data", 80, "a"), d1) == (80, d1, e1)
    assert t.pending() == [d2]
    assert t.add(StreamKey("error", 81, "b"), e2) == (81, d2, e2)
    assert t.pending() == []


def test_pair_tracker_refuses_a_duplicate_stream_a_port_mismatch_and_too_many_halves() -> None:
    t = PairTracker(limit=2)
    t.add(StreamKey("data", 80, "a"), stream(1, "data"))
    with pytest.raises(PortForwardError, match="a second data stream"):
        t.add(StreamKey("data", 80, "a"), stream(3, "data"))
    with pytest.raises(PortForwardError, match="port 81 differs from 80"):
        t.add(StreamKey("error", 81, "a"), stream(5, "error"))
    t.add(StreamKey("data", 80, "b"), stream(7, "data"))
    with pytest.raises(PortForwardError, match="too many unpaired"):
        t.add(StreamKey("data", 80, "c"), stream(9, "data"))


def test_ws_ports_reads_repeated_and_comma_separated_port_parameters() -> None:
    assert ws_ports(["8080", "9000,9001"]) == [8080, 9000, 9001]
    with pytest.raises(PortForwardError, match='"port" is required'):
        ws_ports([])
    with pytest.raises(PortForwardError, match="as a port"):
        ws_ports(["x"])


def test_port_prefix_is_the_little_endian_port_the_kubelet_writes_first_on_each_channel() -> None:
    assert port_prefix(8080) == bytes([0x90, 0x1F])
    assert port_prefix(1) == b"\x01\x00"


def test_lost_message_says_the_port_and_why_the_session_ends() -> None:
    msg = lost_message(80, "ConnectionResetError").decode()
    assert msg.startswith("error forwarding port 80: vkbridge lost its connection to the pool")
    assert "ConnectionResetError" in msg and "session ends" in msg
