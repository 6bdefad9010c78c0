"""SPDY/3.1 framing (vkbridge.kubeletapi.streams.spdy) and the pure stream helpers around it."""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vkbridge.kubeletapi.streams import channels as ch
from vkbridge.kubeletapi.streams import rawhttp, spdy
from vkbridge.kubeletapi.streams.route import StreamRoute, stream_route
from vkbridge.kubeletapi.streams.spdydict import SPDY3_DICTIONARY

# Written by moby/spdystream v0.5.1's own Framer (Go): SYN_STREAM 1 {streamType: error}, SYN_STREAM 3
# {streamType: stdin} (second header block on the same zlib stream), DATA 3 "hi\n" with FIN, PING 1.
GO_CAPTURE = bytes.fromhex(
    "80030001000000290000000100000000000078f9e3c6a7c26260606004a7b392a2d4c45c6851c29a0a0a6800000000ffff"
    "800300010000001700000003000000000000c22e555c92929907000000ffff000000030100000368690a8003000600000004"
    "00000001"
)


def roundtrip(frames: list[spdy.Frame]) -> list[spdy.Frame]:
    enc, dec = spdy.FrameEncoder(), spdy.FrameDecoder()
    return dec.feed(b"".join(enc.encode(f) for f in frames))


def test_dictionary_is_the_spdy3_one() -> None:
    assert len(SPDY3_DICTIONARY) == 1423
    assert zlib.adler32(SPDY3_DICTIONARY) == 0xE3C6A7C2  # the dictionary id in every header stream
    assert SPDY3_DICTIONARY.startswith(b"\x00\x00\x00\x07options")
    assert SPDY3_DICTIONARY.endswith(b",enq=0.")


def test_decodes_a_real_spdystream_capture() -> None:
    frames = spdy.FrameDecoder().feed(GO_CAPTURE)
    assert frames == [
        spdy.SynStream(1, {"streamtype": ["error"]}),
        spdy.SynStream(3, {"streamtype": ["stdin"]}),
        spdy.Data(3, b"hi\n", fin=True),
        spdy.Ping(1),
    ]


def test_capture_decodes_byte_by_byte() -> None:
    dec = spdy.FrameDecoder()
    out: list[spdy.Frame] = []
    for i in range(len(GO_CAPTURE)):
        out += dec.feed(GO_CAPTURE[i : i + 1])
    assert [type(f) for f in out] == [spdy.SynStream, spdy.SynStream, spdy.Data, spdy.Ping]
    assert dec.buffered == 0


@pytest.mark.parametrize(
    "frame",
    [
        spdy.SynStream(1, {"streamtype": ["error"]}),
        spdy.SynStream(7, {"a": ["1", "2"], "b": [""]}, associated_id=3, priority=7, slot=9, fin=True),
        spdy.SynStream(5, {}, unidirectional=True),
        spdy.SynReply(1, {}),
        spdy.SynReply(3, {"x": ["y"]}, fin=True),
        spdy.RstStream(3, spdy.RstStatus.CANCEL),
        spdy.RstStream(0x7FFFFFFF, spdy.RstStatus.INTERNAL_ERROR),
        spdy.Settings(((0, 7, 65536), (1, 4, 100))),
        spdy.Settings((), clear=True),
        spdy.Ping(1),
        spdy.Ping(0xFFFFFFFE),
        spdy.GoAway(5, spdy.GoAwayStatus.OK),
        spdy.GoAway(0, spdy.GoAwayStatus.PROTOCOL_ERROR),
        spdy.HeadersFrame(3, {"k": ["v"]}),
        spdy.HeadersFrame(3, {}, fin=True),
        spdy.WindowUpdate(1, 65536),
        spdy.WindowUpdate(0, 1),
        spdy.Data(1, b"payload"),
        spdy.Data(1, b"", fin=True),
        spdy.Data(9, b"\x00" * 70000, fin=True),
    ],
)
def test_every_frame_type_round_trips(frame: spdy.Frame) -> None:
    assert roundtrip([frame]) == [frame]


def test_header_blocks_share_one_zlib_stream_per_direction() -> None:
    enc, dec = spdy.FrameEncoder(), spdy.FrameDecoder()
    frames = [spdy.SynStream(2 * i + 1, {"streamtype": [t], "port": ["80"]}) for i, t in enumerate("abcde")]
    wire = [enc.encode(f) for f in frames]
    # The second block is smaller: it references the first through the shared window.
    assert len(wire[1]) < len(wire[0])
    # A fresh decoder cannot read block 2 alone (no context), proving the stream is persistent.
    with pytest.raises(spdy.SpdyError):
        spdy.FrameDecoder().feed(wire[1])
    assert dec.feed(b"".join(wire)) == frames


def test_header_block_layout_uses_the_dictionary_and_sync_flush() -> None:
    block = spdy.HeaderCompressor().encode({"streamType": ["stdout"], "v": ["a", "b"]})
    assert block.endswith(b"\x00\x00\xff\xff")  # Z_SYNC_FLUSH after every block
    assert block[:2] == b"\x78\xf9"  # zlib header with FDICT set
    assert struct.unpack(">I", block[2:6])[0] == 0xE3C6A7C2
    raw = zlib.decompressobj(zdict=SPDY3_DICTIONARY).decompress(block)
    assert raw == (
        b"\x00\x00\x00\x02"
        + b"\x00\x00\x00\x0astreamtype\x00\x00\x00\x06stdout"  # names lowercased on the wire
        + b"\x00\x00\x00\x01v\x00\x00\x00\x03a\x00b"  # multiple values joined by NUL
    )
    assert spdy.HeaderDecompressor().decode(block) == {"streamtype": ["stdout"], "v": ["a", "b"]}


def test_data_fin_flag_and_wire_layout() -> None:
    wire = spdy.FrameEncoder().encode(spdy.Data(3, b"abc", fin=True))
    assert wire == b"\x00\x00\x00\x03\x01\x00\x00\x03abc"
    wire = spdy.FrameEncoder().encode(spdy.Ping(7))
    assert wire == b"\x80\x03\x00\x06\x00\x00\x00\x04\x00\x00\x00\x07"


def test_unknown_control_frames_are_skipped() -> None:
    noop = struct.pack(">HHI", 0x8003, 5, 0)
    credential = struct.pack(">HHI", 0x8003, 10, 4) + b"\x00\x00\x00\x00"
    ping = spdy.FrameEncoder().encode(spdy.Ping(3))
    assert spdy.FrameDecoder().feed(noop + credential + ping) == [spdy.Ping(3)]


@pytest.mark.parametrize(
    "wire",
    [
        struct.pack(">HHI", 0x8002, 6, 4) + b"\x00\x00\x00\x01",  # SPDY/2
        struct.pack(">II", 0, 0),  # DATA on stream 0
        struct.pack(">HHI", 0x8003, 6, 3) + b"\x00\x00\x01",  # short PING
        struct.pack(">HHI", 0x8003, 3, 8) + struct.pack(">II", 0, 5),  # RST on stream 0
        struct.pack(">HHI", 0x8003, 4, 8) + struct.pack(">II", 2, 0),  # SETTINGS count mismatch
        struct.pack(">HHI", 0x8003, 2, 6) + b"\x00\x00\x00\x01zz",  # SYN_REPLY, garbage block
    ],
)
def test_protocol_errors_raise(wire: bytes) -> None:
    with pytest.raises(spdy.SpdyError):
        spdy.FrameDecoder().feed(wire)


def test_rejects_uppercase_and_duplicate_header_names() -> None:
    def block(entries: list[tuple[bytes, bytes]]) -> bytes:
        raw = struct.pack(">I", len(entries))
        for n, v in entries:
            raw += struct.pack(">I", len(n)) + n + struct.pack(">I", len(v)) + v
        z = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=SPDY3_DICTIONARY)
        return z.compress(raw) + z.flush(zlib.Z_SYNC_FLUSH)

    with pytest.raises(spdy.SpdyError, match="invalid header name"):
        spdy.HeaderDecompressor().decode(block([(b"Upper", b"x")]))
    with pytest.raises(spdy.SpdyError, match="duplicate"):
        spdy.HeaderDecompressor().decode(block([(b"a", b"1"), (b"a", b"2")]))


def test_header_bomb_is_refused() -> None:
    raw = struct.pack(">I", 1) + struct.pack(">I", 1) + b"a" + struct.pack(">I", 1 << 20) + b"x" * (1 << 20)
    z = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=SPDY3_DICTIONARY)
    with pytest.raises(spdy.SpdyError, match="beyond"):
        spdy.HeaderDecompressor().decode(z.compress(raw) + z.flush(zlib.Z_SYNC_FLUSH))


def test_encoder_validates() -> None:
    enc = spdy.FrameEncoder()
    with pytest.raises(ValueError):
        enc.encode(spdy.Data(0, b"x"))
    with pytest.raises(ValueError):
        enc.encode(spdy.Data(1, b"x" * (spdy.MAX_FRAME_PAYLOAD + 1)))


@given(
    st.lists(
        st.one_of(
            st.builds(
                spdy.SynStream,
                st.integers(1, 2**31 - 1),
                st.dictionaries(
                    st.text("abcdefghijklmnopqrstuvwxyz-", min_size=1, max_size=12),
                    st.lists(st.text("abcXYZ 0123:/", max_size=20), min_size=1, max_size=3),
                    max_size=5,
                ),
                fin=st.booleans(),
            ),
            st.builds(spdy.Data, st.integers(1, 2**31 - 1), st.binary(max_size=300), fin=st.booleans()),
            st.builds(spdy.Ping, st.integers(0, 2**32 - 1)),
        ),
        max_size=12,
    ),
    st.integers(1, 64),
)
def test_any_frame_sequence_survives_any_chunking(frames: list[spdy.Frame], chunk: int) -> None:
    enc, dec = spdy.FrameEncoder(), spdy.FrameDecoder()
    wire = b"".join(enc.encode(f) for f in frames)
    out: list[spdy.Frame] = []
    for i in range(0, len(wire), chunk):
        out += dec.feed(wire[i : i + chunk])
    assert out == frames


# ---------------------------------------------------------------------------------------------- channels


def test_negotiation_takes_the_first_client_protocol_we_support() -> None:
    offered = ["v5.channel.k8s.io, v4.channel.k8s.io", "v3.channel.k8s.io"]
    assert ch.negotiate(offered, ch.SPDY_PROTOCOLS) == ch.V5
    assert ch.negotiate(["v9.channel.k8s.io", "channel.k8s.io"], ch.SPDY_PROTOCOLS) == ch.V1
    assert ch.negotiate(["portforward.k8s.io"], ch.SPDY_PROTOCOLS) is None
    assert ch.negotiate([ch.V4_B64, ch.V4], ch.WS_PROTOCOLS) == ch.V4_B64


def test_stream_options_from_kubelet_query() -> None:
    q = {"input": "1", "output": "1", "error": "1", "tty": "1"}
    opts = ch.StreamOptions.from_query(
        q.get, lambda n: ["sh", "-c", "x"] if n == "command" else [], exec_=True
    )
    assert opts == ch.StreamOptions(True, True, False, True, ("sh", "-c", "x"))  # TTY drops stderr
    assert opts.spdy_streams(ch.V5) == {"error", "stdin", "stdout", "resize"}
    assert opts.spdy_streams(ch.V2) == {"error", "stdin", "stdout"}
    assert opts.pool_params("main") == [
        ("container", "main"),
        ("command", "sh"),
        ("command", "-c"),
        ("command", "x"),
        ("stdin", "true"),
        ("stdout", "true"),
        ("stderr", "false"),
        ("tty", "true"),
    ]
    with pytest.raises(ch.ChannelError):
        empty: dict[str, str] = {}
        ch.StreamOptions.from_query(empty.get, lambda n: ["ls"], exec_=True)
    with pytest.raises(ch.ChannelError):
        ch.StreamOptions.from_query({"output": "1"}.get, lambda n: [], exec_=True)
    attach = ch.StreamOptions.from_query({"stdout": "true"}.get, lambda n: [], exec_=False)
    assert attach.stdout and not attach.command


def test_status_payloads_per_protocol() -> None:
    exit3: dict[str, Any] = {
        "metadata": {},
        "status": "Failure",
        "message": "command terminated with non-zero exit code: exit code 3",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "3"}]},
    }
    assert ch.exit_code_of(exit3) == 3
    assert ch.exit_code_of(ch.success_status()) == 0
    assert ch.exit_code_of(ch.internal_error("boom")) is None
    assert json.loads(ch.error_payload(ch.V5, exit3) or b"") == exit3
    assert ch.error_payload(ch.V2, ch.success_status()) is None
    assert ch.error_payload(ch.V1, exit3) == exit3["message"].encode()


def test_ws_channel_encoding() -> None:
    assert ch.encode_ws(ch.V5, 1, b"hi") == b"\x01hi"
    assert ch.encode_ws(ch.V4_B64, 2, b"hi") == "2aGk="
    assert ch.decode_ws(ch.V4_B64, "0aGk=") == (0, b"hi")
    assert ch.decode_ws(ch.V5, b"\xff\x00") == (255, b"\x00")
    with pytest.raises(ch.ChannelError):
        ch.decode_ws(ch.V5, b"")
    with pytest.raises(ch.ChannelError):
        ch.decode_ws(ch.V4_B64, "0!!")


def test_resize_decoder_handles_concatenated_and_split_objects() -> None:
    dec = ch.ResizeDecoder()
    assert dec.feed(b'{"Width":80,"Height":24}{"Width":1') == [{"Width": 80, "Height": 24}]
    assert dec.feed(b'00,"Height":50}\n') == [{"Width": 100, "Height": 50}]
    assert dec.feed(b"") == []


# ---------------------------------------------------------------------------------------------- routing, http


@pytest.mark.parametrize(
    ("path", "route"),
    [
        ("/exec/ns/pod/c", StreamRoute("exec", "ns", "pod", "c")),
        ("/exec/ns/pod/uid-1/c", StreamRoute("exec", "ns", "pod", "c", uid="uid-1")),
        ("/attach/ns/pod/c", StreamRoute("attach", "ns", "pod", "c")),
        ("/portForward/ns/pod", StreamRoute("portforward", "ns", "pod")),
        ("/portForward/ns/pod/uid", StreamRoute("portforward", "ns", "pod", uid="uid")),
        ("/exec/ns/pod", None),
        ("/exec/ns//c", None),
        ("/run/ns/pod/c", None),
        ("/exec/a/b/c/d/e", None),
    ],
)
def test_stream_routes(path: str, route: StreamRoute | None) -> None:
    assert stream_route(path) == route


def test_raw_head_parsing_keeps_repeated_headers() -> None:
    raw = (
        b"POST /exec/ns/p%2Dx/c?command=echo&command=hi%20there&output=1 HTTP/1.1\r\n"
        b"Host: 127.0.0.1:10250\r\nConnection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        b"X-Stream-Protocol-Version: v5.channel.k8s.io\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
    )
    head = rawhttp.parse_head(raw)
    assert (head.method, head.path) == ("POST", "/exec/ns/p-x/c")
    assert head.params("command") == ["echo", "hi there"]
    assert head.header_all("x-stream-protocol-version") == ["v5.channel.k8s.io", "v4.channel.k8s.io"]
    assert rawhttp.is_spdy_upgrade(raw.decode().lower())
    assert not rawhttp.is_spdy_upgrade("get / http/1.1\r\nupgrade: websocket\r\nx-spdy/3.1: 1")
    with pytest.raises(rawhttp.BadRequest):
        rawhttp.parse_head(b"GARBAGE\r\n")
    resp = rawhttp.response(403, "no\n", (("X-A", "1"),))
    assert resp.startswith(b"HTTP/1.1 403 Forbidden\r\nX-A: 1\r\n") and resp.endswith(b"\r\n\r\nno\n")


# ---------------------------------------------------------------------------------------------- stats (pure)


def test_summary_without_metrics_lists_every_pod_without_usage() -> None:
    import datetime as dt

    from vkbridge.kubeletapi.stats import build_summary

    start = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    pods = [
        {
            "metadata": {"name": "a", "namespace": "n", "uid": "u1"},
            "status": {"startTime": "2026-01-02T03:05:00Z"},
        },
        {
            "metadata": {
                "name": "b",
                "namespace": "m",
                "uid": "u2",
                "creationTimestamp": "2026-01-01T00:00:00Z",
            }
        },
    ]
    s = build_summary("vnode", start, pods, {}, start)
    assert s == {
        "node": {"nodeName": "vnode", "startTime": "2026-01-02T03:04:05Z"},
        "pods": [
            {"podRef": {"name": "a", "namespace": "n", "uid": "u1"}, "startTime": "2026-01-02T03:05:00Z",
             "containers": []},
            {"podRef": {"name": "b", "namespace": "m", "uid": "u2"}, "startTime": "2026-01-01T00:00:00Z",
             "containers": []},
        ],
    }  # fmt: skip


def test_summary_with_pod_metrics_fills_usage_and_sums() -> None:
    import datetime as dt

    from vkbridge.kubeletapi.stats import build_summary

    now = dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.UTC)
    pods = [
        {"metadata": {"name": "a", "namespace": "n", "uid": "u1"}},
        {"metadata": {"name": "b", "namespace": "n"}},
    ]
    pm = {
        "timestamp": "2026-01-02T03:04:00Z",
        "containers": [
            {"name": "c1", "usage": {"cpu": "250m", "memory": "64Mi"}},
            {"name": "c2", "usage": {"cpu": "1500000n", "memory": "1Ki"}},
        ],
    }
    s = build_summary("vnode", now, pods, {("n", "a"): pm}, now)
    a = s["pods"][0]
    assert a["containers"][0] == {
        "name": "c1",
        "cpu": {"time": "2026-01-02T03:04:00Z", "usageNanoCores": 250_000_000},
        "memory": {"time": "2026-01-02T03:04:00Z", "usageBytes": 64 << 20, "workingSetBytes": 64 << 20},
    }
    assert a["cpu"]["usageNanoCores"] == 251_500_000
    assert a["memory"]["usageBytes"] == (64 << 20) + 1024
    assert "cpu" not in s["pods"][1]
    assert s["node"]["cpu"] == {"time": "2026-01-02T03:04:05Z", "usageNanoCores": 251_500_000}
    assert s["node"]["memory"]["workingSetBytes"] == (64 << 20) + 1024
