"""Which build is running: version, commit, Python; for `vkbridge version` and ``vkbridge_build_info``.

The commit comes from ``VKBRIDGE_REVISION`` (the image sets it from its build argument); a process run from
a git checkout reads the checkout's HEAD from its files (no git binary, no subprocess). Read once, at start
or for `version`: a few small local files, never on a hot path.
"""

from __future__ import annotations

import contextlib
import os
import platform
import re
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

REVISION_ENV = "VKBRIDGE_REVISION"
UNKNOWN = "unknown"
_SHA = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")


@dataclass(frozen=True)
class BuildInfo:
    version: str
    revision: str
    python: str
    platform: str

    def as_dict(self) -> dict[str, str]:
        return {
            "version": self.version,
            "revision": self.revision,
            "python": self.python,
            "platform": self.platform,
        }

    def line(self) -> str:
        return f"vkbridge {self.version} (revision {self.revision}, Python {self.python}, {self.platform})"


def package_version() -> str:
    try:
        return version("vkbridge")
    except PackageNotFoundError:
        from vkbridge import __version__

        return __version__


def revision(environ: dict[str, str] | None = None, source: Path | None = None) -> str:
    """The commit: the environment's, else the git checkout's this code runs from, else ``unknown``."""
    env = os.environ if environ is None else environ
    given = (env.get(REVISION_ENV) or "").strip()
    if given and given != UNKNOWN:
        return given
    root = source if source is not None else Path(__file__).resolve().parent.parent
    return checkout_head(root / ".git") or UNKNOWN


def checkout_head(git_dir: Path) -> str | None:
    """The commit a checkout's HEAD names, from its files: a detached sha, a loose ref or a packed one."""
    try:
        if git_dir.is_file():  # a worktree or submodule: "gitdir: <path>"
            pointer = git_dir.read_text().strip()
            if not pointer.startswith("gitdir:"):
                return None
            git_dir = (git_dir.parent / pointer.split(":", 1)[1].strip()).resolve()
        head = (git_dir / "HEAD").read_text().strip()
    except OSError:
        return None
    if _SHA.match(head):
        return head
    if not head.startswith("ref:"):
        return None
    ref = head.split(":", 1)[1].strip()
    common = git_dir
    with contextlib.suppress(OSError):
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    for base in (git_dir, common):
        try:
            sha = (base / ref).read_text().strip()
        except OSError:
            continue
        if _SHA.match(sha):
            return sha
    try:
        packed = (common / "packed-refs").read_text()
    except OSError:
        return None
    for line in packed.splitlines():
        sha, _, name = line.partition(" ")
        if name == ref and _SHA.match(sha):
            return sha
    return None


def build_info() -> BuildInfo:
    return BuildInfo(
        version=package_version(),
        revision=revision(),
        python=platform.python_version(),
        platform=f"{platform.system().lower()}/{platform.machine()}",
    )
