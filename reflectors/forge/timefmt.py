"""RFC 3339 times as the API server writes them: ``metav1.Time`` (seconds) and ``MicroTime`` (microseconds).

The tree's one formatter. It lives in the forge, the lowest layer, because the forge may import nothing
from vkbridge; vkbridge's modules import it from here. Pure: the time is passed in, never read here.
A naive datetime is taken as UTC.
"""

from __future__ import annotations

from datetime import UTC, datetime

__all__ = ["rfc3339", "rfc3339_micro"]


def _utc(t: datetime) -> datetime:
    return (t.replace(tzinfo=UTC) if t.tzinfo is None else t).astimezone(UTC)


def rfc3339(t: datetime) -> str:
    """``metav1.Time``: UTC, whole seconds (the fraction is dropped, not rounded), ``Z``."""
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%SZ")


def rfc3339_micro(t: datetime) -> str:
    """``metav1.MicroTime`` as the API server parses it: always six fractional digits, ``Z``."""
    return _utc(t).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
