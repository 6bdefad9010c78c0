"""`vkbridge version` names the commit (issue 36 point 8): from the image's build argument, else the checkout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from vkbridge.buildinfo import REVISION_ENV, UNKNOWN, checkout_head, revision
from vkbridge.cli import main

SHA = "0123456789abcdef0123456789abcdef01234567"
OTHER = "fedcba9876543210fedcba9876543210fedcba98"


def git_dir(tmp_path: Path, head: str) -> Path:
    git = tmp_path / ".git"
    (git / "refs" / "heads").mkdir(parents=True)
    (git / "HEAD").write_text(head + "\n")
    return git


def test_a_detached_head_is_its_commit(tmp_path: Path) -> None:
    assert checkout_head(git_dir(tmp_path, SHA)) == SHA


def test_a_branch_is_its_loose_ref_before_packed_refs(tmp_path: Path) -> None:
    git = git_dir(tmp_path, "ref: refs/heads/main")
    (git / "packed-refs").write_text(f"# pack-refs with: peeled\n{OTHER} refs/heads/main\n")
    assert checkout_head(git) == OTHER
    (git / "refs" / "heads" / "main").write_text(SHA + "\n")
    assert checkout_head(git) == SHA


def test_a_worktree_follows_its_gitdir_file_to_the_common_refs(tmp_path: Path) -> None:
    common = git_dir(tmp_path / "repo", "ref: refs/heads/main")
    (common / "refs" / "heads" / "topic").write_text(SHA + "\n")
    wt = common / "worktrees" / "wt"
    wt.mkdir(parents=True)
    (wt / "HEAD").write_text("ref: refs/heads/topic\n")
    (wt / "commondir").write_text("../..\n")
    checkout = tmp_path / "wt"
    checkout.mkdir()
    (checkout / ".git").write_text(f"gitdir: {wt}\n")
    assert checkout_head(checkout / ".git") == SHA


def test_no_checkout_and_no_environment_is_unknown(tmp_path: Path) -> None:
    assert revision({}, tmp_path) == UNKNOWN
    assert checkout_head(git_dir(tmp_path, "ref: refs/heads/gone")) is None


def test_the_environment_wins_over_the_checkout(tmp_path: Path) -> None:
    git_dir(tmp_path, SHA)
    assert revision({REVISION_ENV: OTHER}, tmp_path) == OTHER
    assert revision({REVISION_ENV: UNKNOWN}, tmp_path) == SHA  # the image's default build argument


@pytest.mark.parametrize("args", [["--output=json"], ["-o", "json"], ["--output", "json"], ["-ojson"]])
def test_version_as_json_names_version_revision_and_python(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REVISION_ENV, SHA)
    assert main(["version", *args]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["revision"] == SHA and info["version"] and info["python"].count(".") == 2


def test_version_text_names_the_revision_and_a_bad_output_exits_2(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(REVISION_ENV, SHA)
    assert main(["version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("vkbridge ") and SHA in out
    assert main(["--version"]) == 0
    assert SHA in capsys.readouterr().out
    assert main(["version", "--output=yaml"]) == 2
    assert "--output" in capsys.readouterr().err
