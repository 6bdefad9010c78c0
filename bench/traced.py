"""vkbridge under tracemalloc (bench.memory --tracemalloc): a subprocess answering snapshot requests.

python -m bench.traced <vkbridge flags>   (started by TracedVkbridge, not by hand)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from bench.measure import REPO
from e2e.vkbridge_proc import VkbridgeProcess
from e2e.waiting import wait_until


class TracedVkbridge(VkbridgeProcess):
    """vkbridge under tracemalloc; `snapshot()` writes its top allocation sites to a file and returns it."""

    def start(self) -> VkbridgeProcess:
        self.trace_dir = self.log_path.parent / "tracemalloc"
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "POD_NAME": f"vk-{self.opts.slug}-0", "POD_NAMESPACE": self.opts.tenant_ns}
        env["VKBRIDGE_BENCH_TRACE_DIR"] = str(self.trace_dir)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.traced", *self.opts.argv()],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True,
            )  # fmt: skip
        return self

    def snapshot(self, label: str, timeout: float = 300) -> Path:
        out = self.trace_dir / f"{label}.txt"
        (self.trace_dir / "request").write_text(label)
        wait_until(lambda: out.exists(), timeout, f"the tracemalloc snapshot {label}", 1.0)
        return out


def _traced_vkbridge_main(argv: list[str]) -> None:
    """vkbridge with tracemalloc on; a thread answers snapshot requests (a file) with top allocation sites."""
    import runpy
    import tracemalloc

    tracemalloc.start(6)
    trace_dir = Path(os.environ["VKBRIDGE_BENCH_TRACE_DIR"])

    def serve() -> None:
        while True:
            time.sleep(1.0)
            req = trace_dir / "request"
            if not req.exists():
                continue
            label = req.read_text().strip() or "snapshot"
            req.unlink()
            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
            )
            total = sum(s.size for s in snap.statistics("filename"))
            lines = [f"traced total: {total / 2**20:.1f} MiB"]
            for key in ("filename", "lineno"):
                lines.append(f"--- top by {key}")
                for st in snap.statistics(key)[:40]:
                    lines.append(f"{st.size / 2**20:8.1f} MiB {st.count:9d} blocks  {st.traceback}")
            lines.append("--- top tracebacks")
            for st in snap.statistics("traceback")[:15]:
                lines.append(f"{st.size / 2**20:8.1f} MiB {st.count:9d} blocks")
                lines.extend("      " + line for line in st.traceback.format())
            tmp = trace_dir / f"{label}.tmp"
            tmp.write_text("\n".join(lines) + "\n")
            tmp.replace(trace_dir / f"{label}.txt")

    threading.Thread(target=serve, name="tracemalloc-snapshots", daemon=True).start()
    sys.argv = ["vkbridge", *argv]
    runpy.run_module("vkbridge", run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    _traced_vkbridge_main(sys.argv[1:])
