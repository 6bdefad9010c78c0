"""vkbridge's own registry carries what operators expect of any Kubernetes component's /metrics."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from prometheus_client import generate_latest

from vkbridge import __version__
from vkbridge.metrics import REVISION_ENV, Metrics, seconds_until


def test_registry_has_process_and_platform_collectors() -> None:
    m = Metrics()
    rss = m.registry.get_sample_value("process_resident_memory_bytes")
    assert rss is not None and rss > 1_000_000
    assert m.registry.get_sample_value("process_start_time_seconds")
    assert m.registry.get_sample_value("process_open_fds")
    text = generate_latest(m.registry).decode()
    assert "python_info{" in text and "python_gc_objects_collected_total" in text


def test_two_instances_do_not_collide() -> None:
    a, b = Metrics(), Metrics()
    assert a.registry.get_sample_value("process_open_fds") is not None
    assert b.registry.get_sample_value("process_open_fds") is not None


def test_build_info_names_version_and_revision(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(REVISION_ENV, "abc123")
    m = Metrics()
    samples = [s for f in m.registry.collect() if f.name == "vkbridge_build_info" for s in f.samples]
    assert len(samples) == 1 and samples[0].value == 1
    assert samples[0].labels["version"] == __version__ and samples[0].labels["revision"] == "abc123"
    monkeypatch.delenv(REVISION_ENV)
    again = Metrics().registry.get_sample_value(
        "vkbridge_build_info",
        {
            "version": __version__,
            "revision": "unknown",
            "python_version": samples[0].labels["python_version"],
        },
    )
    assert again == 1


def test_serving_certificate_expiry_gauge() -> None:
    m = Metrics()
    assert math.isnan(m.registry.get_sample_value("vkbridge_serving_certificate_expiry_seconds") or 0)
    not_after = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    m.serving_cert_expiry_seconds.set_function(lambda: seconds_until(not_after))
    left = m.registry.get_sample_value("vkbridge_serving_certificate_expiry_seconds")
    assert left is not None and 7190 < left <= 7200


def test_seconds_until() -> None:
    now = dt.datetime(2026, 12, 1, tzinfo=dt.UTC)
    assert seconds_until(now + dt.timedelta(minutes=1), now) == 60
    assert seconds_until(now - dt.timedelta(seconds=5), now) == -5
    assert math.isnan(seconds_until(None, now))
