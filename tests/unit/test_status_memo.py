"""The pod reflector's memory of its last status write (no I/O): a handle that runs before the consumer
watch brings our own write back must not write the same status again (bench.apicalls: 1.14 status
patches per pod without it)."""

from __future__ import annotations

from typing import Any

from reflectors.pods import PodInfo, already_written

RUNNING: dict[str, Any] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
PENDING: dict[str, Any] = {"phase": "Pending"}


def test_nothing_written_yet_means_not_written() -> None:
    assert not already_written(PodInfo(), "10", RUNNING)


def test_same_status_over_a_stale_cache_is_not_written_again() -> None:
    info = PodInfo(status_written=("10", dict(RUNNING)))
    assert already_written(info, "10", dict(RUNNING))
    assert info.status_written is not None  # kept until the cache shows the write


def test_a_different_status_over_a_stale_cache_is_written() -> None:
    info = PodInfo(status_written=("10", dict(PENDING)))
    assert not already_written(info, "10", RUNNING)


def test_the_memory_is_dropped_once_the_cache_moved_past_the_write() -> None:
    info = PodInfo(status_written=("10", dict(RUNNING)))
    assert not already_written(info, "11", RUNNING)  # judged against the cache again from now on
    assert info.status_written is None
