"""hack/sbom.py: the image's CycloneDX SBOM from its own files (issue 36 point 8); here on a tar made in memory."""

from __future__ import annotations

import importlib.util
import io
import json
import tarfile
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[2]


def sbom_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("vkbridge_hack_sbom", REPO / "hack" / "sbom.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


sbom = sbom_module()
STATUS = """Package: python3
Status: install ok installed
Architecture: amd64
Version: 3.11.2-1+b1
Description: interactive high-level object-oriented language
 a continuation line: Version: 9

Package: gone
Status: deinstall ok config-files
Version: 1.0
"""
METADATA = "Metadata-Version: 2.1\nName: PyYAML\nVersion: 6.0.4\nLicense: MIT\n\nlong description\nName: x\n"
LOCK = (
    "pyyaml==6.0.4 \\\n    --hash=sha256:"
    + "a" * 64
    + " \\\n    --hash=sha256:"
    + "b" * 64
    + "\n    # via x\n"
)


def image_tar(files: dict[str, str]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def test_only_installed_debian_packages_count() -> None:
    debs = list(sbom.dpkg_packages(STATUS))
    assert [(d["Package"], d["Version"]) for d in debs] == [("python3", "3.11.2-1+b1")]


def test_the_image_tar_gives_its_debian_packages_and_python_distributions() -> None:
    site = "opt/vkbridge/lib/python3.11/site-packages"
    tar = image_tar(
        {
            "var/lib/dpkg/status": STATUS,
            f"{site}/PyYAML-6.0.4.dist-info/METADATA": METADATA,
            f"{site}/PyYAML-6.0.4.dist-info/RECORD": "not metadata",
            "usr/lib/python3/dist-packages/other-1.dist-info/METADATA": "Name: other\nVersion: 1\n",
        }
    )
    debs, dists = sbom.read_image(tar)
    assert [d["Package"] for d in debs] == ["python3"]
    assert dists == [{"name": "PyYAML", "version": "6.0.4", "license": "MIT"}]


def test_the_bom_is_cyclonedx_with_purls_and_the_locks_hashes() -> None:
    debs = list(sbom.dpkg_packages(STATUS))
    dists = [
        {"name": "PyYAML", "version": "6.0.4", "license": "MIT"},
        {"name": "vkbridge", "version": "0.1.0"},
    ]
    bom = sbom.bom(
        debs, dists, sbom.pinned_hashes(LOCK), "vkbridge:dev@sha256:1", datetime(2026, 12, 8, tzinfo=UTC)
    )
    json.dumps(bom)  # serializable
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5"
    assert bom["metadata"]["timestamp"] == "2026-12-08T00:00:00Z"
    assert bom["metadata"]["component"]["type"] == "container"
    by_purl = {c["purl"]: c for c in bom["components"]}
    assert set(by_purl) == {
        "pkg:deb/debian/python3@3.11.2-1+b1?arch=amd64",
        "pkg:pypi/pyyaml@6.0.4",
        "pkg:pypi/vkbridge@0.1.0",
    }
    assert by_purl["pkg:pypi/pyyaml@6.0.4"]["hashes"] == [
        {"alg": "SHA-256", "content": "a" * 64},
        {"alg": "SHA-256", "content": "b" * 64},
    ]
    assert "hashes" not in by_purl["pkg:pypi/vkbridge@0.1.0"]  # built in the image, not pinned
    assert len({c["bom-ref"] for c in bom["components"]}) == len(bom["components"])


def test_a_distribution_at_another_version_than_pinned_gets_no_hashes() -> None:
    bom = sbom.bom([], [{"name": "pyyaml", "version": "6.0.3"}], sbom.pinned_hashes(LOCK), "i")
    assert "hashes" not in bom["components"][0]
