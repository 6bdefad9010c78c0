"""Static checks of what Python tools do not see: every shell script with shellcheck, the Dockerfile with
hadolint. Each is skipped, with the reason, when its linter is not installed (hack/setup.sh installs
both); a finding fails the test and prints the linter's own report."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = sorted(
    {
        *REPO.glob("e2e/kind/*.sh"),
        *REPO.glob("hack/*.sh"),
        *REPO.glob("hack/lib/*.sh"),
        REPO / ".ci" / "run",
    }
)


def _linter(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (hack/setup.sh installs it)")
    return path


def _lint(argv: list[str], what: str) -> None:
    """Run a linter from the repository root; a finding fails with the linter's own report."""
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
    assert res.returncode == 0, f"{what}:\n{res.stdout}{res.stderr}"


def test_the_scripts_are_found() -> None:
    names = {p.relative_to(REPO).as_posix() for p in SCRIPTS}
    assert {"e2e/kind/setup.sh", "e2e/kind/run-scenarios.sh", "e2e/kind/teardown.sh", ".ci/run"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_shellcheck(script: Path) -> None:
    shellcheck = _linter("shellcheck")
    assert script.is_file(), f"{script} is missing"
    # -x follows `source` lines (their `# shellcheck source=` directives); the default severity (style).
    name = str(script.relative_to(REPO))
    _lint([shellcheck, "--external-sources", "--shell=bash", name], f"shellcheck {name}")


def test_hadolint_dockerfile() -> None:
    hadolint = _linter("hadolint")
    _lint([hadolint, "--no-color", "Dockerfile"], "hadolint Dockerfile")


def test_scripts_are_executable() -> None:
    for script in REPO.glob("e2e/kind/*.sh"):
        if script.name == "lib.sh":  # sourced, never run
            continue
        assert script.stat().st_mode & 0o111, f"{script.relative_to(REPO)} is not executable (chmod +x)"


def test_no_subshell_is_an_if_condition() -> None:
    """bash ignores `set -e` inside `if ( ... ); then`: a failed `go mod tidy` ran on, and the build
    reported success while kube-apiserver was missing. Scripts run such a subshell as a command and test $?."""
    offenders = [
        f"{script.relative_to(REPO)}:{n}"
        for script in SCRIPTS
        for n, line in enumerate(script.read_text().splitlines(), 1)
        if re.match(r"\s*(if|elif|while|until)\s+\(\s*($|set )", line)
    ]
    assert not offenders, offenders
