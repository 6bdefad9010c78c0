"""The README's first command ends with burst-hello's output (run with --exit so it stops by itself).

Besides the logs, the demo's ``kubectl exec`` and ``kubectl cp`` must work on the offloaded pod: on a
real kubelet where the machine allows it, and on the fake workers it falls back to (the pool role makes
vkbridge use SPDY toward the pool, which the fake kubelet once refused).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from e2e.vkbridge_proc import REPO
from e2e.workers import why_not

pytestmark = pytest.mark.integration


def run_demo(*args: str) -> str:
    res = subprocess.run(
        [sys.executable, "-m", "e2e.demo", "--exit", *args],
        capture_output=True, text=True, timeout=600, cwd=REPO,
    )  # fmt: skip
    print(res.stdout[-3000:])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "kubectl -n my-team logs burst-hello:\nhello from the pool" in res.stdout
    assert "kubectl get nodes" in res.stdout
    assert "kubectl -n my-team exec burst-hello -- sh -c 'echo exec in $(uname -n)':\nexec in " in res.stdout
    assert "burst-hello:note.txt, and back:\ncopied through the pool\n" in res.stdout
    return res.stdout


def test_demo_runs_burst_hello_and_prints_its_logs_exec_and_cp() -> None:
    out = run_demo()
    reason = why_not()
    if reason is None:
        assert "real worker pool-worker-0 Ready in " in out
        assert "exec in burst-hello\n" in out  # the container's own hostname: a real container
    else:
        assert f"real workers unavailable ({reason}); using 2 fake pool workers instead" in out


def test_demo_on_fake_workers_says_so_and_exec_and_cp_still_work() -> None:
    out = run_demo("--fake-workers")
    assert "real workers unavailable (--fake-workers); using 2 fake pool workers instead" in out
