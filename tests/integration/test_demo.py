"""The README's first command ends with burst-hello's output (run with --exit so it stops by itself)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from e2e.vkbridge_proc import REPO

pytestmark = pytest.mark.integration


def test_demo_runs_burst_hello_and_prints_its_logs() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "e2e.demo", "--exit"], capture_output=True, text=True, timeout=600, cwd=REPO
    )
    print(res.stdout[-3000:])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "kubectl -n my-team logs burst-hello:\nhello from the pool" in res.stdout
    assert "kubectl get nodes" in res.stdout
