"""What the bench measures on processes and the machine: load, CPU and run-queue time, RSS, percentiles.

All read from /proc of processes the bench started; nothing here talks to an API server.
"""

from __future__ import annotations

import contextlib
import math
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def loadavg() -> list[float]:
    """`uptime`'s three load averages: other engineers' tests share this machine."""
    return [round(x, 2) for x in os.getloadavg()]


def machine_info() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": loadavg(),
        "hostname": platform.node(),
        "git": git_state(),
        "tree": str(REPO),
        "label": os.environ.get("VKBRIDGE_BENCH_LABEL", ""),
    }


def git_state() -> dict[str, Any]:
    """The commit measured, and whether product code had uncommitted changes (it is run from the tree)."""

    def git(*args: str) -> str:
        res = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return res.stdout.strip()

    dirty = git("status", "--porcelain", "--", "vkbridge", "reflectors").splitlines()
    return {"head": git("rev-parse", "--short", "HEAD"), "product_files_changed": len(dirty)}


_CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process from /proc/<pid>/stat (0 when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK  # fields 14 and 15 of proc(5)


def sched_seconds(pid: int) -> tuple[float, float, int]:
    """(on-CPU s, waiting-for-a-CPU s, times scheduled) summed over a process's threads, from schedstat.

    The second number is how long the process was runnable but not running: on a shared 2-core machine
    it shows how much of a latency is the machine's, not the code's (divided by the third: the average
    wait each time it was scheduled).
    """
    run = wait = slices = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0, 0.0, 0
    for t in tasks:
        try:
            fields = (t / "schedstat").read_text().split()
        except OSError:
            continue
        run += int(fields[0])
        wait += int(fields[1])
        slices += int(fields[2])
    return run / 1e9, wait / 1e9, slices


def proc_status_kb(pid: int, key: str) -> int:
    """A VmRSS/VmHWM-style line of /proc/<pid>/status, in KiB (0 when gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def mb(n_bytes: float) -> float:
    return round(n_bytes / 2**20, 1)


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def distribution_ms(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """count, p50/p90/p99/max and mean of latencies given in seconds, in milliseconds."""

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 1)

    return {
        "count": len(seconds),
        "p50_ms": ms(percentile(seconds, 50)),
        "p90_ms": ms(percentile(seconds, 90)),
        "p99_ms": ms(percentile(seconds, 99)),
        "max_ms": ms(max(seconds) if seconds else None),
        "mean_ms": ms(sum(seconds) / len(seconds) if seconds else None),
    }


def timeline(times: Sequence[float], t0: float, n: int) -> dict[str, float | None]:
    """Seconds from ``t0`` (the first create) until 50/90/99/100% of ``n`` pods were first seen Running,
    from their first-seen times in order; None for a share never reached."""

    def at(frac: float) -> float | None:
        k = max(1, round(frac * n))
        return round(times[k - 1] - t0, 2) if len(times) >= k else None

    return {"t50_s": at(0.5), "t90_s": at(0.9), "t99_s": at(0.99), "t100_s": at(1.0)}


def cpu_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before.get(k, 0.0), 2) for k in after}


def sched_delta(
    before: Mapping[str, tuple[float, float, int]], after: Mapping[str, tuple[float, float, int]]
) -> dict[str, dict[str, float]]:
    """Per process: seconds on a CPU, seconds runnable but waiting for one, mean wait per scheduling."""
    out = {}
    for k, (run, wait, slices) in after.items():
        r0, w0, s0 = before.get(k, (0.0, 0.0, 0))
        out[k] = {
            "on_cpu_s": round(run - r0, 2),
            "runqueue_wait_s": round(wait - w0, 2),
            "mean_wait_ms": round((wait - w0) / max(1, slices - s0) * 1000, 2),
        }
    return out
