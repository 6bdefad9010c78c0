"""What a Kubernetes API call can fail with, and how a failure is told apart.

Every failure is an ``ApiError``. ``TransportError`` (status 0) is the subclass for "no HTTP answer"
(connect refused, TLS failure, reset, timeout); ``WatchExpired`` (410) means "re-list". Callers test the
type (or the properties), never ``status == 0``. Bodies and auth headers are never put in a message.
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

import aiohttp
import orjson

__all__ = [
    "ApiError",
    "StreamEnded",
    "TransportError",
    "WatchExpired",
    "error_from",
    "is_transport_failure",
    "transport_error",
    "watch_event",
]

Obj = dict[str, Any]


class ApiError(Exception):
    """A non-2xx answer (``status`` > 0), or a transport failure (``TransportError``, status 0)."""

    def __init__(
        self,
        status: int,
        reason: str,
        message: str,
        body: Obj | None = None,
        *,
        retry_after: float | None = None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.message = message
        self.body: Obj = body if body is not None else {}
        self.retry_after = retry_after
        super().__init__(f"{status} {reason}: {message[:300]}")

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason != "AlreadyExists"

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def unauthorized(self) -> bool:
        """401 or 403: the credential was revoked, expired, or lacks RBAC."""
        return self.status in (401, 403)

    @property
    def is_transient(self) -> bool:
        return self.status == 429 or self.status >= 500


class TransportError(ApiError):
    """No HTTP answer: connection refused/reset, TLS failure, timeout, session closed by a swap."""

    def __init__(self, message: str, *, transient: bool = True, abandoned: bool = False) -> None:
        super().__init__(0, "TransportError", message)
        self._transient = transient
        self.abandoned = abandoned  # ended by us (KubeClient.abandon_inflight), not by the network

    def __str__(self) -> str:
        return f"transport error: {self.message[:300]}"

    @property
    def is_transient(self) -> bool:
        return self._transient


class WatchExpired(ApiError):
    """The watch's resourceVersion is too old (410 Gone/Expired): re-list, then watch again."""

    def __init__(self, message: str, body: Obj | None = None) -> None:
        super().__init__(410, "Expired", message, body)


class StreamEnded(aiohttp.ClientConnectionError):
    """We ended a live stream ourselves (credential swap, server lost): aiohttp would leave its reader
    waiting on a closed or dead connection."""


def error_from(status: int, http_reason: str, raw: bytes, retry_after: str | None) -> ApiError:
    """The error for a non-2xx answer: the API's ``Status`` when the body is one, else its first bytes."""
    body: Obj = {}
    try:
        parsed = json.loads(raw) if raw else {}
        if isinstance(parsed, dict):
            body = parsed
    except ValueError:
        pass
    if body.get("kind") == "Status":
        reason = str(body.get("reason") or http_reason or "")
        message = str(body.get("message") or "")
    else:
        reason = http_reason or ""
        message = raw[:300].decode("utf-8", "replace").strip()
    ra: float | None = None
    if retry_after:
        with contextlib.suppress(ValueError):
            ra = float(retry_after)
    if status == 410:
        return WatchExpired(message or reason, body)
    return ApiError(status, reason, message, body, retry_after=ra)


def is_transport_failure(exc: BaseException) -> bool:
    """What the network (or a session we closed) did to a request, as opposed to a bug: aiohttp's errors,
    timeouts, OS errors, and the bare ``RuntimeError("Connection closed.")`` aiohttp raises when a body
    is read after its session closed the connection."""
    if isinstance(exc, RuntimeError):
        return "Connection closed" in str(exc)
    return isinstance(exc, aiohttp.ClientError | TimeoutError | OSError)


def transport_error(
    method: str, path: str, exc: BaseException, abandoned: str | None = None
) -> TransportError:
    """``exc`` as a ``TransportError``; ``abandoned`` is the reason we ended the request ourselves."""
    if abandoned is not None:
        return TransportError(f"{method} {path}: abandoned: {abandoned}"[:500], abandoned=True)
    if isinstance(exc, StreamEnded):
        return TransportError(f"{method} {path}: ended: {exc}"[:500], abandoned=True)
    fatal = isinstance(exc, aiohttp.ClientConnectorCertificateError | aiohttp.ClientSSLError)
    detail = str(exc) or type(exc).__name__
    return TransportError(f"{method} {path}: {type(exc).__name__}: {detail}"[:500], transient=not fatal)


def watch_event(line: bytes) -> Obj:
    """One watch stream line as an event; an ERROR event raises the error it carries."""
    try:
        ev = orjson.loads(line)
    except ValueError:
        raise TransportError("watch stream: malformed event line") from None
    if not isinstance(ev, dict) or not isinstance(ev.get("object"), dict):
        raise TransportError("watch stream: event without an object")
    if ev.get("type") == "ERROR":
        status = ev["object"]
        code = int(status.get("code") or 0)
        message = str(status.get("message") or "")
        if code == 410 or status.get("reason") in ("Expired", "Gone"):
            raise WatchExpired(message or "resourceVersion too old", status)
        raise ApiError(code or 500, str(status.get("reason") or "WatchError"), message, status)
    return ev
