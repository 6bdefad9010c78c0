"""Kubernetes time formats: metav1.Time (seconds), MicroTime (Lease renewTime) and RFC3339Nano (logs)."""

from __future__ import annotations

import re
import time
from datetime import UTC, datetime

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?(Z|z|[+-]\d{2}:\d{2})$"
)


def now_ns() -> int:
    return time.time_ns()


def iso_seconds(ns: int | None = None) -> str:
    """metav1.Time: the API rejects nothing here, but it truncates to seconds, so send seconds."""
    ns = now_ns() if ns is None else ns
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ns // 1_000_000_000))


def micro_time(dt: datetime | None = None) -> str:
    """MicroTime needs exactly six fraction digits and a Z (technotes section 4)."""
    dt = dt or datetime.now(UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def rfc3339_nano(ns: int) -> str:
    """The CRI log timestamp: nine fraction digits, as kubectl logs --timestamps prints it."""
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


def parse_rfc3339_ns(text: str) -> int:
    """Parse RFC3339 with an optional fraction (up to nanoseconds) into Unix nanoseconds."""
    m = _RFC3339.match(text.strip())
    if not m:
        raise ValueError(f"not an RFC3339 time: {text!r}")
    year, month, day, hour, minute, sec, frac, zone = m.groups()
    base = datetime(int(year), int(month), int(day), int(hour), int(minute), int(sec), tzinfo=UTC)
    secs = int(base.timestamp())
    if zone not in ("Z", "z"):
        sign = 1 if zone[0] == "+" else -1
        secs -= sign * (int(zone[1:3]) * 3600 + int(zone[4:6]) * 60)
    nanos = int((frac or "").ljust(9, "0")) if frac else 0
    return secs * 1_000_000_000 + nanos
