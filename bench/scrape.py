"""Figures read from the processes under test: Prometheus text (API servers, the VK), the VK's log."""

from __future__ import annotations

import contextlib
import re

from e2e.controlplane import ControlPlane

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")


_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str, metric: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples of one metric: sorted label pairs -> value."""
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for line in text.splitlines():
        if not line.startswith(metric):
            continue
        m = _SAMPLE.match(line)
        if not m or m.group(1) != metric:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
        with contextlib.suppress(ValueError):
            out[labels] = float(m.group(3))
    return out


def apiserver_requests(plane: ControlPlane) -> dict[tuple[tuple[str, str], ...], float]:
    status, text = plane.api("GET", "/metrics", timeout=60)
    if status != 200 or not isinstance(text, str):
        raise RuntimeError(f"{plane.name} /metrics: {status}")
    return parse_prometheus(text, "apiserver_request_total")


def vk_metrics_text(port: int) -> str | None:
    """vkbridge's own /metrics, or None when nothing answers (the server may not be wired yet)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def histogram_from_text(text: str, name: str, label: str, value: str) -> dict[str, float]:
    """Cumulative buckets of one histogram series: le -> count, plus _count and _sum."""
    out: dict[str, float] = {}
    for labels, v in parse_prometheus(text, name + "_bucket").items():
        d = dict(labels)
        if d.get(label) == value:
            out[d["le"]] = v
    for suffix in ("_count", "_sum"):
        for labels, v in parse_prometheus(text, name + suffix).items():
            if dict(labels).get(label) == value:
                out[suffix] = v
    return out


def vk_counters(text: str) -> dict[str, float]:
    """vkbridge's counters and gauges (no histogram buckets), summed over labels except a few kept."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or line.startswith("#") or m.group(1).endswith(("_bucket", "_created")):
            continue
        if not m.group(1).startswith(("vkbridge_", "liqo_")):
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        keep = ",".join(f"{k}={labels[k]}" for k in ("cluster", "verb", "direction", "queue") if k in labels)
        key = m.group(1) + (f"{{{keep}}}" if keep else "")
        with contextlib.suppress(ValueError):
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


_VK_CREATED = re.compile(r"ShadowPod created pod=(\S+) .*?elapsed=([0-9.]+)(ms|s)")


def vk_log_outbound(log_text: str, namespace: str) -> list[float]:
    """vkbridge's own view of outbound latency (its first handle -> ShadowPod created), from its log."""
    out = []
    for m in _VK_CREATED.finditer(log_text):
        if m.group(1).startswith(namespace + "/"):
            v = float(m.group(2))
            out.append(v / 1000 if m.group(3) == "ms" else v)
    return out
