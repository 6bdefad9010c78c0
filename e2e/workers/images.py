"""Container images made on this machine from the static busybox: no registry is reachable here.

``busybox:1.36`` is busybox with every applet linked in /bin; ``registry.k8s.io/pause:3.10`` is the same
busybox running a shell loop that exits on TERM (a sandbox only needs to sit there). Both are written as
docker-archive tarballs (``docker save`` format), which ``ctr images import`` reads.
"""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

BUSYBOX = Path("/bin/busybox")
BUSYBOX_IMAGE = "busybox:1.36"
PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
_PATH = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PAUSE_SCRIPT = "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done"


@dataclass(frozen=True)
class ImageSpec:
    ref: str
    cmd: Sequence[str]
    entrypoint: Sequence[str] = ()


def is_static_elf(path: Path) -> bool:
    """True for a 64-bit ELF without a PT_INTERP program header (runs with no libc in the image)."""
    with path.open("rb") as f:
        head = f.read(64)
        if head[:5] != b"\x7fELF\x02":
            return False
        phoff = int.from_bytes(head[0x20:0x28], "little")
        phentsize = int.from_bytes(head[0x36:0x38], "little")
        phnum = int.from_bytes(head[0x38:0x3A], "little")
        f.seek(phoff)
        table = f.read(phentsize * phnum)
    types = (int.from_bytes(table[i : i + 4], "little") for i in range(0, len(table), phentsize))
    return 3 not in types  # PT_INTERP


def applets(busybox: Path = BUSYBOX) -> list[str]:
    """The applet names this busybox provides (``busybox --list``)."""
    out = subprocess.run([str(busybox), "--list"], capture_output=True, text=True, check=True).stdout
    return sorted({a for a in out.split() if a and "/" not in a and a != "busybox"})


def rootfs_layer(busybox: Path, names: Sequence[str]) -> bytes:
    """An uncompressed layer tar: /bin/busybox, a symlink per applet, and the usual empty directories."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp", "var", "root"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777 if d == "tmp" else 0o755
            tar.addfile(info)
        data = busybox.read_bytes()
        info = tarfile.TarInfo("bin/busybox")
        info.size, info.mode = len(data), 0o755
        tar.addfile(info, io.BytesIO(data))
        for name in names:
            link = tarfile.TarInfo(f"bin/{name}")
            link.type, link.linkname, link.mode = tarfile.SYMTYPE, "busybox", 0o777
            tar.addfile(link)
        for path, text in (("etc/passwd", "root:x:0:0:root:/root:/bin/sh\n"), ("etc/group", "root:x:0:\n")):
            raw = text.encode()
            info = tarfile.TarInfo(path)
            info.size, info.mode = len(raw), 0o644
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def docker_archive(spec: ImageSpec, layer: bytes) -> bytes:
    """A one-layer docker-archive (manifest.json, config, layer) tagged spec.ref, for linux/amd64."""
    diff_id = "sha256:" + hashlib.sha256(layer).hexdigest()
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": [_PATH], "Cmd": list(spec.cmd), "Entrypoint": list(spec.entrypoint) or None},
        "rootfs": {"type": "layers", "diff_ids": [diff_id]},
        "history": [{"created_by": "vkbridge e2e: static busybox"}],
    }
    config_raw = json.dumps(config, sort_keys=True).encode()
    config_name = hashlib.sha256(config_raw).hexdigest() + ".json"
    layer_name = diff_id.removeprefix("sha256:") + "/layer.tar"
    manifest = json.dumps([{"Config": config_name, "RepoTags": [spec.ref], "Layers": [layer_name]}]).encode()
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, raw in ((config_name, config_raw), (layer_name, layer), ("manifest.json", manifest)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(raw), 0o644
            tar.addfile(info, io.BytesIO(raw))
    return buf.getvalue()


def write_images(directory: Path, busybox: Path = BUSYBOX) -> list[Path]:
    """Write the busybox and pause archives into directory; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    layer = rootfs_layer(busybox, applets(busybox))
    specs = (
        ImageSpec(BUSYBOX_IMAGE, cmd=["sh"]),
        ImageSpec(PAUSE_IMAGE, cmd=[], entrypoint=["/bin/sh", "-c", PAUSE_SCRIPT]),
    )
    paths = []
    for spec in specs:
        path = directory / (spec.ref.replace("/", "_").replace(":", "_") + ".tar")
        path.write_bytes(docker_archive(spec, layer))
        paths.append(path)
    return paths
