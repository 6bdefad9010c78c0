"""py-spy profiles of the implementation under test, and their top frames."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from e2e.procs import end_process


class PySpy:
    """`py-spy record` of one pid into raw collapsed stacks (plus a speedscope file when asked)."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("py-spy") is not None

    def start(self) -> PySpy:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        argv = ["py-spy", "record", "--pid", str(self.pid), "--rate", str(self.rate), "--nonblocking"]
        argv += ["--format", "raw", "--output", str(self.out)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=(self.out.with_suffix(".err")).open("wb")
        )
        return self

    def stop(self) -> Path | None:
        if self.proc is None:
            return None
        end_process(self.proc, 60, signal.SIGINT)  # SIGINT: py-spy writes its profile and exits
        return self.out if self.out.exists() else None


def profile_of(spy: PySpy | None, n: int = 25) -> dict[str, Any] | None:
    """Stop the profiler, when one runs, and summarize what it recorded: its file and top ``n`` frames
    (None without a profiler or a profile)."""
    raw = spy.stop() if spy is not None else None
    return {"file": str(raw), **top_frames(raw, n)} if raw is not None else None


def top_frames(collapsed: Path, n: int = 20, repo_only: bool = False) -> dict[str, list[tuple[str, float]]]:
    """Self and inclusive sample shares per frame ("function (file:line)") from collapsed stacks."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        total += count
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        frames = [re.sub(r":\d+\)$", ")", f) for f in frames]  # per function, not per line
        if not frames:
            continue
        own[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    if total == 0:
        return {"self": [], "inclusive": [], "samples": []}

    def keep(f: str) -> bool:
        return not repo_only or "vkbridge/" in f or "reflectors/" in f

    def share(c: Counter[str]) -> list[tuple[str, float]]:
        return [(f, round(100 * v / total, 1)) for f, v in c.most_common() if keep(f)][:n]

    return {"self": share(own), "inclusive": share(incl), "samples": [("total", float(total))]}
