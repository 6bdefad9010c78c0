"""A CycloneDX 1.5 SBOM of the vkbridge image, from the image's own files (`docker export` tar on stdin).

    docker export "$(docker create vkbridge:dev)" | python3 hack/sbom.py --image vkbridge:dev > sbom.cdx.json

What is in the image, not what should be: every Debian package of the base (dpkg's status file) and every
Python distribution of /opt/vkbridge (their dist-info METADATA), with package URLs; a Python distribution
pinned in requirements/image.txt carries the sha256 hashes pinned there. hack/image.sh --sbom runs it.
"""

from __future__ import annotations

import argparse
import email.parser
import json
import re
import sys
import tarfile
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

DPKG_STATUS = "var/lib/dpkg/status"
SITE_PACKAGES = re.compile(r"^opt/vkbridge/lib/python3[.0-9]*/site-packages/([^/]+)\.dist-info/METADATA$")


def dpkg_packages(status: str) -> Iterator[dict[str, str]]:
    """The installed packages of a dpkg status file: name, version, architecture, source."""
    for stanza in status.split("\n\n"):
        fields: dict[str, str] = {}
        for line in stanza.splitlines():
            if line[:1] in (" ", "\t") or ":" not in line:
                continue
            key, _, value = line.partition(":")
            fields[key] = value.strip()
        if fields.get("Package") and "installed" in fields.get("Status", "").split():
            yield fields


def python_distribution(metadata: str) -> dict[str, str]:
    msg = email.parser.Parser().parsestr(metadata, headersonly=True)
    return {
        "name": str(msg.get("Name", "")),
        "version": str(msg.get("Version", "")),
        "license": str(msg.get("License-Expression") or msg.get("License") or ""),
    }


def pinned_hashes(lock: str) -> dict[str, tuple[str, list[str]]]:
    """requirements/image.txt: normalized name -> (version, sha256 hashes)."""
    pins: dict[str, tuple[str, list[str]]] = {}
    for line in lock.replace("\\\n", " ").splitlines():
        if m := re.match(r"^([A-Za-z0-9._-]+)==(\S+)\s+(.*)$", line):
            pins[normalized(m[1])] = (m[2], re.findall(r"--hash=sha256:([0-9a-f]{64})", m[3]))
    return pins


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def bom(
    debs: list[dict[str, str]],
    dists: list[dict[str, str]],
    pins: dict[str, tuple[str, list[str]]],
    image: str,
    now: datetime | None = None,
) -> dict[str, Any]:
    components: list[dict[str, Any]] = []
    for deb in sorted(debs, key=lambda d: d["Package"]):
        arch = deb.get("Architecture", "")
        purl = f"pkg:deb/debian/{deb['Package']}@{deb.get('Version', '')}" + (f"?arch={arch}" if arch else "")
        components.append(
            {
                "type": "library",
                "bom-ref": purl,
                "name": deb["Package"],
                "version": deb.get("Version", ""),
                "purl": purl,
            }
        )
    for dist in sorted(dists, key=lambda d: normalized(d["name"])):
        name = normalized(dist["name"])
        purl = f"pkg:pypi/{name}@{dist['version']}"
        comp: dict[str, Any] = {
            "type": "library",
            "bom-ref": purl,
            "name": dist["name"],
            "version": dist["version"],
            "purl": purl,
        }
        if dist.get("license"):
            comp["licenses"] = [{"license": {"name": dist["license"][:200]}}]
        pinned = pins.get(name)
        if pinned and pinned[0] == dist["version"]:
            comp["hashes"] = [{"alg": "SHA-256", "content": h} for h in pinned[1]]
        components.append(comp)
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid4()}",
        "version": 1,
        "metadata": {
            "timestamp": stamp,
            "tools": {"components": [{"type": "application", "name": "vkbridge hack/sbom.py"}]},
            "component": {"type": "container", "bom-ref": image, "name": image},
        },
        "components": components,
    }


def read_image(tar: IO[bytes]) -> tuple[list[dict[str, str]], list[dict[str, str]]]:
    debs: list[dict[str, str]] = []
    dists: list[dict[str, str]] = []
    with tarfile.open(fileobj=tar, mode="r|") as archive:
        for member in archive:
            path = member.name.lstrip("./")
            if not member.isfile() or not (path == DPKG_STATUS or SITE_PACKAGES.match(path)):
                continue
            data = archive.extractfile(member)
            text = data.read().decode("utf-8", "replace") if data else ""
            if path == DPKG_STATUS:
                debs = list(dpkg_packages(text))
            else:
                dists.append(python_distribution(text))
    return debs, dists


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", required=True, help="the image's name, for the SBOM's metadata")
    parser.add_argument(
        "--lock", default=str(Path(__file__).resolve().parent.parent / "requirements/image.txt")
    )
    args = parser.parse_args()
    debs, dists = read_image(sys.stdin.buffer)
    if not dists:
        print("sbom.py: no Python distribution under /opt/vkbridge in the tar on stdin", file=sys.stderr)
        return 1
    pins = pinned_hashes(Path(args.lock).read_text())
    json.dump(bom(debs, dists, pins, args.image), sys.stdout, indent=1)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
