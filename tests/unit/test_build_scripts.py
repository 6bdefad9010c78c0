"""The build scripts' version step survives a program that writes its version in several writes (issue 41).

``"$dir/etcd" --version | head -1`` under ``set -o pipefail`` failed about one build in three: ``head``
exits after the first line, etcd dies of SIGPIPE on its next write, the pipeline's status is 141 and the
finished Kubernetes build was thrown away. The fake below writes four lines with pauses between them, so
the race that was one in three is lost every time by the old pipeline.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LIB = REPO / "hack" / "lib" / "build.sh"
SHELL_SCRIPTS = sorted({*REPO.glob("hack/*.sh"), *REPO.glob("hack/lib/*.sh"), *REPO.glob("e2e/**/*.sh")})

FAKE_ETCD = """#!/usr/bin/env bash
# Like etcd --version: four separate writes.
printf 'etcd Version: 3.6.16\\n'; sleep 0.02
printf 'Git SHA: GitNotFound\\n'; sleep 0.02
printf 'Go Version: go1.26.8\\n'; sleep 0.02
printf 'Go OS/Arch: linux/amd64\\n'
"""


@pytest.fixture
def bin_dir(tmp_path: Path) -> Path:
    fake = tmp_path / "etcd"
    fake.write_text(FAKE_ETCD)
    fake.chmod(0o755)
    return tmp_path


def _bash(script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", "-c", f"set -euo pipefail\n{script}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_old_pipeline_loses_the_race_with_the_fake(bin_dir: Path) -> None:
    """The fake reproduces the defect: without this, the test below could not fail."""
    res = _bash(f'"{bin_dir}/etcd" --version | head -1')
    assert res.returncode == 141, (res.returncode, res.stdout, res.stderr)


def test_version_step_passes_fifty_times_in_a_row(bin_dir: Path) -> None:
    runs = 50
    res = _bash(f'. "{LIB}"\nfor i in $(seq {runs}); do binaries_answer "{bin_dir}" etcd; done\necho done')
    assert res.returncode == 0, (res.returncode, res.stdout[-500:], res.stderr)
    lines = res.stdout.splitlines()
    assert lines[:-1] == ["etcd: etcd Version: 3.6.16"] * runs and lines[-1] == "done"


def test_version_step_fails_on_a_binary_that_refuses_its_flag(bin_dir: Path) -> None:
    """A binary that does not answer (kubectl has no --version) fails the step, not just prints an error."""
    bad = bin_dir / "kube-scheduler"
    bad.write_text("#!/bin/sh\necho 'error: unknown flag: --version' >&2\nexit 1\n")
    bad.chmod(0o755)
    res = _bash(f'. "{LIB}"\nbinaries_answer "{bin_dir}" etcd kube-scheduler')
    assert res.returncode != 0 and "unknown flag" in res.stdout, (res.returncode, res.stdout)


def test_kubectl_is_asked_its_client_version(bin_dir: Path) -> None:
    kubectl = bin_dir / "kubectl"
    kubectl.write_text('#!/bin/sh\n[ "$*" = "version --client" ] || exit 1\necho "Client Version: v1.36.3"\n')
    kubectl.chmod(0o755)
    res = _bash(f'. "{LIB}"\nbinaries_answer "{bin_dir}" kubectl')
    assert res.returncode == 0 and res.stdout == "kubectl: Client Version: v1.36.3\n", res


def test_version_step_fails_on_a_missing_binary(bin_dir: Path) -> None:
    res = _bash(f'. "{LIB}"\nbinaries_answer "{bin_dir}" etcd kube-apiserver')
    assert res.returncode != 0 and "kube-apiserver: missing" in res.stdout


def test_last_step_names_the_step_a_log_stopped_in(tmp_path: Path) -> None:
    log = tmp_path / "build.log"
    log.write_text("== module\nok\n== etcd build\n== versions\netcd: boom\n")
    res = _bash(f'. "{LIB}"\nlast_step "{log}"')
    assert res.stdout == "versions\n"


@pytest.mark.parametrize("script", SHELL_SCRIPTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_no_pipe_into_a_reader_that_stops_early(script: Path) -> None:
    """`| head` and `| grep -q` end before the writer does: under pipefail its SIGPIPE fails the step."""
    text = script.read_text()
    if "pipefail" not in text and script.parent.name != "lib":
        return
    offenders = [
        f"{n}: {line.strip()}"
        for n, line in enumerate(text.splitlines(), 1)
        if not line.lstrip().startswith("#") and re.search(r"\|\s*(head\b|grep\s+-\w*q)", line)
    ]
    assert not offenders, offenders
