"""What the resilience scenarios share: a recording watch, process samples, bulk pod helpers, figures.

Everything is synchronous (threads where something must run in the background) so a scenario reads as
a script: set a fault, act, restore, measure, assert, print the figures.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import http.client
import json
import os
import re
import ssl
import threading
import time
import urllib.error
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from tests.fixtures_vkbridge import node_ready
from tests.integration.helpers import get, must, pod_path, pool_pod, shadow_path, wait_until

MiB = 1024 * 1024
OwnVkbridge = Callable[..., VkbridgeProcess]
"""The ``own_vkbridge`` fixture: ``start(tag, **VkbridgeOptions fields)`` while the session's one is stopped."""
RESOURCESLICES = "/apis/authentication.liqo.io/v1beta1"
TOUCH_ANNOTATION = "multicloud.io/reflection-touch"


# ---------------------------------------------------------------------------------------------- pods


def tiny_pod(slug: str, name: str, *, node_name: str | None = None, **kw: Any) -> dict[str, Any]:
    """A pool pod that costs next to nothing against the grant (bursts of hundreds fit)."""
    return pool_pod(slug, name, command="sleep 3600", cpu="1m", memory="1Mi", node_name=node_name, **kw)


def create_pods(plane: ControlPlane, ns: str, pods: Iterable[dict[str, Any]], workers: int = 8) -> None:
    bodies = list(pods)
    with ThreadPoolExecutor(workers) as ex:
        for f in [ex.submit(must, plane, "POST", pod_path(ns), body) for body in bodies]:
            f.result()


def delete_pods(plane: ControlPlane, ns: str, names: Iterable[str], grace: int | None = None) -> None:
    suffix = "" if grace is None else f"?gracePeriodSeconds={grace}"

    def one(name: str) -> None:
        status, body = plane.api("DELETE", pod_path(ns, name) + suffix)
        assert status in (200, 202, 404), f"DELETE pod {ns}/{name}: {status} {body}"

    with ThreadPoolExecutor(8) as ex:
        for f in [ex.submit(one, name) for name in names]:
            f.result()


def items(plane: ControlPlane, path: str) -> list[dict[str, Any]]:
    return list(must(plane, "GET", path).get("items") or [])


def by_name(objs: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {o["metadata"]["name"]: o for o in objs}


def local_pods(consumer: ControlPlane, ns: str) -> dict[str, dict[str, Any]]:
    return by_name(items(consumer, pod_path(ns)))


def shadowpods(pool: ControlPlane, remote_ns: str) -> dict[str, dict[str, Any]]:
    return by_name(items(pool, shadow_path(remote_ns)))


def remote_pods(pool: ControlPlane, remote_ns: str) -> dict[str, dict[str, Any]]:
    return by_name(items(pool, pod_path(remote_ns)))


def phase_of(pod: dict[str, Any] | None) -> str | None:
    return None if pod is None else (pod.get("status") or {}).get("phase")


def is_running(pod: dict[str, Any] | None) -> bool:
    return phase_of(pod) == "Running"


def terminating(pod: dict[str, Any]) -> bool:
    return bool(pod["metadata"].get("deletionTimestamp"))


def uid(obj: dict[str, Any] | None) -> str | None:
    return None if obj is None else str(obj["metadata"]["uid"])


def wait_all_running(consumer: ControlPlane, ns: str, names: Iterable[str], timeout: float) -> float:
    """Seconds until every named local pod is Running."""
    want = set(names)
    t0 = time.monotonic()

    def done() -> bool:
        pods = local_pods(consumer, ns)
        return all(is_running(pods.get(n)) for n in want)

    wait_until(done, timeout, f"{len(want)} pods Running in {ns}", interval=0.5)
    return time.monotonic() - t0


@dataclass(frozen=True)
class TinyPods:
    """The test's offloaded namespace on both planes, and the tiny pods a scenario makes and checks there."""

    consumer: ControlPlane
    pool: ControlPlane
    slug: str
    ns: str
    remote: str

    def create(self, names: Iterable[str], *, bound: bool = False, workers: int = 8) -> None:
        """``bound`` pods go straight to the virtual node (spec.nodeName), as the scheduler's pods of a
        moment before would: a NotReady node's NoSchedule taint keeps the scheduler away."""
        node = self.slug if bound else None
        create_pods(self.consumer, self.ns, [tiny_pod(self.slug, n, node_name=node) for n in names], workers)

    def run(self, names: Iterable[str], timeout: float = 60.0) -> float:
        """Create the pods and wait until every one is Running; the seconds that took."""
        want = list(names)
        self.create(want)
        return self.wait_running(want, timeout)

    def delete(self, names: Iterable[str], grace: int | None = None) -> None:
        delete_pods(self.consumer, self.ns, names, grace)

    def local(self) -> dict[str, dict[str, Any]]:
        return local_pods(self.consumer, self.ns)

    def shadows(self) -> dict[str, dict[str, Any]]:
        return shadowpods(self.pool, self.remote)

    def remotes(self) -> dict[str, dict[str, Any]]:
        return remote_pods(self.pool, self.remote)

    def wait_running(self, names: Iterable[str], timeout: float) -> float:
        return wait_all_running(self.consumer, self.ns, names, timeout)

    def record_local(self) -> Recorder:
        """A recording watch of the local pods (use it as a context manager)."""
        return Recorder(self.consumer, pod_path(self.ns), "local-pods")

    def record_shadows(self) -> Recorder:
        """A recording watch of the ShadowPods on the pool (use it as a context manager)."""
        return Recorder(self.pool, shadow_path(self.remote), "shadowpods")


@contextlib.contextmanager
def granted_pods(consumer: ControlPlane, bundle: Bundle, count: int) -> Iterator[None]:
    """Raise the grant's pod count for a burst (the emulator grants what the ResourceSlice asks)."""
    path = f"{RESOURCESLICES}/namespaces/{bundle.tenant_ns}/resourceslices/{bundle.slug}"
    rs = get(consumer, path)
    assert rs is not None
    before = str((rs["spec"].get("resources") or {}).get("pods") or bundle.grant.get("pods", "110"))

    def set_pods(value: str) -> None:
        must(consumer, "PATCH", path, {"spec": {"resources": {"pods": value}}},
             content_type="application/merge-patch+json")  # fmt: skip
        wait_until(lambda: ((get(consumer, path) or {}).get("status") or {}).get("resources", {}).get("pods")
                   == value, 30, f"the pool to grant {value} pods")  # fmt: skip

    set_pods(str(count))
    try:
        yield
    finally:
        set_pods(before)


# ---------------------------------------------------------------------------------------------- watch


@dataclass
class Seen:
    """Every version of one object name a Recorder saw."""

    uids: list[str] = field(default_factory=list)
    added: int = 0
    modified: int = 0
    deleted: int = 0
    phases: list[str] = field(default_factory=list)
    deletion_requested: bool = False
    reasons: set[str] = field(default_factory=set)


def admin_ssl(plane: ControlPlane) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=plane.ca_pem.decode())
    pki = plane.base_dir / "pki"
    ctx.load_cert_chain(pki / "admin.crt", pki / "admin.key")
    return ctx


class Background(threading.Thread):
    """A scenario's helper thread: a daemon (a failed test never waits for it) that runs until ``stop``."""

    def __init__(self, name: str, join_timeout: float = 10.0) -> None:
        super().__init__(name=name, daemon=True)
        self.join_timeout = join_timeout
        self._halt = threading.Event()

    def stop(self) -> None:
        self._halt.set()
        self.join(self.join_timeout)


class Recorder(Background):
    """Watches a collection path for the whole scenario and remembers every uid, phase and delete.

    Survives API server restarts and 410s (re-lists; objects met in a list count as seen, not added), so
    "a name that had two uids" is a duplicate even if both creations happened while we were re-listing.
    """

    def __init__(self, plane: ControlPlane, path: str, label: str = "") -> None:
        super().__init__(f"recorder-{label or path}")
        self.plane, self.path = plane, path
        self.seen: dict[str, Seen] = defaultdict(Seen)
        self.events = 0
        self.relists = 0
        self._lock = threading.Lock()
        self._ctx = admin_ssl(plane)
        self._synced = threading.Event()

    def __enter__(self) -> Recorder:
        self.start()
        if not self._synced.wait(30):
            raise TimeoutError(f"recorder for {self.path} did not sync")
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def snapshot(self) -> dict[str, Seen]:
        with self._lock:
            return dict(self.seen)

    def _note(self, etype: str, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name"))
        with self._lock:
            s = self.seen[name]
            u = str(meta.get("uid"))
            if u not in s.uids:
                s.uids.append(u)
            if etype == "ADDED":
                s.added += 1
            elif etype == "MODIFIED":
                s.modified += 1
            elif etype == "DELETED":
                s.deleted += 1
            status = obj.get("status") or {}
            ph = status.get("phase")
            if ph and (not s.phases or s.phases[-1] != ph):
                s.phases.append(str(ph))
            if status.get("reason"):
                s.reasons.add(str(status["reason"]))
            if meta.get("deletionTimestamp"):
                s.deletion_requested = True
            self.events += 1

    def _list(self) -> str:
        status, body = self.plane.api("GET", self.path)
        if status != 200:
            raise OSError(f"list {self.path}: {status}")
        for obj in body.get("items") or []:
            self._note("LISTED", obj)
        return str(body["metadata"]["resourceVersion"])

    def run(self) -> None:
        rv: str | None = None
        while not self._halt.is_set():
            try:
                if rv is None:
                    rv = self._list()
                    self.relists += 1
                    self._synced.set()
                url = (
                    f"{self.plane.url}{self.path}?watch=1&allowWatchBookmarks=true&timeoutSeconds=5"
                    f"&resourceVersion={rv}"
                )
                with urllib.request.urlopen(url, context=self._ctx, timeout=15) as resp:
                    for raw in resp:
                        ev = json.loads(raw)
                        if ev.get("type") == "ERROR":
                            rv = None  # 410: re-list
                            break
                        obj = ev["object"]
                        rv = str(obj["metadata"].get("resourceVersion") or rv)
                        if ev["type"] != "BOOKMARK":
                            self._note(ev["type"], obj)
                        if self._halt.is_set():
                            return
            except urllib.error.HTTPError as err:
                if err.code == 410:
                    rv = None
                time.sleep(0.3)
            except (OSError, ValueError, http.client.HTTPException):
                time.sleep(0.3)


# ---------------------------------------------------------------------------------------------- process


def proc_sample(pid: int) -> dict[str, int]:
    """RSS (bytes), open file descriptors and threads of a process, from /proc."""
    out = {"rss": 0, "fds": 0, "threads": 0}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                out["rss"] = int(line.split()[1]) * 1024
            elif line.startswith("Threads:"):
                out["threads"] = int(line.split()[1])
        out["fds"] = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return out


class Sampler(threading.Thread):
    """Samples a vkbridge process every `every` seconds: RSS, fds, threads, and its log length in lines."""

    def __init__(self, proc: VkbridgeProcess, every: float = 5.0) -> None:
        super().__init__(name="sampler", daemon=True)
        self.proc, self.every = proc, every
        self.t0 = time.monotonic()
        self.rows: list[dict[str, float]] = []
        self._halt = threading.Event()

    def sample(self) -> dict[str, float]:
        row: dict[str, float] = {"t": time.monotonic() - self.t0, **proc_sample(self.proc.pid)}
        row["log_lines"] = self.proc.log_text().count("\n")
        self.rows.append(row)
        return row

    def run(self) -> None:
        while not self._halt.is_set():
            self.sample()
            self._halt.wait(self.every)

    def stop(self) -> list[dict[str, float]]:
        self._halt.set()
        self.join(10)
        self.sample()
        return self.rows


def slope(rows: list[dict[str, float]], key: str, since: float = 0.0) -> float:
    """Least-squares growth of `key` per second over the rows at or after `since`."""
    pts = [(r["t"], r[key]) for r in rows if r["t"] >= since]
    if len(pts) < 2:
        return 0.0
    n = len(pts)
    mt = sum(t for t, _ in pts) / n
    mv = sum(v for _, v in pts) / n
    den = sum((t - mt) ** 2 for t, _ in pts)
    return 0.0 if den == 0 else sum((t - mt) * (v - mv) for t, v in pts) / den


def log_lines_since(proc: VkbridgeProcess, offset: int) -> list[str]:
    return [ln for ln in proc.log_text()[offset:].splitlines() if ln and not ln.startswith("---- ")]


LOG_LEVEL = re.compile(r"^\S+Z (DEBUG|INFO|WARNING|ERROR|CRITICAL)\s")


def wait_running_again(
    proc: VkbridgeProcess, consumer: ControlPlane, slug: str, mark: int, timeout: float
) -> float:
    """After a (re)start: seconds until this process says it runs and the node is Ready."""
    t0 = time.monotonic()
    proc.wait_for_log(r"vkbridge running", timeout, start=mark)
    wait_until(lambda: node_ready(consumer, slug) == "True", timeout, "the node to be Ready", interval=0.2)
    return time.monotonic() - t0


# ---------------------------------------------------------------------------------------------- figures


class Figures:
    """Named figures of one scenario, printed at teardown (also when an assertion failed)."""

    def __init__(self, title: str) -> None:
        self.title = title
        self.rows: list[tuple[str, str]] = []

    def add(self, name: str, value: object, unit: str = "") -> None:
        text = f"{value:.2f}" if isinstance(value, float) else str(value)
        self.rows.append((name, f"{text} {unit}".rstrip()))

    def mib(self, name: str, value: float) -> None:
        self.add(name, value / MiB, "MiB")

    def render(self) -> str:
        width = max((len(n) for n, _ in self.rows), default=0)
        lines = [f"\n== figures: {self.title}"]
        lines += [f"   {n:<{width}}  {v}" for n, v in self.rows]
        return "\n".join(lines)


def poll(cond: Callable[[], Any], timeout: float, interval: float = 0.2) -> float | None:
    """Seconds until cond() is truthy, or None after timeout (for figures that may not be reached)."""
    t0 = time.monotonic()
    try:
        wait_until(cond, timeout, "a figure", interval)
    except TimeoutError:
        return None
    return time.monotonic() - t0


def log_time(line: str) -> float | None:
    """Epoch seconds of a vkbridge text log line (None for continuation lines)."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z ", line)
    if not m:
        return None
    return dt.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=dt.UTC).timestamp()


_NS_REF = re.compile(r"(?:@|namespace=|pod=|key=)([a-z0-9][a-z0-9-]*)")


def about_other_namespace(line: str, ns: str) -> bool:
    """Is this log line about a namespace other than `ns` (or its remote twin)? Earlier tests' namespaces
    are still being torn down while a scenario measures its log volume; their lines are not its own."""
    return any(not ref.startswith(ns) for ref in _NS_REF.findall(line))
