"""Remote-command stream conventions shared by the SPDY and WebSocket fronts (pure).

Protocol names and negotiation, the WebSocket channel framing (binary and base64), the exit Status
written on the error stream, and the exec/attach options the kube-apiserver puts in the kubelet URL
(``input``/``output``/``error``/``tty``, values "1"; technotes §1.3, §1.5, §1.6).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "B64_PROTOCOLS",
    "CLOSE",
    "ERROR",
    "PORTFORWARD",
    "RESIZE",
    "SPDY_PROTOCOLS",
    "STATUS_PROTOCOLS",
    "STDERR",
    "STDIN",
    "STDOUT",
    "V1",
    "V1_B64",
    "V2",
    "V3",
    "V4",
    "V4_B64",
    "V5",
    "WS_MAX_MESSAGE",
    "WS_PROTOCOLS",
    "ChannelError",
    "ResizeDecoder",
    "StreamOptions",
    "decode_ws",
    "encode_ws",
    "error_payload",
    "exit_code_of",
    "internal_error",
    "negotiate",
    "split_protocols",
    "success_status",
]

V5: Final = "v5.channel.k8s.io"
V4: Final = "v4.channel.k8s.io"
V3: Final = "v3.channel.k8s.io"
V2: Final = "v2.channel.k8s.io"
V1: Final = "channel.k8s.io"
V4_B64: Final = "v4.base64.channel.k8s.io"
V1_B64: Final = "base64.channel.k8s.io"
PORTFORWARD: Final = "portforward.k8s.io"

SPDY_PROTOCOLS: Final = (V5, V4, V3, V2, V1)
WS_PROTOCOLS: Final = (V5, V4, V4_B64, V1, V1_B64)
B64_PROTOCOLS: Final = frozenset({V4_B64, V1_B64})
STATUS_PROTOCOLS: Final = frozenset({V5, V4, V4_B64})  # a JSON Status on the error stream
_RESIZE_PROTOCOLS: Final = frozenset({V5, V4, V3, V4_B64})

STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE: Final = 255  # v5: [255, channel] half-closes a channel
#: The largest WebSocket message we take (client or pool): a message is held whole until it ends, so
#: without a limit one message could fill our memory. The kubelet's (x/net/websocket) limit: 32 MiB.
WS_MAX_MESSAGE: Final = 32 << 20


_SPACE: Final = re.compile(r"\s*")


class ChannelError(ValueError):
    """A malformed stream message or request option; the message is safe to show to the client."""


def split_protocols(values: Iterable[str]) -> list[str]:
    """Header values (possibly repeated, possibly comma-joined) as one ordered list."""
    return [p.strip() for v in values for p in v.split(",") if p.strip()]


def negotiate(client_values: Iterable[str], supported: Iterable[str]) -> str | None:
    """The first protocol the client offers that we support (httpstream.Handshake semantics)."""
    ours = set(supported)
    return next((p for p in split_protocols(client_values) if p in ours), None)


# ---------------------------------------------------------------------------------------------- options


def _flag(get: Callable[[str], str | None], *names: str) -> bool:
    return any((get(n) or "").lower() in ("1", "true") for n in names)


@dataclass(frozen=True)
class StreamOptions:
    """What the client asked for: the streams it will open and the command (exec only)."""

    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool
    command: tuple[str, ...] = ()

    @classmethod
    def from_query(
        cls, get: Callable[[str], str | None], getall: Callable[[str], list[str]], *, exec_: bool
    ) -> StreamOptions:
        """Kubelet names (input/output/error) and API names (stdin/stdout/stderr) are both accepted."""
        tty = _flag(get, "tty")
        opts = cls(
            stdin=_flag(get, "input", "stdin"),
            stdout=_flag(get, "output", "stdout"),
            stderr=_flag(get, "error", "stderr") and not tty,  # the kubelet drops stderr with a TTY
            tty=tty,
            command=tuple(getall("command")) if exec_ else (),
        )
        if not (opts.stdin or opts.stdout or opts.stderr):
            raise ChannelError("you must specify at least 1 of stdin, stdout, stderr")
        if exec_ and not opts.command:
            raise ChannelError("you must specify at least one command for the container")
        return opts

    def spdy_streams(self, protocol: str) -> frozenset[str]:
        """The stream types a SPDY client opens for these options (client-go v1-v5 createStreams)."""
        kinds = {"error"}
        if self.stdin:
            kinds.add("stdin")
        if self.stdout:
            kinds.add("stdout")
        if self.stderr:
            kinds.add("stderr")
        if self.tty and protocol in _RESIZE_PROTOCOLS:
            kinds.add("resize")
        return frozenset(kinds)

    def pool_params(self, container: str) -> list[tuple[str, str]]:
        """Query of the pool's ``pods/exec`` / ``pods/attach`` (API parameter names)."""
        params = [("container", container)]
        params += [("command", c) for c in self.command]
        for name, value in (("stdin", self.stdin), ("stdout", self.stdout), ("stderr", self.stderr)):
            params.append((name, "true" if value else "false"))
        params.append(("tty", "true" if self.tty else "false"))
        return params


# ---------------------------------------------------------------------------------------------- status


def success_status() -> dict[str, Any]:
    return {"metadata": {}, "status": "Success"}


def internal_error(message: str) -> dict[str, Any]:
    return {"metadata": {}, "status": "Failure", "message": message, "reason": "InternalError", "code": 500}


def exit_code_of(status: dict[str, Any]) -> int | None:
    """0 on Success, the ExitCode cause on NonZeroExitCode, else None (not a process exit)."""
    if status.get("status") == "Success":
        return 0
    if status.get("reason") != "NonZeroExitCode":
        return None
    for cause in (status.get("details") or {}).get("causes") or []:
        if isinstance(cause, dict) and cause.get("reason") == "ExitCode":
            try:
                return int(cause.get("message", ""))
            except ValueError:
                return None
    return None


def error_payload(protocol: str, status: dict[str, Any]) -> bytes | None:
    """What goes on the error stream: the Status (v4/v5), else plain text on failure only (v1-v3)."""
    if protocol in STATUS_PROTOCOLS:
        return json.dumps(status, separators=(",", ":")).encode()
    if status.get("status") == "Success":
        return None
    return str(status.get("message") or "error executing remote command").encode()


# ---------------------------------------------------------------------------------------------- websocket


def encode_ws(protocol: str, channel: int, data: bytes) -> bytes | str:
    """One WebSocket message: ``[channel] + data``, or ``chr('0' + channel) + base64`` for base64
    protocols (wsstream's ``string('0'+num)``: a digit for channels 0-9, then ``:``, ``;``... for the
    data/error channels of a port-forward's sixth port on)."""
    if protocol in B64_PROTOCOLS:
        return chr(ord("0") + channel) + base64.b64encode(data).decode("ascii")
    return bytes([channel]) + data


def decode_ws(protocol: str, message: bytes | str) -> tuple[int, bytes]:
    """(channel, payload); raises ChannelError for an empty or undecodable message."""
    if not message:
        raise ChannelError("empty stream message")
    if isinstance(message, str):
        if protocol not in B64_PROTOCOLS:
            return ord(message[0]), message[1:].encode()
        channel = ord(message[0]) - ord("0")  # wsstream: data[0] - '0'
        if not 0 <= channel <= 255:
            raise ChannelError("base64 stream message without a channel digit")
        try:
            return channel, base64.b64decode(message[1:], validate=True)
        except (binascii.Error, ValueError):
            raise ChannelError("stream message is not valid base64") from None
    return message[0], bytes(message[1:])


# ---------------------------------------------------------------------------------------------- resize


class ResizeDecoder:
    """Terminal sizes from a byte stream of concatenated JSON objects (the SPDY ``resize`` stream).

    Only the newest size of what one ``feed`` completes is returned: a terminal ends at its last size,
    and one 16 MiB frame of tiny objects must not become a million queued resizes.
    """

    _LIMIT = 64 * 1024

    def __init__(self) -> None:
        self._buf = ""
        self._decoder = json.JSONDecoder()

    def feed(self, data: bytes) -> list[dict[str, int]]:
        text = self._buf + data.decode("utf-8", "replace")
        pos, newest = 0, None
        while True:
            if (space := _SPACE.match(text, pos)) is not None:
                pos = space.end()
            if pos >= len(text):
                break
            try:
                obj, pos = self._decoder.raw_decode(text, pos)
            except json.JSONDecodeError:
                break  # incomplete: wait for more
            except (ValueError, RecursionError):  # a 5000-digit number, 5000 nested arrays: unparseable
                text, pos = "", 0  # and no telling where it ends; dropped, as a garbage buffer is
                break
            if isinstance(obj, dict) and (size := _terminal_size(obj)) is not None:
                newest = size
        self._buf = text[pos:]
        if len(self._buf) > self._LIMIT:
            self._buf = ""  # dropped, or every later frame would add to it
            raise ChannelError("resize stream is not JSON")
        return [] if newest is None else [newest]


def _terminal_size(obj: dict[str, Any]) -> dict[str, int] | None:
    """Width and Height within the kubelet's ``TerminalSize`` (uint16), else None: the size is skipped.

    ``1e400`` decodes to infinity, whose ``int`` raises OverflowError (NaN: ValueError).
    """
    try:
        width, height = int(obj.get("Width", 0)), int(obj.get("Height", 0))
    except (TypeError, ValueError, OverflowError):
        return None
    if not (0 <= width <= 0xFFFF and 0 <= height <= 0xFFFF):
        return None
    return {"Width": width, "Height": height}
