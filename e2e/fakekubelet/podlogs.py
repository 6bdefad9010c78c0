"""Container log files in the CRI format the kubelet reads: ``<RFC3339Nano> <stream> <P|F> <content>``.

Keeping a timestamp per record is what makes ``timestamps``, ``sinceSeconds`` and ``sinceTime`` work.
The query part is pure; ``ContainerLog`` owns one file per container attempt and wakes followers.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from pathlib import Path

from .timefmt import now_ns, parse_rfc3339_ns, rfc3339_nano

MAX_RECORD = 16 * 1024  # containerd splits longer lines into partial records


@dataclass(frozen=True)
class LogRecord:
    ts_ns: int
    stream: str
    partial: bool
    content: bytes

    def render(self, timestamps: bool) -> bytes:
        body = self.content if self.partial else self.content + b"\n"
        if timestamps:
            return rfc3339_nano(self.ts_ns).encode() + b" " + body
        return body


@dataclass(frozen=True)
class LogQuery:
    since_ns: int | None = None
    tail_lines: int | None = None
    limit_bytes: int | None = None
    timestamps: bool = False
    follow: bool = False
    previous: bool = False


def format_record(ts_ns: int, stream: str, content: bytes, partial: bool) -> bytes:
    return b"%s %s %s %s\n" % (
        rfc3339_nano(ts_ns).encode(),
        stream.encode(),
        b"P" if partial else b"F",
        content,
    )


def parse_record(line: bytes) -> LogRecord | None:
    """Parse one stored line (with or without its newline); None for a damaged line."""
    if line.endswith(b"\n"):
        line = line[:-1]
    parts = line.split(b" ", 3)
    if len(parts) < 3:
        return None
    try:
        ts = parse_rfc3339_ns(parts[0].decode())
    except (ValueError, UnicodeDecodeError):
        return None
    content = parts[3] if len(parts) == 4 else b""
    return LogRecord(ts, parts[1].decode(errors="replace"), parts[2] == b"P", content)


def parse_records(data: bytes) -> list[LogRecord]:
    out = []
    for line in data.splitlines():
        rec = parse_record(line)
        if rec is not None:
            out.append(rec)
    return out


def select(records: list[LogRecord], query: LogQuery) -> list[LogRecord]:
    """The kubelet order: tail first (counted in records), then drop records older than since."""
    if query.tail_lines is not None:
        records = records[-query.tail_lines :] if query.tail_lines > 0 else []
    if query.since_ns is not None:
        since = query.since_ns
        records = [r for r in records if r.ts_ns >= since]
    return records


class ByteBudget:
    """limitBytes across the whole response, follow included."""

    def __init__(self, limit: int | None) -> None:
        self.left = limit

    @property
    def exhausted(self) -> bool:
        return self.left is not None and self.left <= 0

    def take(self, chunk: bytes) -> bytes:
        if self.left is None:
            return chunk
        chunk = chunk[: max(self.left, 0)]
        self.left -= len(chunk)
        return chunk


def render(records: Iterable[LogRecord], query: LogQuery, budget: ByteBudget) -> bytes:
    out = bytearray()
    for rec in records:
        if budget.exhausted:
            break
        out += budget.take(rec.render(query.timestamps))
    return bytes(out)


def parse_query(params: dict[str, str], now: int | None = None) -> LogQuery:
    """Query parameters of GET /containerLogs (PodLogOptions); raises ValueError on bad input."""

    def flag(name: str) -> bool:
        return params.get(name, "false").lower() in ("true", "1", "yes")

    def num(name: str) -> int | None:
        raw = params.get(name)
        if raw is None or raw == "":
            return None
        value = int(raw)
        if value < 0:
            raise ValueError(f"{name} must not be negative")
        return value

    since_ns = None
    if params.get("sinceTime"):
        since_ns = parse_rfc3339_ns(params["sinceTime"])
    seconds = num("sinceSeconds")
    if seconds is not None:
        since_ns = (now if now is not None else now_ns()) - seconds * 1_000_000_000
    return LogQuery(
        since_ns=since_ns,
        tail_lines=num("tailLines"),
        limit_bytes=num("limitBytes"),
        timestamps=flag("timestamps"),
        follow=flag("follow"),
        previous=flag("previous"),
    )


class _Splitter:
    """Cuts a byte stream into records: full lines, with over-long pieces as partials."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[tuple[bytes, bool]]:
        self._buf += data
        out: list[tuple[bytes, bool]] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                break
            line = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            while len(line) > MAX_RECORD:
                out.append((line[:MAX_RECORD], True))
                line = line[MAX_RECORD:]
            out.append((line, False))
        while len(self._buf) > MAX_RECORD:
            out.append((bytes(self._buf[:MAX_RECORD]), True))
            del self._buf[:MAX_RECORD]
        return out

    def flush(self) -> list[tuple[bytes, bool]]:
        if not self._buf:
            return []
        line = bytes(self._buf)
        self._buf.clear()
        return [(line, False)]


class ContainerLog:
    """One container attempt's log file; writers append, followers wait for more or for the end."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._splitters: dict[str, _Splitter] = {}
        self._changed = asyncio.Event()
        self.closed = False

    def write(self, stream: str, data: bytes) -> None:
        splitter = self._splitters.setdefault(stream, _Splitter())
        self._emit(stream, splitter.feed(data))

    def _emit(self, stream: str, pieces: list[tuple[bytes, bool]]) -> None:
        if not pieces or self._fd is None:
            return
        ts = now_ns()
        os.write(self._fd, b"".join(format_record(ts, stream, c, p) for c, p in pieces))
        self._wake()

    def _wake(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    def close(self) -> None:
        """The attempt ended: flush unterminated lines and release followers at end of file."""
        if self.closed:
            return
        for stream, splitter in self._splitters.items():
            self._emit(stream, splitter.flush())
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self.closed = True
        self._wake()

    async def read(self, query: LogQuery) -> AsyncIterator[bytes]:
        """Yield the selected output, then (follow) new records until the attempt ends."""
        budget = ByteBudget(query.limit_bytes)
        data = await asyncio.to_thread(_read_from, self.path, 0)
        whole = data.rfind(b"\n") + 1  # never parse a half-written record
        offset = whole
        chunk = render(select(parse_records(data[:whole]), query), query, budget)
        if chunk:
            yield chunk
        if not query.follow:
            return
        since = query.since_ns
        while not budget.exhausted:
            changed = self._changed
            closed = self.closed
            data = await asyncio.to_thread(_read_from, self.path, offset)
            whole = data.rfind(b"\n") + 1
            if whole:
                offset += whole
                recs = parse_records(data[:whole])
                if since is not None:
                    recs = [r for r in recs if r.ts_ns >= since]
                chunk = render(recs, query, budget)
                if chunk:
                    yield chunk
                continue
            if closed:
                return
            await changed.wait()


def _read_from(path: Path, offset: int) -> bytes:
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            return fh.read()
    except FileNotFoundError:
        return b""
