"""Host-side bookkeeping for real workers: process trees, mounts, and the testbed's own addresses.

Everything here acts only on what the testbed can attribute to itself: processes by pid (and their
descendants), mounts under its own directories, interfaces it created by name.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

log = logging.getLogger(__name__)

NODE_IP_RANGE = ipaddress.IPv4Network("198.18.0.0/16")  # node addresses (RFC 2544 benchmarking range)
POD_NET_RANGE = ipaddress.IPv4Network("198.19.0.0/16")  # one /24 per node for its pods


def _ppid_map() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        # The command name is in parentheses and may hold spaces: fields after the last ')'.
        fields = stat.rsplit(")", 1)[1].split()
        out[int(entry)] = int(fields[1])
    return out


def descendants(roots: Iterable[int]) -> list[int]:
    """Every live descendant of roots (children before grandchildren), roots excluded."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _ppid_map().items():
        children.setdefault(ppid, []).append(pid)
    found: list[int] = []
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.append(child)
                todo.append(child)
    return found


def pids_with_arg(needle: str) -> list[int]:
    """Processes whose command line holds needle as one argument (e.g. our containerd socket path)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            args = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if needle.encode() in args:
            found.append(int(entry))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def kill_all(pids: Iterable[int], sig: int = signal.SIGKILL) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def wait_gone(pids: Iterable[int], timeout: float) -> list[int]:
    """Wait until none of pids is alive (zombies count as gone); returns those still alive."""
    pending = list(pids)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        pending = [p for p in pending if alive(p)]
        if pending:
            time.sleep(0.05)
    return [p for p in pending if alive(p)]


def _unescape(field: str) -> str:
    """/proc/self/mounts escapes space, tab, newline and backslash as octal."""
    for code, ch in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        field = field.replace(code, ch)
    return field


def mounts_under(roots: Iterable[Path]) -> list[str]:
    """Mount points at or below any of roots, deepest first."""
    prefixes = [str(r.resolve()) for r in roots]
    points = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = _unescape(line.split()[1])
        if any(point == p or point.startswith(p + "/") for p in prefixes):
            points.append(point)
    return sorted(set(points), key=lambda p: (-p.count("/"), p))


def unmount_under(roots: Iterable[Path]) -> list[str]:
    """Detach every mount below roots (repeat while stacked mounts remain); returns what stayed."""
    roots = list(roots)
    for _ in range(5):
        points = mounts_under(roots)
        if not points:
            return []
        for point in points:
            subprocess.run(["umount", "-l", point], capture_output=True, check=False)
    return mounts_under(roots)


def ip(*args: str, check: bool = True) -> str:
    res = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if check and res.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {res.stderr.strip()}")
    return res.stdout


def used_ipv4() -> set[ipaddress.IPv4Network]:
    """Addresses and routes of this host, as networks (to pick testbed addresses that collide with none)."""
    nets: set[ipaddress.IPv4Network] = set()
    for line in ip("-o", "-4", "addr", "show").splitlines():
        parts = line.split()
        if "inet" in parts:
            iface = ipaddress.IPv4Interface(parts[parts.index("inet") + 1])
            nets |= {iface.network, ipaddress.IPv4Network(iface.ip)}
    for line in ip("-4", "route", "show", "table", "all").splitlines():
        dst = line.split()[0] if line.split() else ""
        if dst and dst[0].isdigit():
            with contextlib.suppress(ValueError):
                nets.add(ipaddress.IPv4Network(dst if "/" in dst else dst + "/32", strict=False))
    return nets


def pick_free(
    within: ipaddress.IPv4Network, prefix: int, count: int, used: set[ipaddress.IPv4Network]
) -> list[ipaddress.IPv4Network]:
    """count subnets of size /prefix inside within, overlapping nothing in used; skips the first one."""
    picked: list[ipaddress.IPv4Network] = []
    for i, net in enumerate(within.subnets(new_prefix=prefix)):
        if i == 0 or any(net.overlaps(u) for u in used):
            continue
        picked.append(net)
        if len(picked) == count:
            return picked
    raise RuntimeError(f"no {count} free /{prefix} in {within}")


# Testbed addresses claimed by the live sessions of this host: CI runs several pytest sessions at once,
# and a pod subnet is on no interface until CNI makes the bridge for the first pod, so the host's own
# addresses alone cannot tell two sessions' picks apart. One file per claim, named by its owner.
CLAIMS_DIR = Path("/tmp/vkbw-claims")


@contextlib.contextmanager
def _claims_locked() -> Iterator[None]:
    CLAIMS_DIR.mkdir(exist_ok=True)
    with (CLAIMS_DIR / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _others_claims(owner: str) -> set[ipaddress.IPv4Network]:
    """Networks claimed by other live processes; a dead process's claim file is removed."""
    nets: set[ipaddress.IPv4Network] = set()
    for path in CLAIMS_DIR.glob("*.claim"):
        if path.stem == owner:
            continue
        lines = path.read_text().split()
        if not lines or not lines[0].isdigit() or not _pid_alive(int(lines[0])):
            path.unlink(missing_ok=True)
            continue
        nets |= {ipaddress.IPv4Network(n) for n in lines[1:]}
    return nets


class AddressClaim:
    """Addresses picked for one testbed part, held against every other session until ``release()``."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.path = CLAIMS_DIR / f"{owner}.claim"
        self.networks: list[ipaddress.IPv4Network] = []

    def pick(self, within: ipaddress.IPv4Network, prefix: int, count: int) -> list[ipaddress.IPv4Network]:
        """``count`` free /prefix networks of ``within``: used by neither this host nor another claim."""
        with _claims_locked():
            used = used_ipv4() | _others_claims(self.owner) | set(self.networks)
            picked = pick_free(within, prefix, count, used)
            self.networks += picked
            self.path.write_text("\n".join([str(os.getpid()), *map(str, self.networks)]) + "\n")
        return picked

    def release(self) -> None:
        with _claims_locked():
            self.path.unlink(missing_ok=True)
        self.networks = []


class NodeAddresses:
    """The testbed's own interface: a veth pair (this kernel has no dummy links) holding the node IPs.

    Traffic to these addresses stays on this host (they are local addresses); the peer end exists only
    so the link has carrier. ``remove()`` deletes both ends (and with them the addresses and routes).
    """

    def __init__(self, name: str, addresses: list[str]) -> None:
        if len(name) > 13:
            raise ValueError(f"interface name {name!r} too long (peer adds 'p')")
        self.name, self.peer, self.addresses = name, name + "p", addresses

    def create(self) -> NodeAddresses:
        ip("link", "add", self.name, "type", "veth", "peer", "name", self.peer)
        try:
            for a in self.addresses:
                ip("addr", "add", f"{a}/32", "dev", self.name)
            ip("link", "set", self.peer, "up")
            ip("link", "set", self.name, "up")
        except BaseException:
            self.remove()
            raise
        return self

    def remove(self) -> None:
        ip("link", "del", self.name, check=False)


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True, check=False).returncode == 0


CGROUP_ROOT = Path("/sys/fs/cgroup")


def cgroup_dirs(relative: str) -> list[Path]:
    """The directory of cgroup ``relative`` in every mounted hierarchy (v1 has one per controller)."""
    if not CGROUP_ROOT.is_dir():
        return []
    return [h / relative for h in CGROUP_ROOT.iterdir() if (h / relative).is_dir()]


def cgroup_pids(relative: str) -> list[int]:
    pids: set[int] = set()
    for d in cgroup_dirs(relative):
        for procs in d.rglob("cgroup.procs"):
            with contextlib.suppress(OSError, ValueError):
                pids |= {int(x) for x in procs.read_text().split()}
    return sorted(pids)


def remove_cgroup(relative: str, *, children: bool = True) -> list[Path]:
    """rmdir the cgroup (with children: theirs first) in every hierarchy; returns directories that stayed.

    rmdir fails on a cgroup that still has processes or children, so nothing in use is removed.
    """
    stayed = []
    for d in cgroup_dirs(relative):
        subs = [p for p in d.rglob("*") if p.is_dir()] if children else []
        for sub in sorted(subs, key=lambda p: -len(p.parts)):
            with contextlib.suppress(OSError):
                sub.rmdir()
        try:
            d.rmdir()
        except OSError:
            stayed.append(d)
    return stayed
