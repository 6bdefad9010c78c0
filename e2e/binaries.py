"""Find the control-plane binaries the integration tests run, envtest-style; build them when missing.

Lookup order per binary: ``TEST_ASSET_<NAME>``, ``$KUBEBUILDER_ASSETS/<name>``, the project cache
``<repo>/.k8s-bin/k8s/<X.Y.Z>-linux-amd64/`` and then the setup-envtest store
``${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest/k8s/<X.Y.Z>-*/``. For the two directory stores
the directory of the pinned version (``hack/versions.env``) wins when it holds every still-missing binary,
else the newest one that does, so one plane never mixes versions; ``k8s_version_in_use`` says which.
"""

from __future__ import annotations

import fcntl
import logging
import os
import re
import subprocess
from collections.abc import Iterable, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parent.parent
BUILD_SCRIPT = REPO / "hack" / "build-k8s-bins.sh"
VERSIONS_FILE = REPO / "hack" / "versions.env"
DEFAULT_NAMES: tuple[str, ...] = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kubectl",
)
# The real workers' binary (e2e/workers), built by the same script into the same directories and found by
# the same lookup order; not in DEFAULT_NAMES, so a machine without it still runs every plane.
WORKER_NAMES: tuple[str, ...] = ("kubelet",)
_VERSION_DIR = re.compile(r"^(\d+)\.(\d+)\.(\d+)-")


class BinariesNotFound(RuntimeError):
    """Raised when a binary is in none of the stores, even after running the build script."""


def env_var_for(name: str) -> str:
    """The envtest override variable: upper-cased, runs of non-[A-Z0-9] become '_', leading digits go."""
    return "TEST_ASSET_" + re.sub(r"[^A-Z0-9]+", "_", name.upper()).lstrip("0123456789")


def project_store() -> Path:
    return Path(os.environ.get("VKBRIDGE_K8S_BIN", REPO / ".k8s-bin")) / "k8s"


def envtest_store() -> Path:
    data = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(data) / "kubebuilder-envtest" / "k8s"


def _executable(p: Path) -> bool:
    return p.is_file() and os.access(p, os.X_OK)


def pinned_versions(path: Path = VERSIONS_FILE) -> dict[str, str]:
    """The ``NAME=value`` lines of hack/versions.env (the build scripts source the same file)."""
    pins = {}
    for line in path.read_text().splitlines():
        m = re.fullmatch(r"([A-Z0-9_]+)=(\S+)", line.strip())
        if m:
            pins[m.group(1)] = m.group(2)
    return pins


def pinned_k8s_version() -> str:
    """The Kubernetes version the project pins, without the ``v`` (``1.36.3``)."""
    return pinned_versions()["K8S_VERSION"].removeprefix("v")


def _version_dirs(store: Path) -> list[Path]:
    """Version directories: the pinned version's first, then newest first (by X.Y.Z, as setup-envtest)."""
    if not store.is_dir():
        return []
    found = []
    pinned = tuple(int(g) for g in pinned_k8s_version().split("."))
    for d in store.iterdir():
        m = _VERSION_DIR.match(d.name)
        if m and d.is_dir():
            version = tuple(int(g) for g in m.groups())
            found.append((version == pinned, version, d))
    return [d for *_, d in sorted(found, reverse=True)]


def _from_store(store: Path, names: Iterable[str]) -> dict[str, Path]:
    wanted = list(names)
    for d in _version_dirs(store):
        if all(_executable(d / n) for n in wanted):
            return {n: d / n for n in wanted}
    return {}


def _lookup(names: Sequence[str]) -> tuple[dict[str, Path], list[str]]:
    """Resolve what can be resolved; returns (found, problems) where problems explain bad overrides."""
    found: dict[str, Path] = {}
    problems: list[str] = []
    assets = os.environ.get("KUBEBUILDER_ASSETS")
    for n in names:
        var = env_var_for(n)
        if os.environ.get(var):
            p = Path(os.environ[var])
            if _executable(p):
                found[n] = p
            else:
                problems.append(f"{var}={p} is not an executable file")
        elif assets and _executable(Path(assets) / n):
            found[n] = Path(assets) / n
    for store in (project_store(), envtest_store()):
        missing = [n for n in names if n not in found]
        if not missing:
            break
        found.update(_from_store(store, missing))
    return found, problems


def _run_build_script() -> None:
    """Run hack/build-k8s-bins.sh once per machine at a time (a lock keeps parallel sessions out)."""
    lock_path = project_store().parent / ".build.lock"
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        log.warning("Kubernetes binaries missing: running %s (cold: about 20 min)", BUILD_SCRIPT)
        # Output is inherited on purpose: the script prints progress, and it skips complete builds.
        subprocess.run(["bash", str(BUILD_SCRIPT)], check=False)


def find_binaries(names: Sequence[str] = DEFAULT_NAMES, *, build: bool = True) -> dict[str, Path]:
    """Map each binary name to an executable path, building the project cache when something is missing."""
    found, problems = _lookup(names)
    if problems:
        raise BinariesNotFound("; ".join(problems))
    if len(found) < len(names) and build and BUILD_SCRIPT.is_file():
        _run_build_script()
        found, problems = _lookup(names)
    missing = [n for n in names if n not in found]
    if missing or problems:
        raise BinariesNotFound(
            f"missing Kubernetes binaries {missing}: set TEST_ASSET_<NAME> or KUBEBUILDER_ASSETS, or build "
            f"them into {project_store()} with {BUILD_SCRIPT} (log under {project_store().parent / 'logs'})"
            + ("; " + "; ".join(problems) if problems else "")
        )
    return found


def k8s_version_in_use() -> str:
    """One line for a test run's header: the kube-apiserver the planes will run, and whether it is the pin."""
    try:
        path = find_binaries(("kube-apiserver",), build=False)["kube-apiserver"]
    except BinariesNotFound:
        return f"kubernetes: no kube-apiserver yet (pinned v{pinned_k8s_version()}; a plane builds it)"
    m = _VERSION_DIR.match(path.parent.name)
    version = ".".join(m.groups()) if m else "unknown (an override)"
    pin = pinned_k8s_version()
    note = "the pinned version" if version == pin else f"WARNING: not the pinned v{pin}"
    return f"kubernetes: v{version} from {path.parent} ({note})"
