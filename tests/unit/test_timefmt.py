"""reflectors.forge.timefmt: the tree's one RFC 3339 formatter, byte for byte what the API server writes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from reflectors.forge.timefmt import rfc3339, rfc3339_micro

PLUS_TWO = timezone(timedelta(hours=2))


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        pytest.param(
            datetime(2026, 11, 29, 10, 0, 5, 999999, tzinfo=UTC), "2026-11-29T10:00:05Z", id="utc-truncated"
        ),
        pytest.param(
            datetime(2026, 11, 29, 12, 0, 0, tzinfo=PLUS_TWO),
            "2026-11-29T10:00:00Z",
            id="offset-converted-to-utc",
        ),
        pytest.param(datetime(2026, 11, 29, 10, 0, 0), "2026-11-29T10:00:00Z", id="naive-taken-as-utc"),
    ],
)
def test_rfc3339(now: datetime, expected: str) -> None:
    assert rfc3339(now) == expected


@pytest.mark.parametrize(
    ("now", "expected"),
    [
        pytest.param(
            datetime(2024, 1, 2, 3, 4, 5, tzinfo=UTC), "2024-01-02T03:04:05.000000Z", id="six-zeros"
        ),
        pytest.param(
            datetime(2024, 1, 2, 5, 4, 5, 120, tzinfo=PLUS_TWO),
            "2024-01-02T03:04:05.000120Z",
            id="offset-padded",
        ),
        pytest.param(datetime(2024, 1, 2, 3, 4, 5, 999999), "2024-01-02T03:04:05.999999Z", id="naive-as-utc"),
    ],
)
def test_rfc3339_micro(now: datetime, expected: str) -> None:
    assert rfc3339_micro(now) == expected


def test_micro_and_seconds_agree_up_to_the_fraction() -> None:
    now = datetime(2026, 12, 1, 16, 0, 59, 654321, tzinfo=UTC)
    assert rfc3339_micro(now)[:19] + "Z" == rfc3339(now)
    assert datetime.fromisoformat(rfc3339_micro(now)) == now
