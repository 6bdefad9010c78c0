"""How results leave the bench: the targets, fixed-width tables, the progress line, the JSON file."""

from __future__ import annotations

import datetime as dt
import json
import time
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bench.measure import REPO, loadavg, machine_info

RESULTS_DIR = REPO / "bench" / "results"


# DESIGN §5, as numbers the scripts compare against.
TARGETS = {
    "burst_ratio_at_1000": 1.15,
    "latency_p99_ms": 100.0,
    "writes_per_pod": 3.0,
    "rss_mb_at_10000": 150.0,
}


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain fixed-width table (what the scripts print)."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def write_results(name: str, payload: Mapping[str, Any]) -> Path:
    """bench/results/<name>-<UTC timestamp>.json (the directory is git-ignored)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS_DIR / f"{name}-{stamp}.json"
    doc = {"benchmark": name, "finished_at": stamp, "machine": machine_info(), **payload}
    path.write_text(json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n")
    return path


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')} load {' '.join(map(str, loadavg()))}] {msg}", flush=True)


def _ms(v: float | None) -> str:
    return "-" if v is None else str(round(v))


def churn_line(
    outbound_p99_ms: float | None, inbound_p99_ms: float | None, rate: float, isolated: bool
) -> str:
    """The last line of `bench.churn`, one fixed shape to grep: p99s rounded to the millisecond."""
    return (
        f"churn p99 outbound {_ms(outbound_p99_ms)} ms inbound {_ms(inbound_p99_ms)} ms "
        f"at {rate:g}/s isolated={'yes' if isolated else 'no'}"
    )


def with_load(value: object, before: Sequence[float] | None, after: Sequence[float] | None) -> str:
    """A side-by-side cell: the figure and the 1-minute load average before -> after it was taken."""
    if value is None or value == "":
        return "-"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    b = "?" if not before else f"{before[0]:g}"
    a = "?" if not after else f"{after[0]:g}"
    return f"{_cell(value)} (load {b}->{a})"


def markdown(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A GitHub-flavoured markdown table (the side-by-side table bench/README.md keeps)."""
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def yes_no(v: bool) -> str:
    return "yes" if v else "no"
