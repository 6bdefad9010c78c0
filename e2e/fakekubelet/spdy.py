"""Just enough SPDY/3.1 for a kubelet's side of exec: the frames client-go's spdystream sends and expects.

Written for the fake kubelet on its own (e2e must not import product code). The client opens every
stream (SYN_STREAM with a ``streamtype`` header); we answer each with an empty SYN_REPLY, send DATA,
echo PINGs and end with GOAWAY. Header blocks are zlib streams (one per direction per connection)
primed with the SPDY/3 dictionary. SETTINGS, WINDOW_UPDATE and HEADERS are read and ignored, as
spdystream does for flow control.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass

VERSION = 3
SYN_STREAM, SYN_REPLY, RST_STREAM, PING, GOAWAY = 1, 2, 3, 6, 7
FLAG_FIN = 0x01
MAX_PAYLOAD = 1 << 20  # ours; spdystream's frames are far smaller

# The SPDY/3 header dictionary (draft-mbelshe-httpbis-spdy-00 2.6.10.1), as in moby/spdystream.
_DICTIONARY = (
    b"\x00\x00\x00\x07options\x00\x00\x00\x04head\x00\x00\x00\x04post\x00\x00\x00\x03put\x00\x00"
    b"\x00\x06delete\x00\x00\x00\x05trace\x00\x00\x00\x06accept\x00\x00\x00\x0eaccept-charset\x00"
    b"\x00\x00\x0faccept-encoding\x00\x00\x00\x0faccept-language\x00\x00\x00\raccept-ranges\x00\x00"
    b"\x00\x03age\x00\x00\x00\x05allow\x00\x00\x00\rauthorization\x00\x00\x00\rcache-control\x00\x00"
    b"\x00\nconnection\x00\x00\x00\x0ccontent-base\x00\x00\x00\x10content-encoding\x00\x00\x00\x10cont"
    b"ent-language\x00\x00\x00\x0econtent-length\x00\x00\x00\x10content-location\x00\x00\x00\x0bconten"
    b"t-md5\x00\x00\x00\rcontent-range\x00\x00\x00\x0ccontent-type\x00\x00\x00\x04date\x00\x00\x00\x04"
    b"etag\x00\x00\x00\x06expect\x00\x00\x00\x07expires\x00\x00\x00\x04from\x00\x00\x00\x04host\x00"
    b"\x00\x00\x08if-match\x00\x00\x00\x11if-modified-since\x00\x00\x00\rif-none-match\x00\x00\x00\x08i"
    b"f-range\x00\x00\x00\x13if-unmodified-since\x00\x00\x00\rlast-modified\x00\x00\x00\x08location\x00"
    b"\x00\x00\x0cmax-forwards\x00\x00\x00\x06pragma\x00\x00\x00\x12proxy-authenticate\x00\x00\x00\x13p"
    b"roxy-authorization\x00\x00\x00\x05range\x00\x00\x00\x07referer\x00\x00\x00\x0bretry-after\x00"
    b"\x00\x00\x06server\x00\x00\x00\x02te\x00\x00\x00\x07trailer\x00\x00\x00\x11transfer-encoding\x00"
    b"\x00\x00\x07upgrade\x00\x00\x00\nuser-agent\x00\x00\x00\x04vary\x00\x00\x00\x03via\x00\x00\x00"
    b"\x07warning\x00\x00\x00\x10www-authenticate\x00\x00\x00\x06method\x00\x00\x00\x03get\x00\x00\x00"
    b"\x06status\x00\x00\x00\x06200 OK\x00\x00\x00\x07version\x00\x00\x00\x08HTTP/1.1\x00\x00\x00\x03ur"
    b"l\x00\x00\x00\x06public\x00\x00\x00\nset-cookie\x00\x00\x00\nkeep-alive\x00\x00\x00\x06origin100"
    b"101201202205206300302303304305306307402405406407408409410411"
    b"412413414415416417502504505203 Non-Authoritative Information"
    b"204 No Content301 Moved Permanently400 Bad Request401 Unauth"
    b"orized403 Forbidden404 Not Found500 Internal Server Error501"
    b" Not Implemented503 Service UnavailableJan Feb Mar Apr May J"
    b"un Jul Aug Sept Oct Nov Dec 00:00:00 Mon, Tue, Wed, Thu, Fri"
    b", Sat, Sun, GMTchunked,text/html,image/png,image/jpg,image/g"
    b"if,application/xml,application/xhtml+xml,text/plain,text/jav"
    b"ascript,publicprivatemax-age=gzip,deflate,sdchcharset=utf-8c"
    b"harset=iso-8859-1,utf-,*,enq=0."
)
assert zlib.adler32(_DICTIONARY) == 0xE3C6A7C2, "SPDY/3 dictionary corrupted"


class SpdyError(Exception):
    """The peer broke the framing: the connection cannot go on."""


@dataclass(frozen=True)
class Frame:
    """A decoded frame: ``kind`` is a control type, or 0 for DATA."""

    kind: int
    stream_id: int = 0
    flags: int = 0
    headers: dict[str, str] | None = None
    data: bytes = b""
    value: int = 0  # PING id, RST_STREAM / GOAWAY status

    @property
    def fin(self) -> bool:
        return bool(self.flags & FLAG_FIN)


class Decoder:
    """Incremental: ``feed(bytes)`` returns the frames completed so far (unknown control types skipped)."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._z = zlib.decompressobj(zdict=_DICTIONARY)

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        while len(self._buf) >= 8:
            w0, w1 = struct.unpack_from(">II", self._buf)
            length, flags = w1 & 0xFFFFFF, w1 >> 24
            if length > MAX_PAYLOAD:
                raise SpdyError(f"frame of {length} bytes")
            if len(self._buf) < 8 + length:
                break
            payload = bytes(self._buf[8 : 8 + length])
            del self._buf[: 8 + length]
            if not w0 & 0x80000000:
                frames.append(Frame(0, w0 & 0x7FFFFFFF, flags, data=payload))
            elif (w0 >> 16) & 0x7FFF != VERSION:
                raise SpdyError(f"SPDY version {(w0 >> 16) & 0x7FFF}")
            elif (frame := self._control(w0 & 0xFFFF, flags, payload)) is not None:
                frames.append(frame)
        return frames

    def _control(self, kind: int, flags: int, p: bytes) -> Frame | None:
        if kind == SYN_STREAM:
            if len(p) < 10:
                raise SpdyError("short SYN_STREAM")
            return Frame(kind, _u31(p), flags, headers=self._headers(p[10:]))
        if kind in (RST_STREAM, GOAWAY) and len(p) == 8:
            return Frame(kind, _u31(p), flags, value=struct.unpack_from(">I", p, 4)[0])
        if kind == PING and len(p) == 4:
            return Frame(kind, 0, flags, value=struct.unpack(">I", p)[0])
        if kind in (SYN_REPLY, 8):  # the client's SYN_REPLY/HEADERS: inflate to keep the zlib stream in step
            self._headers(p[4:])
        return None

    def _headers(self, block: bytes) -> dict[str, str]:
        try:
            raw = self._z.decompress(block)
        except zlib.error as exc:
            raise SpdyError(f"header block: {exc}") from None
        (count,), off, out = struct.unpack_from(">I", raw), 4, {}
        for _ in range(count):
            (n,) = struct.unpack_from(">I", raw, off)
            name = raw[off + 4 : off + 4 + n].decode("latin-1")
            off += 4 + n
            (n,) = struct.unpack_from(">I", raw, off)
            out[name] = raw[off + 4 : off + 4 + n].decode("latin-1")
            off += 4 + n
        return out


class Encoder:
    """The frames a kubelet sends; owns the outgoing header compressor."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=_DICTIONARY)

    def syn_reply(self, stream_id: int) -> bytes:
        block = self._z.compress(struct.pack(">I", 0)) + self._z.flush(zlib.Z_SYNC_FLUSH)
        return _control(SYN_REPLY, 0, struct.pack(">I", stream_id) + block)

    @staticmethod
    def data(stream_id: int, data: bytes, fin: bool = False) -> bytes:
        flags = FLAG_FIN if fin else 0
        return struct.pack(">II", stream_id, (flags << 24) | len(data)) + data

    @staticmethod
    def ping(ping_id: int) -> bytes:
        return _control(PING, 0, struct.pack(">I", ping_id))

    @staticmethod
    def goaway(last_stream_id: int) -> bytes:
        return _control(GOAWAY, 0, struct.pack(">II", last_stream_id, 0))


def _control(kind: int, flags: int, payload: bytes) -> bytes:
    return struct.pack(">HHI", 0x8000 | VERSION, kind, (flags << 24) | len(payload)) + payload


def _u31(p: bytes) -> int:
    return int(struct.unpack_from(">I", p)[0]) & 0x7FFFFFFF
