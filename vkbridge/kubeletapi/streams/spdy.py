"""SPDY/3.1 framing: frames as values, an incremental decoder and an encoder (pure, no I/O).

Why our own: kube-apiserver speaks SPDY/3.1 to kubelets for exec/attach/port-forward (technotes §1) and
no usable Python implementation exists. Scope is what moby/spdystream (the Go peer) uses: every frame
type of the draft, zlib header compression with the SPDY/3 dictionary, one persistent zlib stream per
direction per connection. Flow control is framed but not enforced: spdystream neither sends nor honours
WINDOW_UPDATE, so enforcing windows would stall every stream after 64 KiB.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field
from enum import IntEnum
from typing import ClassVar, Final

from vkbridge.kubeletapi.streams.spdydict import SPDY3_DICTIONARY

__all__ = [
    "FLAG_FIN",
    "FLAG_UNIDIRECTIONAL",
    "MAX_FRAME_PAYLOAD",
    "MAX_SETTINGS",
    "VERSION",
    "Data",
    "Frame",
    "FrameDecoder",
    "FrameEncoder",
    "FrameType",
    "GoAway",
    "GoAwayStatus",
    "HeaderCompressor",
    "HeaderDecompressor",
    "Headers",
    "HeadersFrame",
    "Ping",
    "RstStatus",
    "RstStream",
    "Settings",
    "SpdyError",
    "SynReply",
    "SynStream",
    "WindowUpdate",
    "header_value",
]

VERSION: Final = 3
MAX_FRAME_PAYLOAD: Final = (1 << 24) - 1
FLAG_FIN: Final = 0x01
FLAG_UNIDIRECTIONAL: Final = 0x02
SETTINGS_FLAG_CLEAR: Final = 0x01
_STREAM_ID_MASK: Final = 0x7FFFFFFF
_MAX_HEADER_BLOCK: Final = 256 * 1024  # decompressed; spdystream's own limits are smaller
_MAX_HEADER_COUNT: Final = 1000
# SETTINGS ids SPDY/3.1 defines (1 upload bandwidth .. 8 client certificate vector size): more entries
# than that is a protocol error, told from the frame header, before its payload is buffered or decoded.
MAX_SETTINGS: Final = 8
# Control frames of a fixed length, checked from the header for the same reason.
_FIXED_LENGTH: Final = {3: 8, 6: 4, 7: 8, 9: 8}  # RST_STREAM, PING, GOAWAY, WINDOW_UPDATE

Headers = dict[str, list[str]]


class FrameType(IntEnum):
    SYN_STREAM = 1
    SYN_REPLY = 2
    RST_STREAM = 3
    SETTINGS = 4
    PING = 6
    GOAWAY = 7
    HEADERS = 8
    WINDOW_UPDATE = 9


class RstStatus(IntEnum):
    PROTOCOL_ERROR = 1
    INVALID_STREAM = 2
    REFUSED_STREAM = 3
    UNSUPPORTED_VERSION = 4
    CANCEL = 5
    INTERNAL_ERROR = 6
    FLOW_CONTROL_ERROR = 7
    STREAM_IN_USE = 8
    STREAM_ALREADY_CLOSED = 9
    FRAME_TOO_LARGE = 11


class GoAwayStatus(IntEnum):
    OK = 0
    PROTOCOL_ERROR = 1
    INTERNAL_ERROR = 2


class SpdyError(Exception):
    """The peer broke the framing; the connection cannot continue (send GOAWAY and close)."""


# ---------------------------------------------------------------------------------------------- frames


@dataclass(frozen=True)
class SynStream:
    stream_id: int
    headers: Headers = field(default_factory=dict)
    associated_id: int = 0
    priority: int = 0  # 0 (highest) .. 7
    slot: int = 0
    fin: bool = False
    unidirectional: bool = False


@dataclass(frozen=True)
class _StreamHeaders:
    """SYN_REPLY and HEADERS: the same payload (a stream id and a header block), told apart by type."""

    frame_type: ClassVar[FrameType]
    stream_id: int
    headers: Headers = field(default_factory=dict)
    fin: bool = False


@dataclass(frozen=True)
class SynReply(_StreamHeaders):
    frame_type: ClassVar[FrameType] = FrameType.SYN_REPLY


@dataclass(frozen=True)
class HeadersFrame(_StreamHeaders):
    frame_type: ClassVar[FrameType] = FrameType.HEADERS


@dataclass(frozen=True)
class RstStream:
    stream_id: int
    status: int


@dataclass(frozen=True)
class Settings:
    entries: tuple[tuple[int, int, int], ...] = ()  # (flags, id, value)
    clear: bool = False


@dataclass(frozen=True)
class Ping:
    ping_id: int


@dataclass(frozen=True)
class GoAway:
    last_good_stream_id: int
    status: int = GoAwayStatus.OK


@dataclass(frozen=True)
class WindowUpdate:
    stream_id: int
    delta: int


@dataclass(frozen=True)
class Data:
    stream_id: int
    data: bytes = b""
    fin: bool = False


Frame = SynStream | SynReply | RstStream | Settings | Ping | GoAway | HeadersFrame | WindowUpdate | Data


def header_value(headers: Headers, name: str) -> str | None:
    """First value of a header; names are lowercase on the wire, so the lookup lowercases too."""
    values = headers.get(name.lower())
    return values[0] if values else None


# ---------------------------------------------------------------------------------------------- headers


class HeaderCompressor:
    """Outgoing header blocks: one zlib stream per connection, flushed (SYNC) after every block."""

    def __init__(self) -> None:
        self._z = zlib.compressobj(9, zlib.DEFLATED, 15, 8, zlib.Z_DEFAULT_STRATEGY, zdict=SPDY3_DICTIONARY)

    def encode(self, headers: Headers) -> bytes:
        raw = bytearray(struct.pack(">I", len(headers)))
        for name, values in headers.items():
            n = name.lower().encode("latin-1")
            v = "\0".join(values).encode("latin-1")
            raw += struct.pack(">I", len(n)) + n + struct.pack(">I", len(v)) + v
        return self._z.compress(bytes(raw)) + self._z.flush(zlib.Z_SYNC_FLUSH)


class HeaderDecompressor:
    """Incoming header blocks: the peer's persistent zlib stream, inflated block by block."""

    def __init__(self, max_block: int = _MAX_HEADER_BLOCK) -> None:
        self._z = zlib.decompressobj(zdict=SPDY3_DICTIONARY)
        self._max = max_block

    def decode(self, block: bytes) -> Headers:
        try:
            raw = self._z.decompress(block, self._max)
        except zlib.error as exc:
            raise SpdyError(f"header block does not inflate: {exc}") from None
        if self._z.unconsumed_tail:
            raise SpdyError(f"header block inflates beyond {self._max} bytes")
        return _parse_header_block(raw)


def _parse_header_block(raw: bytes) -> Headers:
    if len(raw) < 4:
        raise SpdyError("header block shorter than its count")
    (count,) = struct.unpack_from(">I", raw)
    if count > _MAX_HEADER_COUNT:
        raise SpdyError(f"header block with {count} entries")
    off = 4
    out: Headers = {}
    for _ in range(count):
        name, off = _length_prefixed(raw, off)
        value, off = _length_prefixed(raw, off)
        key = name.decode("latin-1")
        if not key or key != key.lower():
            raise SpdyError(f"invalid header name {key!r}")
        if key in out:
            raise SpdyError(f"duplicate header {key!r}")
        out[key] = value.decode("latin-1").split("\0")
    if off != len(raw):
        raise SpdyError("trailing bytes after the header block")
    return out


def _length_prefixed(raw: bytes, off: int) -> tuple[bytes, int]:
    if off + 4 > len(raw):
        raise SpdyError("truncated header block")
    (n,) = struct.unpack_from(">I", raw, off)
    off += 4
    if off + n > len(raw):
        raise SpdyError("truncated header block")
    return raw[off : off + n], off + n


# ---------------------------------------------------------------------------------------------- encoding


def _control(ftype: FrameType, flags: int, payload: bytes) -> bytes:
    if len(payload) > MAX_FRAME_PAYLOAD:
        raise ValueError(f"{ftype.name} payload of {len(payload)} bytes exceeds the 24-bit length")
    return struct.pack(">HHI", 0x8000 | VERSION, ftype, (flags << 24) | len(payload)) + payload


def _sid(stream_id: int) -> int:
    if not 0 < stream_id <= _STREAM_ID_MASK:
        raise ValueError(f"stream id {stream_id} out of range")
    return stream_id


class FrameEncoder:
    """Serialises frames for one connection (owns the outgoing header compressor)."""

    def __init__(self) -> None:
        self._headers = HeaderCompressor()

    def encode(self, frame: Frame) -> bytes:
        if isinstance(frame, Data):
            if len(frame.data) > MAX_FRAME_PAYLOAD:
                raise ValueError("DATA payload exceeds the 24-bit length; split it")
            flags = FLAG_FIN if frame.fin else 0
            return struct.pack(">II", _sid(frame.stream_id), (flags << 24) | len(frame.data)) + frame.data
        if isinstance(frame, SynStream):
            flags = (FLAG_FIN if frame.fin else 0) | (FLAG_UNIDIRECTIONAL if frame.unidirectional else 0)
            head = struct.pack(
                ">IIBB",
                _sid(frame.stream_id),
                frame.associated_id & _STREAM_ID_MASK,
                (frame.priority & 0x7) << 5,
                frame.slot & 0xFF,
            )
            return _control(FrameType.SYN_STREAM, flags, head + self._headers.encode(frame.headers))
        if isinstance(frame, _StreamHeaders):
            payload = struct.pack(">I", _sid(frame.stream_id)) + self._headers.encode(frame.headers)
            return _control(frame.frame_type, FLAG_FIN if frame.fin else 0, payload)
        if isinstance(frame, RstStream):
            return _control(FrameType.RST_STREAM, 0, struct.pack(">II", _sid(frame.stream_id), frame.status))
        if isinstance(frame, Settings):
            entries = b"".join(
                struct.pack(">II", ((flags & 0xFF) << 24) | (sid & 0xFFFFFF), value)
                for flags, sid, value in frame.entries
            )
            payload = struct.pack(">I", len(frame.entries)) + entries
            return _control(FrameType.SETTINGS, SETTINGS_FLAG_CLEAR if frame.clear else 0, payload)
        if isinstance(frame, Ping):
            return _control(FrameType.PING, 0, struct.pack(">I", frame.ping_id & 0xFFFFFFFF))
        if isinstance(frame, GoAway):
            payload = struct.pack(">II", frame.last_good_stream_id & _STREAM_ID_MASK, frame.status)
            return _control(FrameType.GOAWAY, 0, payload)
        if isinstance(frame, WindowUpdate):
            payload = struct.pack(">II", frame.stream_id & _STREAM_ID_MASK, frame.delta & _STREAM_ID_MASK)
            return _control(FrameType.WINDOW_UPDATE, 0, payload)
        raise TypeError(f"not a SPDY frame: {frame!r}")


# ---------------------------------------------------------------------------------------------- decoding


class FrameDecoder:
    """Incremental parser: ``feed(bytes)`` returns the frames completed so far, in order.

    Owns the incoming header decompressor, so header blocks must be decoded in arrival order (which
    ``feed`` does). Unknown control frame types (NOOP, CREDENTIAL) are skipped as the draft requires.
    """

    def __init__(self, max_payload: int = MAX_FRAME_PAYLOAD) -> None:
        self._buf = bytearray()
        self._headers = HeaderDecompressor()
        self._max = max_payload

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        self._buf += data
        frames: list[Frame] = []
        off = 0
        buf = self._buf
        try:
            while len(buf) - off >= 8:
                w0, w1 = struct.unpack_from(">II", buf, off)
                length = w1 & 0xFFFFFF
                if length > self._max:
                    raise SpdyError(f"frame of {length} bytes exceeds the {self._max}-byte limit")
                if w0 & 0x80000000:
                    _check_control_length(w0 & 0xFFFF, length)
                if len(buf) - off < 8 + length:
                    break
                flags = w1 >> 24
                payload = bytes(buf[off + 8 : off + 8 + length])
                off += 8 + length
                if w0 & 0x80000000:
                    version = (w0 >> 16) & 0x7FFF
                    if version != VERSION:
                        raise SpdyError(f"unsupported SPDY version {version}")
                    frame = self._control(w0 & 0xFFFF, flags, payload)
                    if frame is not None:
                        frames.append(frame)
                else:
                    sid = w0 & _STREAM_ID_MASK
                    if sid == 0:
                        raise SpdyError("DATA frame on stream 0")
                    frames.append(Data(sid, payload, bool(flags & FLAG_FIN)))
        finally:
            del buf[:off]
        return frames

    def _control(self, ftype: int, flags: int, p: bytes) -> Frame | None:
        if ftype == FrameType.SYN_STREAM:
            _need(p, 10, "SYN_STREAM")
            sid, assoc, prio, slot = struct.unpack_from(">IIBB", p)
            return SynStream(
                _nonzero(sid & _STREAM_ID_MASK, "SYN_STREAM"),
                self._headers.decode(p[10:]),
                associated_id=assoc & _STREAM_ID_MASK,
                priority=prio >> 5,
                slot=slot,
                fin=bool(flags & FLAG_FIN),
                unidirectional=bool(flags & FLAG_UNIDIRECTIONAL),
            )
        if ftype in (FrameType.SYN_REPLY, FrameType.HEADERS):
            _need(p, 4, FrameType(ftype).name)
            sid = _nonzero(struct.unpack_from(">I", p)[0] & _STREAM_ID_MASK, FrameType(ftype).name)
            headers = self._headers.decode(p[4:])
            cls = SynReply if ftype == FrameType.SYN_REPLY else HeadersFrame
            return cls(sid, headers, fin=bool(flags & FLAG_FIN))
        if ftype == FrameType.RST_STREAM:
            _exact(p, 8, "RST_STREAM")
            sid, status = struct.unpack(">II", p)
            return RstStream(_nonzero(sid & _STREAM_ID_MASK, "RST_STREAM"), status)
        if ftype == FrameType.SETTINGS:
            _need(p, 4, "SETTINGS")
            (n,) = struct.unpack_from(">I", p)
            if n > MAX_SETTINGS or len(p) != 4 + 8 * n:
                raise SpdyError("SETTINGS length does not match its entry count")
            entries = []
            for i in range(n):
                fid, value = struct.unpack_from(">II", p, 4 + 8 * i)
                entries.append((fid >> 24, fid & 0xFFFFFF, value))
            return Settings(tuple(entries), clear=bool(flags & SETTINGS_FLAG_CLEAR))
        if ftype == FrameType.PING:
            _exact(p, 4, "PING")
            return Ping(struct.unpack(">I", p)[0])
        if ftype == FrameType.GOAWAY:
            _exact(p, 8, "GOAWAY")
            last, status = struct.unpack(">II", p)
            return GoAway(last & _STREAM_ID_MASK, status)
        if ftype == FrameType.WINDOW_UPDATE:
            _exact(p, 8, "WINDOW_UPDATE")
            sid, delta = struct.unpack(">II", p)
            return WindowUpdate(sid & _STREAM_ID_MASK, delta & _STREAM_ID_MASK)
        return None  # NOOP (5), CREDENTIAL (10), anything newer: ignored


def _check_control_length(ftype: int, length: int) -> None:
    """Refuse from the header a control frame longer than its type allows: waiting for its payload
    would buffer up to 16 MiB, and a SETTINGS frame of 2 million entries would stall the loop."""
    if ftype == FrameType.SETTINGS and length > 4 + 8 * MAX_SETTINGS:
        raise SpdyError(f"SETTINGS frame of {length} bytes: more than the {MAX_SETTINGS} entries SPDY has")
    if (fixed := _FIXED_LENGTH.get(ftype)) is not None and length != fixed:
        raise SpdyError(f"{FrameType(ftype).name} frame must be {fixed} bytes, got {length}")


def _need(p: bytes, n: int, what: str) -> None:
    if len(p) < n:
        raise SpdyError(f"{what} frame too short ({len(p)} bytes)")


def _exact(p: bytes, n: int, what: str) -> None:
    if len(p) != n:
        raise SpdyError(f"{what} frame must be {n} bytes, got {len(p)}")


def _nonzero(sid: int, what: str) -> int:
    if sid == 0:
        raise SpdyError(f"{what} on stream 0")
    return sid
