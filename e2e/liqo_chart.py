"""Liqo's Helm chart at the pinned version: the CRDs the test planes install and the chart's RBAC files.

Nothing of Liqo's is kept in the repo: ``hack/fetch-liqo-chart.sh`` copies ``deployments/liqo`` out of
Liqo's Go module (the zip the VK build downloads too) into the binary store, once per machine. Lookup order:
``VKBRIDGE_LIQO_CHART``, ``<repo>/.k8s-bin/liqo/<ver>-chart/``, then
``${XDG_DATA_HOME:-~/.local/share}/kubebuilder-envtest/liqo/<ver>-chart/``; when none is complete the
script runs (a few seconds; it needs the Go module proxy the first time).
"""

from __future__ import annotations

import fcntl
import logging
import os
import subprocess
from pathlib import Path
from typing import Any

import yaml

from e2e.binaries import REPO, envtest_store, pinned_versions, project_store

log = logging.getLogger(__name__)

FETCH_SCRIPT = REPO / "hack" / "fetch-liqo-chart.sh"
CHART_ENV = "VKBRIDGE_LIQO_CHART"
CRDS_SUBDIR = Path("charts") / "liqo-crds" / "crds"
# Liqo's ShadowPod and VirtualNode manifests are ~9,000 lines each: parse with libyaml when available.
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LiqoChartUnavailable(RuntimeError):
    """Liqo's chart is in no store, even after running the fetch script."""


def liqo_version() -> str:
    return pinned_versions()["LIQO_VERSION"]


def _complete(d: Path) -> bool:
    return (d / "Chart.yaml").is_file() and (d / CRDS_SUBDIR).is_dir() and (d / "files").is_dir()


def _candidates() -> list[Path]:
    sub = Path("liqo") / f"{liqo_version()}-chart"
    return [project_store().parent / sub, envtest_store().parent / sub]


def _lookup() -> Path | None:
    env = os.environ.get(CHART_ENV)
    if env:
        if not _complete(Path(env)):
            raise LiqoChartUnavailable(f"{CHART_ENV}={env}: no Chart.yaml, CRDs or files/ there")
        return Path(env)
    return next((d for d in _candidates() if _complete(d)), None)


def liqo_chart(*, fetch: bool = True) -> Path:
    """The chart directory, fetched once per machine when missing (a lock keeps parallel sessions out)."""
    found = _lookup()
    if found is None and fetch and FETCH_SCRIPT.is_file():
        lock_path = project_store().parent / ".fetch-liqo-chart.lock"
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        with lock_path.open("w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            log.warning("Liqo's chart missing: running %s", FETCH_SCRIPT)
            subprocess.run(["bash", str(FETCH_SCRIPT)], check=False, timeout=600)  # prints progress
        found = _lookup()
    if found is None:
        raise LiqoChartUnavailable(
            f"Liqo {liqo_version()}'s chart not found in {[str(c) for c in _candidates()]}: "
            f"fetch it with {FETCH_SCRIPT} or set {CHART_ENV}"
        )
    return found


def liqo_crds_dir(*, fetch: bool = True) -> Path:
    """The chart's CRD directory: every Liqo CRD (28 in v1.2.0), one file each."""
    return liqo_chart(fetch=fetch) / CRDS_SUBDIR


def load_manifests(path: Path) -> list[dict[str, Any]]:
    """The YAML documents of one manifest file (empty documents dropped)."""
    return [d for d in yaml.load_all(path.read_text(), Loader=_Loader) if isinstance(d, dict)]


def chart_rbac(name: str, *, fetch: bool = True) -> dict[str, Any]:
    """One of the chart's RBAC files, ``files/<name>.yaml`` (``liqo-virtual-kubelet-remote-ClusterRole``).

    The chart templates wrap these files' rules in the object; the file holds ``rules:`` only.
    """
    path = liqo_chart(fetch=fetch) / "files" / f"{name}.yaml"
    (doc,) = load_manifests(path)
    return doc
