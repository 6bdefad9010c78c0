"""Just enough HTTP/1.1 for requests aiohttp cannot take: the SPDY/3.1 upgrade (technotes §1.7).

Parses one request head and writes a response head; everything after the head is SPDY. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus
from urllib.parse import parse_qsl, unquote, urlsplit

__all__ = ["BadRequest", "RequestHead", "is_spdy_upgrade", "parse_head", "response"]


class BadRequest(ValueError):
    pass


@dataclass(frozen=True)
class RequestHead:
    method: str
    target: str
    path: str  # percent-decoded
    query: tuple[tuple[str, str], ...]
    headers: tuple[tuple[str, str], ...]  # names lowercased, in order, repeats kept

    def header(self, name: str) -> str | None:
        name = name.lower()
        return next((v for k, v in self.headers if k == name), None)

    def header_all(self, name: str) -> list[str]:
        name = name.lower()
        return [v for k, v in self.headers if k == name]

    def param(self, name: str) -> str | None:
        return next((v for k, v in self.query if k == name), None)

    def params(self, name: str) -> list[str]:
        return [v for k, v in self.query if k == name]


def parse_head(raw: bytes) -> RequestHead:
    """A request line and headers (no trailing blank line needed); raises BadRequest."""
    try:
        text = raw.decode("latin-1")
    except UnicodeDecodeError:  # pragma: no cover - latin-1 decodes everything
        raise BadRequest("undecodable request head") from None
    lines = text.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest("malformed request line")
    method, target, _ = parts
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        if line[0] in " \t":
            raise BadRequest("obsolete header folding")
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise BadRequest("malformed header line")
        headers.append((name.lower(), value.strip()))
    split = urlsplit(target)
    if not split.path.startswith("/"):
        raise BadRequest("request target must be a path")
    return RequestHead(
        method=method.upper(),
        target=target,
        path=unquote(split.path),
        query=tuple(parse_qsl(split.query, keep_blank_values=True)),
        headers=tuple(headers),
    )


def is_spdy_upgrade(head_lower: str) -> bool:
    """True for a head (lowercased text) asking to switch to SPDY/3.1."""
    for line in head_lower.split("\r\n")[1:]:
        name, _, value = line.partition(":")
        if name.strip() == "upgrade" and "spdy/3.1" in value:
            return True
    return False


def response(status: int, body: str = "", headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A complete response that closes the connection (or a bare 101 head when status is 101)."""
    reason = HTTPStatus(status).phrase
    lines = [f"HTTP/1.1 {status} {reason}"]
    lines += [f"{k}: {v}" for k, v in headers]
    if status != 101:
        data = body.encode()
        lines += [
            "Content-Type: text/plain; charset=utf-8",
            "X-Content-Type-Options: nosniff",
            f"Content-Length: {len(data)}",
            "Connection: close",
        ]
        return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
