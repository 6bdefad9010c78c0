"""The fake kubelet's own SPDY/3.1 framer against vkbridge's (two independent readings of the draft)."""

from __future__ import annotations

from e2e.fakekubelet import spdy as fake
from e2e.fakekubelet.execspdy import parse_head, wanted_streams
from vkbridge.kubeletapi.streams import spdy as product


def test_fake_decoder_reads_client_streams_data_pings_and_resets_split_anywhere() -> None:
    enc = product.FrameEncoder()
    wire = b"".join(
        enc.encode(f)
        for f in (
            product.SynStream(1, {"streamtype": ["error"]}),
            product.SynStream(3, {"streamtype": ["stdin"], "port": ["0"]}),
            product.Settings(((0, 7, 65536),)),
            product.Data(3, b"hello\n"),
            product.Data(3, b"", fin=True),
            product.Ping(9),
            product.RstStream(1, product.RstStatus.CANCEL),
            product.GoAway(3),
        )
    )
    dec = fake.Decoder()
    frames = [f for i in range(0, len(wire), 5) for f in dec.feed(wire[i : i + 5])]
    assert [(f.kind, f.stream_id) for f in frames] == [(1, 1), (1, 3), (0, 3), (0, 3), (6, 0), (3, 1), (7, 3)]
    assert frames[0].headers == {"streamtype": "error"} and frames[1].headers == {
        "streamtype": "stdin",
        "port": "0",
    }
    assert (frames[2].data, frames[2].fin, frames[3].fin) == (b"hello\n", False, True)
    assert frames[4].value == 9 and frames[5].value == product.RstStatus.CANCEL


def test_fake_encoder_writes_what_a_spdystream_peer_reads() -> None:
    enc = fake.Encoder()
    wire = enc.syn_reply(1) + enc.syn_reply(3) + enc.data(3, b"x" * 70000) + enc.data(3, b"", fin=True)
    wire += enc.ping(4) + enc.goaway(3)
    frames = product.FrameDecoder().feed(wire)
    assert frames[:2] == [product.SynReply(1, {}), product.SynReply(3, {})]
    assert frames[2] == product.Data(3, b"x" * 70000) and frames[3] == product.Data(3, b"", fin=True)
    assert frames[4:] == [product.Ping(4), product.GoAway(3)]


def test_exec_request_head_and_the_streams_client_go_opens() -> None:
    head = parse_head(
        b"POST /exec/ns/p/c?command=sh&command=-c&command=echo%20hi&input=1&output=1&tty=1 HTTP/1.1\r\n"
        b"Upgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
        b"X-Stream-Protocol-Version: v3.channel.k8s.io, channel.k8s.io"
    )
    assert head.path == "/exec/ns/p/c" and head.query["command"] == ["sh", "-c", "echo hi"]
    assert head.protocols == ["v4.channel.k8s.io", "v3.channel.k8s.io", "channel.k8s.io"]
    assert wanted_streams(head.query, "v4.channel.k8s.io") == {"error", "stdin", "stdout", "resize"}
    assert wanted_streams(head.query, "v2.channel.k8s.io") == {"error", "stdin", "stdout"}
    assert wanted_streams({"output": ["1"], "error": ["1"]}, "v4.channel.k8s.io") == {
        "error",
        "stdout",
        "stderr",
    }
