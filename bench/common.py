"""The benchmark testbed and the measuring tools every bench script shares.

Bring-up follows e2e/demo.py: two control planes, fake pool workers in no-exec mode (thousands of pods
cost timers, not processes), the tunnel (in a subprocess of its own, so the bench's watch clients never
compete with it for the GIL), the peering bundle with a grant large enough for 20,000 tiny pods, the
pool emulator and vkbridge as deployed (a subprocess with Liqo's flags).

Timings come from our own watches on both API servers: each event is stamped when its bytes arrive,
before it is parsed, so a busy bench process delays parsing, not the stamp.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime as dt
import json
import math
import os
import platform
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import yaml

from e2e.binaries import find_binaries
from e2e.bundle import Bundle, create_bundle
from e2e.controlplane import ControlPlane, free_port
from e2e.emulator import EmulatorHandle, launch_emulator
from e2e.emulator.quantity import parse as parse_quantity
from e2e.fakekubelet import FakeKubeletHandle, launch_fake_kubelets
from e2e.fakekubelet.node import CAPACITY
from e2e.fixtures_pool import CONSUMER_ID, SLUG, offload_namespace
from e2e.planes import CONSUMER_SERVICE_CIDR, POOL_SERVICE_CIDR
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeOptions, VkbridgeProcess
from tests.integration.helpers import rs_path

T = TypeVar("T")
Obj = dict[str, Any]

REPO = Path(__file__).resolve().parent.parent
RESULTS_DIR = REPO / "bench" / "results"
USER_AGENT = "vkbridge-bench/1"
# Large enough for 20,000 pods of BENCH_REQUESTS each (GUIDE §4: the grant is enforced before sending).
BIG_GRANT = {"cpu": "1000", "memory": "4Ti", "pods": "20000", "ephemeral-storage": "20Ti"}
BENCH_REQUESTS = {"cpu": "1m", "memory": "1Mi"}
NODE_PODS = int(CAPACITY["pods"])

# DESIGN §5, as numbers the scripts compare against.
TARGETS = {
    "burst_ratio_at_1000": 1.15,
    "latency_p99_ms": 100.0,
    "writes_per_pod": 3.0,
    "rss_mb_at_10000": 250.0,
}


# ------------------------------------------------------------------------------------ machine and procs


def loadavg() -> list[float]:
    """`uptime`'s three load averages: other engineers' tests share this machine."""
    return [round(x, 2) for x in os.getloadavg()]


def machine_info() -> dict[str, Any]:
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    mem_kb = 0
    with contextlib.suppress(OSError, ValueError, IndexError):
        mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "cpu_model": model,
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_at_start": loadavg(),
        "hostname": platform.node(),
        "git": git_state(),
        "tree": str(REPO),
        "label": os.environ.get("VKBRIDGE_BENCH_LABEL", ""),
    }


def git_state() -> dict[str, Any]:
    """The commit measured, and whether product code had uncommitted changes (it is run from the tree)."""

    def git(*args: str) -> str:
        res = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
        return res.stdout.strip()

    dirty = git("status", "--porcelain", "--", "vkbridge", "reflectors").splitlines()
    return {"head": git("rev-parse", "--short", "HEAD"), "product_files_changed": len(dirty)}


_CLK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of one process from /proc/<pid>/stat (0 when it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return 0.0
    fields = raw.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK  # fields 14 and 15 of proc(5)


def sched_seconds(pid: int) -> tuple[float, float, int]:
    """(on-CPU s, waiting-for-a-CPU s, times scheduled) summed over a process's threads, from schedstat.

    The second number is how long the process was runnable but not running: on a shared 2-core machine
    it shows how much of a latency is the machine's, not the code's (divided by the third: the average
    wait each time it was scheduled).
    """
    run = wait = slices = 0
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return 0.0, 0.0, 0
    for t in tasks:
        try:
            fields = (t / "schedstat").read_text().split()
        except OSError:
            continue
        run += int(fields[0])
        wait += int(fields[1])
        slices += int(fields[2])
    return run / 1e9, wait / 1e9, slices


def proc_status_kb(pid: int, key: str) -> int:
    """A VmRSS/VmHWM-style line of /proc/<pid>/status, in KiB (0 when gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def mb(n_bytes: float) -> float:
    return round(n_bytes / 2**20, 1)


# ------------------------------------------------------------------------------------ numbers and output


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100); None for no values."""
    if not values:
        return None
    s = sorted(values)
    k = max(0, min(len(s) - 1, math.ceil(q / 100 * len(s)) - 1))
    return s[k]


def distribution_ms(seconds: Sequence[float]) -> dict[str, float | int | None]:
    """count, p50/p90/p99/max and mean of latencies given in seconds, in milliseconds."""

    def ms(v: float | None) -> float | None:
        return None if v is None else round(v * 1000, 1)

    return {
        "count": len(seconds),
        "p50_ms": ms(percentile(seconds, 50)),
        "p90_ms": ms(percentile(seconds, 90)),
        "p99_ms": ms(percentile(seconds, 99)),
        "max_ms": ms(max(seconds) if seconds else None),
        "mean_ms": ms(sum(seconds) / len(seconds) if seconds else None),
    }


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A plain fixed-width table (what the scripts print)."""
    cells = [[_cell(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True))
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(out)


def _cell(v: object) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.3f}" if abs(v) < 10 else f"{v:.1f}"
    return str(v)


def write_results(name: str, payload: Mapping[str, Any]) -> Path:
    """bench/results/<name>-<UTC timestamp>.json (the directory is git-ignored)."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS_DIR / f"{name}-{stamp}.json"
    doc = {"benchmark": name, "finished_at": stamp, "machine": machine_info(), **payload}
    path.write_text(json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n")
    return path


def say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')} load {' '.join(map(str, loadavg()))}] {msg}", flush=True)


def wait_for(cond: Callable[[], T | None], timeout: float, what: str, interval: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    while True:
        got = cond()
        if got:
            return got
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


# ------------------------------------------------------------------------------------ the workloads


def pod_spec(slug: str | None) -> Obj:
    """GUIDE §4 opt-in (toleration + nodeSelector) when slug is given; tiny requests; no-exec friendly.

    slug=None is the vanilla twin for the pool itself: vkbridge drops nodeSelector from the ShadowPod
    (LIQO §4.1), so the pool runs exactly this spec either way.
    """
    spec: Obj = {
        "restartPolicy": "Always",
        "terminationGracePeriodSeconds": 1,
        "containers": [
            {
                "name": "app",
                "image": "busybox:1.36",
                "command": ["sh", "-c", "sleep 3600"],
                "resources": {"requests": dict(BENCH_REQUESTS)},
            }
        ],
    }
    if slug is not None:
        spec["tolerations"] = [
            {"key": "multicloud.io/pool", "operator": "Equal", "value": slug, "effect": "NoSchedule"}
        ]
        spec["nodeSelector"] = {"multicloud.io/pool": slug}
    return spec


def deployment(name: str, replicas: int, slug: str | None) -> Obj:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod_spec(slug)},
        },
    }


def bare_pod(name: str, slug: str | None, labels: Mapping[str, str] | None = None) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": dict(labels or {"app": "churn"})},
        "spec": pod_spec(slug),
    }


# ------------------------------------------------------------------------------------ async API access


class AsyncLoop:
    """An event loop in a daemon thread: watches and paced writers run there, the script stays sync."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="bench-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.submit(coro).result(timeout)

    def close(self) -> None:
        async def cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            self.run(cancel_all(), timeout=10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class ApiError(Exception):
    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"{status}: {body[:300]}")
        self.status = status


class Api:
    """The bench's own admin client for one plane (raw JSON, its own user agent, no rate limit)."""

    def __init__(self, plane: ControlPlane, workdir: Path) -> None:
        cfg = yaml.safe_load(Path(plane.admin_kubeconfig).read_text())
        user = cfg["users"][0]["user"]
        workdir.mkdir(parents=True, exist_ok=True)
        cert, key = workdir / f"{plane.name}-bench.crt", workdir / f"{plane.name}-bench.key"
        cert.write_bytes(base64.b64decode(user["client-certificate-data"]))
        key.touch(mode=0o600)
        key.write_bytes(base64.b64decode(user["client-key-data"]))
        self.ssl = ssl.create_default_context(cadata=plane.ca_pem.decode())
        self.ssl.load_cert_chain(cert, key)
        self.base = plane.url
        self.name = plane.name
        self._session: aiohttp.ClientSession | None = None
        self._watch_session: aiohttp.ClientSession | None = None

    def _sess(self, watch: bool = False) -> aiohttp.ClientSession:
        attr = "_watch_session" if watch else "_session"
        s: aiohttp.ClientSession | None = getattr(self, attr)
        if s is None or s.closed:
            s = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(ssl=self.ssl, limit=0 if watch else 64),
                headers={"User-Agent": USER_AGENT, "Accept": "application/json"},
                timeout=aiohttp.ClientTimeout(total=None, connect=10),
            )
            setattr(self, attr, s)
        return s

    async def request(
        self, method: str, path: str, body: Any = None, *, content_type: str = "application/json"
    ) -> Obj:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else None
        async with self._sess().request(
            method, self.base + path, data=data, headers=headers, timeout=aiohttp.ClientTimeout(total=60)
        ) as resp:
            raw = await resp.read()
            if resp.status >= 300:
                raise ApiError(resp.status, raw.decode(errors="replace"))
            out: Obj = json.loads(raw) if raw else {}
            return out

    async def watch(
        self,
        path: str,
        handler: Callable[[str, Obj, float], None],
        params: Mapping[str, str] | None = None,
    ) -> None:
        """List, then watch from the list's resourceVersion forever; handler(type, obj, arrival)."""
        rv: str | None = None
        while True:
            if rv is None:
                q = urlencode(dict(params or {}))
                lst = await self.request("GET", f"{path}?{q}" if q else path)
                rv = str(lst["metadata"]["resourceVersion"])
                now = time.monotonic()
                for item in lst.get("items") or []:
                    handler("ADDED", item, now)
            q = urlencode(
                {
                    **dict(params or {}),
                    "watch": "1",
                    "resourceVersion": rv,
                    "allowWatchBookmarks": "true",
                    "timeoutSeconds": "900",
                }
            )
            try:
                rv = await self._stream(f"{path}?{q}", handler, rv)
            except (TimeoutError, aiohttp.ClientError):
                await asyncio.sleep(0.2)

    async def _stream(self, url: str, handler: Callable[[str, Obj, float], None], rv: str) -> str | None:
        async with self._sess(watch=True).get(self.base + url) as resp:
            if resp.status == 410:
                return None
            if resp.status >= 300:
                raise ApiError(resp.status, (await resp.read()).decode(errors="replace"))
            buf = b""
            async for chunk in resp.content.iter_any():
                arrival = time.monotonic()
                buf += chunk
                while True:
                    nl = buf.find(b"\n")
                    if nl < 0:
                        break
                    line, buf = buf[:nl], buf[nl + 1 :]
                    if not line.strip():
                        continue
                    ev = json.loads(line)
                    obj = ev.get("object") or {}
                    if ev.get("type") == "ERROR":
                        return None if obj.get("code") == 410 else rv
                    rv = str((obj.get("metadata") or {}).get("resourceVersion") or rv)
                    if ev.get("type") != "BOOKMARK":
                        handler(str(ev.get("type")), obj, arrival)
        return rv

    async def close(self) -> None:
        for s in (self._session, self._watch_session):
            if s is not None:
                await s.close()


def phase(obj: Obj) -> str:
    return str((obj.get("status") or {}).get("phase") or "")


def name_of(obj: Obj) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


@dataclass
class FirstSeen:
    """First arrival time of a condition per object name (a thread-safe enough dict under the GIL)."""

    at: dict[str, float] = field(default_factory=dict)

    def mark(self, name: str, t: float) -> None:
        if name not in self.at:
            self.at[name] = t

    def __len__(self) -> int:
        return len(self.at)

    def times(self) -> list[float]:
        return sorted(self.at.values())


def watch_phase(
    api: Api,
    loop: AsyncLoop,
    path: str,
    running: FirstSeen,
    *,
    bound: FirstSeen | None = None,
    added: FirstSeen | None = None,
    params: Mapping[str, str] | None = None,
) -> Future[None]:
    """Stamp, per pod name, the first sight of the object, of spec.nodeName, and of phase Running."""

    def handle(etype: str, obj: Obj, t: float) -> None:
        n = name_of(obj)
        if added is not None and etype != "DELETED":
            added.mark(n, t)
        if bound is not None and (obj.get("spec") or {}).get("nodeName"):
            bound.mark(n, t)
        if phase(obj) == "Running":
            running.mark(n, t)

    return loop.submit(api.watch(path, handle, params))


# ------------------------------------------------------------------------------------ metrics scraping

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_prometheus(text: str, metric: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Samples of one metric: sorted label pairs -> value."""
    out: dict[tuple[tuple[str, str], ...], float] = {}
    for line in text.splitlines():
        if not line.startswith(metric):
            continue
        m = _SAMPLE.match(line)
        if not m or m.group(1) != metric:
            continue
        labels = tuple(sorted(_LABEL.findall(m.group(2) or "")))
        with contextlib.suppress(ValueError):
            out[labels] = float(m.group(3))
    return out


def apiserver_requests(plane: ControlPlane) -> dict[tuple[tuple[str, str], ...], float]:
    status, text = plane.api("GET", "/metrics", timeout=60)
    if status != 200 or not isinstance(text, str):
        raise RuntimeError(f"{plane.name} /metrics: {status}")
    return parse_prometheus(text, "apiserver_request_total")


def vk_metrics_text(port: int) -> str | None:
    """vkbridge's own /metrics, or None when nothing answers (the server may not be wired yet)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=3) as resp:
            return str(resp.read().decode())
    except OSError:
        return None


def histogram_from_text(text: str, name: str, label: str, value: str) -> dict[str, float]:
    """Cumulative buckets of one histogram series: le -> count, plus _count and _sum."""
    out: dict[str, float] = {}
    for labels, v in parse_prometheus(text, name + "_bucket").items():
        d = dict(labels)
        if d.get(label) == value:
            out[d["le"]] = v
    for suffix in ("_count", "_sum"):
        for labels, v in parse_prometheus(text, name + suffix).items():
            if dict(labels).get(label) == value:
                out[suffix] = v
    return out


def vk_counters(text: str) -> dict[str, float]:
    """vkbridge's counters and gauges (no histogram buckets), summed over labels except a few kept."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = _SAMPLE.match(line)
        if not m or line.startswith("#") or m.group(1).endswith(("_bucket", "_created")):
            continue
        if not m.group(1).startswith(("vkbridge_", "liqo_")):
            continue
        labels = dict(_LABEL.findall(m.group(2) or ""))
        keep = ",".join(f"{k}={labels[k]}" for k in ("cluster", "verb", "direction", "queue") if k in labels)
        key = m.group(1) + (f"{{{keep}}}" if keep else "")
        with contextlib.suppress(ValueError):
            out[key] = out.get(key, 0.0) + float(m.group(3))
    return out


_VK_CREATED = re.compile(r"ShadowPod created pod=(\S+) .*?elapsed=([0-9.]+)(ms|s)")


def vk_log_outbound(log_text: str, namespace: str) -> list[float]:
    """vkbridge's own view of outbound latency (its first handle -> ShadowPod created), from its log."""
    out = []
    for m in _VK_CREATED.finditer(log_text):
        if m.group(1).startswith(namespace + "/"):
            v = float(m.group(2))
            out.append(v / 1000 if m.group(3) == "ms" else v)
    return out


# ------------------------------------------------------------------------------------ profiling


class PySpy:
    """`py-spy record` of one pid into raw collapsed stacks (plus a speedscope file when asked)."""

    def __init__(self, pid: int, out: Path, rate: int = 100) -> None:
        self.pid, self.out, self.rate = pid, out, rate
        self.proc: subprocess.Popen[bytes] | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("py-spy") is not None

    def start(self) -> PySpy:
        self.out.parent.mkdir(parents=True, exist_ok=True)
        argv = ["py-spy", "record", "--pid", str(self.pid), "--rate", str(self.rate), "--nonblocking"]
        argv += ["--format", "raw", "--output", str(self.out)]
        self.proc = subprocess.Popen(
            argv, stdout=subprocess.DEVNULL, stderr=(self.out.with_suffix(".err")).open("wb")
        )
        return self

    def stop(self) -> Path | None:
        if self.proc is None:
            return None
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.out if self.out.exists() else None


def top_frames(collapsed: Path, n: int = 20, repo_only: bool = False) -> dict[str, list[tuple[str, float]]]:
    """Self and inclusive sample shares per frame ("function (file:line)") from collapsed stacks."""
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    total = 0
    for line in collapsed.read_text(errors="replace").splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        total += count
        frames = [f for f in stack.split(";") if not f.startswith(("process ", "thread "))]
        frames = [re.sub(r":\d+\)$", ")", f) for f in frames]  # per function, not per line
        if not frames:
            continue
        own[frames[-1]] += count
        for f in set(frames):
            incl[f] += count
    if total == 0:
        return {"self": [], "inclusive": [], "samples": []}

    def keep(f: str) -> bool:
        return not repo_only or "vkbridge/" in f or "reflectors/" in f

    def share(c: Counter[str]) -> list[tuple[str, float]]:
        return [(f, round(100 * v / total, 1)) for f, v in c.most_common() if keep(f)][:n]

    return {"self": share(own), "inclusive": share(incl), "samples": [("total", float(total))]}


# ------------------------------------------------------------------------------------ the testbed


AUDIT_POLICY = {
    "apiVersion": "audit.k8s.io/v1",
    "kind": "Policy",
    "omitStages": ["RequestReceived"],
    "rules": [
        {"level": "None", "nonResourceURLs": ["/metrics", "/livez*", "/readyz*", "/healthz*", "/version"]},
        {"level": "Metadata"},
    ],
}


@dataclass
class TestbedOptions:
    nodes: int = 2
    vkbridge: bool = True
    audit: bool = False
    kcm_qps: int | None = None
    vk_args: list[str] = field(default_factory=list)
    pod_workers: int = 10
    workdir: Path | None = None
    keep: bool = False
    tracemalloc: bool = (
        False  # run vkbridge under tracemalloc (memory.py --tracemalloc: slower, for a profile)
    )


class Testbed:
    """Everything a benchmark runs against; `with Testbed(opts) as tb:` brings it up and tears it down."""

    __test__ = False  # not a pytest class

    def __init__(self, opts: TestbedOptions) -> None:
        self.opts = opts
        base = opts.workdir or Path(tempfile.gettempdir())
        base.mkdir(parents=True, exist_ok=True)
        self.work = Path(tempfile.mkdtemp(prefix="vkbridge-bench-", dir=base))
        self.consumer: ControlPlane
        self.pool: ControlPlane
        self.fake: FakeKubeletHandle | None = None
        self.tunnel: subprocess.Popen[bytes] | None = None
        self.tunnel_url = ""
        self.bundle: Bundle
        self.emulator: EmulatorHandle | None = None
        self.vk: VkbridgeProcess | None = None
        self.loop = AsyncLoop()
        self.apis: dict[str, Api] = {}
        self.audit_logs: dict[str, Path] = {}
        self.startup_seconds = 0.0

    # -- lifecycle

    def __enter__(self) -> Testbed:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        t0 = time.monotonic()
        say(f"starting the planes in {self.work} (audit={'on' if self.opts.audit else 'off'})")
        bins = find_binaries()
        extra: dict[str, dict[str, list[str]]] = {"consumer": {}, "pool": {}}
        if self.opts.audit:
            policy = self.work / "audit-policy.yaml"
            policy.write_text(yaml.safe_dump(AUDIT_POLICY))
            for name in extra:
                self.audit_logs[name] = self.work / f"audit-{name}.log"
                extra[name]["kube-apiserver"] = [
                    f"--audit-policy-file={policy}",
                    f"--audit-log-path={self.audit_logs[name]}",
                    "--audit-log-format=json",
                    "--audit-log-maxsize=0",
                ]
        if self.opts.kcm_qps:
            for name in extra:
                qps = self.opts.kcm_qps
                kcm = [f"--kube-api-qps={qps}", f"--kube-api-burst={qps * 2}"]
                extra[name]["kube-controller-manager"] = kcm
        self.consumer = ControlPlane(
            "consumer", base_dir=self.work, service_cidr=CONSUMER_SERVICE_CIDR, bins=bins,
            extra_args=extra["consumer"],
        )  # fmt: skip
        self.pool = ControlPlane(
            "pool", base_dir=self.work, service_cidr=POOL_SERVICE_CIDR, bins=bins, extra_args=extra["pool"]
        )
        with ThreadPoolExecutor(2) as ex:
            for f in [ex.submit(p.start, 180, True) for p in (self.consumer, self.pool)]:
                f.result()
        say(f"planes up; {self.opts.nodes} fake pool workers (no-exec), tunnel, bundle, emulator")
        cert, key = self.pool.ca.issue(
            "system:node:pool-workers", ["system:nodes"], server=True, ips=["127.0.0.1"]
        )
        assert key is not None
        nodes = [f"pool-worker-{i}" for i in range(self.opts.nodes)]
        self.fake = launch_fake_kubelets(
            self.pool.admin_kubeconfig, nodes, cert, key, self.work / "fakekubelet", no_exec=True,
            events="warnings", log_level="warning", timeout=120,
        )  # fmt: skip
        self._start_tunnel()
        self.bundle = create_bundle(
            self.consumer, self.pool, slug=SLUG, consumer_id=CONSUMER_ID, pool_server_url=self.tunnel_url,
            grant=BIG_GRANT,
        )  # fmt: skip
        pool_ca = self.pool.ca.write(self.work / "pool-ca", "pool-ca")
        consumer_ca = self.consumer.ca.write(self.work / "consumer-ca", "consumer-ca")
        self.emulator = launch_emulator(
            consumer_kubeconfig=self.consumer.admin_kubeconfig, pool_kubeconfig=self.pool.admin_kubeconfig,
            consumer_id=CONSUMER_ID, slug=SLUG, pool_ca_cert=pool_ca[0], pool_ca_key=pool_ca[1],
            consumer_ca_cert=consumer_ca[0], consumer_ca_key=consumer_ca[1], workdir=self.work / "emulator",
            api_server_url=self.tunnel_url,
        )  # fmt: skip
        for plane in (self.consumer, self.pool):
            self.apis[plane.name] = Api(plane, self.work / "bench-pki")
        if self.opts.vkbridge:
            self.start_vkbridge()
        self.startup_seconds = time.monotonic() - t0
        say(f"testbed up in {self.startup_seconds:.0f}s")

    def start_vkbridge(self) -> VkbridgeProcess:
        opts = VkbridgeOptions(
            home_kubeconfig=self.consumer.admin_kubeconfig, slug=SLUG, consumer_id=CONSUMER_ID,
            secret_name=self.bundle.secret_name, tenant_ns=self.bundle.tenant_ns,
            pod_workers=self.opts.pod_workers, extra_args=list(self.opts.vk_args),
        )  # fmt: skip
        cls = TracedVkbridge if self.opts.tracemalloc else VkbridgeProcess
        self.vk = cls(opts, self.work / "vkbridge.log").start()
        wait_for(self._node_ready, 120, "the virtual node to be Ready", 0.5)
        self.set_grant(BIG_GRANT)
        say(f"vkbridge pid {self.vk.pid} ready, grant {BIG_GRANT}")
        return self.vk

    def set_grant(self, resources: Mapping[str, str], timeout: float = 60) -> None:
        """helpers.set_grant, comparing quantities by value: the Node shows "1000" cpu as "1k"."""
        path = rs_path(self.bundle)
        patch = {"spec": {"resources": dict(resources)}}
        self.consumer.api("PATCH", path, patch, content_type="application/merge-patch+json")

        def same(have: Mapping[str, Any]) -> bool:
            return all(
                k in have and parse_quantity(have[k]) == parse_quantity(v) for k, v in resources.items()
            )

        def granted() -> bool:
            _, rs = self.consumer.api("GET", path)
            _, node = self.consumer.api("GET", f"/api/v1/nodes/{SLUG}")
            return same(((rs.get("status") or {}).get("resources")) or {}) and same(
                (node.get("status") or {}).get("capacity") or {}
            )

        wait_for(granted, timeout, f"the grant {dict(resources)} on the ResourceSlice and the node", 0.5)

    def _start_tunnel(self) -> None:
        ready = self.work / "tunnel.ready"
        log = (self.work / "tunnel.log").open("ab")
        self.tunnel = subprocess.Popen(
            [sys.executable, "-m", "bench.common", "tunnel", str(self.pool.port), str(ready)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        port: str = wait_for(
            lambda: (ready.exists() and ready.read_text().strip()) or None, 30, "the tunnel", 0.05
        )
        self.tunnel_url = f"https://127.0.0.1:{int(port)}"

    def _node_ready(self) -> bool:
        status, node = self.consumer.api("GET", f"/api/v1/nodes/{SLUG}")
        conds = (node.get("status") or {}).get("conditions") or [] if status == 200 else []
        return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)

    def stop(self) -> None:
        if self.opts.keep:
            # The planes stop with this process (atexit) and the emulator and vkbridge need them, so
            # "keep" means: stay up until interrupted, then tear down as usual (leaving nothing behind).
            planes = [getattr(self, n, None) for n in ("consumer", "pool")]
            dirs = ", ".join(str(p.base_dir) for p in planes if p is not None)
            say(f"testbed kept for inspection; admin.kubeconfig in {dirs}; Ctrl-C to tear it down")

            def interrupt(_sig: int, _frame: object) -> None:
                raise KeyboardInterrupt

            previous = signal.signal(signal.SIGTERM, interrupt)  # `kill` too tears it down cleanly
            try:
                with contextlib.suppress(KeyboardInterrupt):
                    while True:
                        time.sleep(3600)
            finally:
                signal.signal(signal.SIGTERM, previous)
        with contextlib.suppress(Exception):
            self.loop.run(self._close_apis(), timeout=10)
        self.loop.close()
        stops: list[Callable[[], object]] = [
            h.stop for h in (self.vk, self.emulator, self.fake) if h is not None
        ]
        for stop in [*stops, self._stop_tunnel]:
            try:
                stop()
            except Exception as exc:
                print(f"teardown: {exc}", file=sys.stderr)
        planes = [p for p in (getattr(self, "consumer", None), getattr(self, "pool", None)) if p is not None]
        with ThreadPoolExecutor(2) as ex:
            list(ex.map(lambda p: p.stop(), planes))
        shutil.rmtree(self.work, ignore_errors=True)

    def _stop_tunnel(self) -> None:
        if self.tunnel is not None and self.tunnel.poll() is None:
            self.tunnel.terminate()
            try:
                self.tunnel.wait(5)
            except subprocess.TimeoutExpired:
                self.tunnel.kill()
                self.tunnel.wait()

    async def _close_apis(self) -> None:
        for api in self.apis.values():
            await api.close()

    # -- helpers for the scripts

    def api(self, plane: str) -> Api:
        return self.apis[plane]

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        return self.loop.run(coro, timeout)

    def create_namespace(self, plane: ControlPlane, name: str) -> None:
        status, body = plane.api("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
        if status not in (201, 409):
            raise RuntimeError(f"namespace {name} on {plane.name}: {status} {body}")
        sa = f"/api/v1/namespaces/{name}/serviceaccounts/default"
        wait_for(lambda: plane.api("GET", sa)[0] == 200, 60, f"the default service account in {name}")

    def offloaded_namespace(self, name: str) -> str:
        """A consumer namespace offloaded the GUIDE §3.7 way; returns its remote namespace."""
        self.create_namespace(self.consumer, name)
        return offload_namespace(self.consumer, self.pool, name, timeout=120)

    def delete_namespace(self, plane: ControlPlane, name: str, timeout: float = 900) -> float:
        """Delete a namespace and wait until it is gone; returns the seconds it took (inf on timeout)."""
        t0 = time.monotonic()
        plane.api("DELETE", f"/api/v1/namespaces/{name}")
        try:
            wait_for(lambda: plane.api("GET", f"/api/v1/namespaces/{name}")[0] == 404, timeout, name, 1.0)
        except TimeoutError:
            return math.inf
        return time.monotonic() - t0

    def count_pods(self, plane: ControlPlane, namespace: str) -> int:
        status, body = plane.api("GET", f"/api/v1/namespaces/{namespace}/pods?limit=1")
        if status != 200:
            return -1
        return len(body.get("items") or []) + int((body.get("metadata") or {}).get("remainingItemCount") or 0)

    def pids(self) -> dict[str, int]:
        """Every process of the testbed, named (for CPU and memory accounting)."""
        out: dict[str, int] = {}
        for plane in (self.consumer, self.pool):
            for comp, pid in plane.pids().items():
                out[f"{plane.name}/{comp}"] = pid
        if self.emulator is not None and self.emulator.proc is not None:
            out["emulator"] = self.emulator.proc.pid
        if self.fake is not None:
            out["fakekubelet"] = self.fake.process.pid
        if self.tunnel is not None:
            out["tunnel"] = self.tunnel.pid
        if self.vk is not None and self.vk.alive():
            out["vkbridge"] = self.vk.pid
        return out

    def cpu_snapshot(self) -> dict[str, float]:
        return {name: cpu_seconds(pid) for name, pid in self.pids().items()}

    def sched_snapshot(self) -> dict[str, tuple[float, float, int]]:
        return {name: sched_seconds(pid) for name, pid in self.pids().items()}

    def rss_snapshot(self) -> dict[str, float]:
        return {name: mb(proc_status_kb(pid, "VmRSS") * 1024) for name, pid in self.pids().items()}

    def vk_cpu(self) -> float:
        return cpu_seconds(self.vk.pid) if self.vk is not None else 0.0

    def vk_rss_mb(self) -> float:
        return mb(self.vk.rss_bytes()) if self.vk is not None else 0.0

    def vk_hwm_mb(self) -> float:
        return mb(proc_status_kb(self.vk.pid, "VmHWM") * 1024) if self.vk is not None else 0.0


class TracedVkbridge(VkbridgeProcess):
    """vkbridge under tracemalloc; `snapshot()` writes its top allocation sites to a file and returns it."""

    def start(self) -> VkbridgeProcess:
        self.trace_dir = self.log_path.parent / "tracemalloc"
        self.trace_dir.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "POD_NAME": f"vk-{self.opts.slug}-0", "POD_NAMESPACE": self.opts.tenant_ns}
        env["VKBRIDGE_BENCH_TRACE_DIR"] = str(self.trace_dir)
        with open(self.log_path, "ab") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "bench.common", "traced-vkbridge", *self.opts.argv()],
                stdout=out, stderr=subprocess.STDOUT, cwd=REPO, env=env, start_new_session=True,
            )  # fmt: skip
        return self

    def snapshot(self, label: str, timeout: float = 300) -> Path:
        out = self.trace_dir / f"{label}.txt"
        (self.trace_dir / "request").write_text(label)
        wait_for(lambda: out.exists(), timeout, f"the tracemalloc snapshot {label}", 1.0)
        return out


def _traced_vkbridge_main(argv: list[str]) -> None:
    """vkbridge with tracemalloc on; a thread answers snapshot requests (a file) with top allocation sites."""
    import runpy
    import tracemalloc

    tracemalloc.start(6)
    trace_dir = Path(os.environ["VKBRIDGE_BENCH_TRACE_DIR"])

    def serve() -> None:
        while True:
            time.sleep(1.0)
            req = trace_dir / "request"
            if not req.exists():
                continue
            label = req.read_text().strip() or "snapshot"
            req.unlink()
            snap = tracemalloc.take_snapshot().filter_traces(
                [tracemalloc.Filter(False, tracemalloc.__file__), tracemalloc.Filter(False, "<frozen *>")]
            )
            total = sum(s.size for s in snap.statistics("filename"))
            lines = [f"traced total: {total / 2**20:.1f} MiB"]
            for key in ("filename", "lineno"):
                lines.append(f"--- top by {key}")
                for st in snap.statistics(key)[:40]:
                    lines.append(f"{st.size / 2**20:8.1f} MiB {st.count:9d} blocks  {st.traceback}")
            lines.append("--- top tracebacks")
            for st in snap.statistics("traceback")[:15]:
                lines.append(f"{st.size / 2**20:8.1f} MiB {st.count:9d} blocks")
                lines.extend("      " + line for line in st.traceback.format())
            tmp = trace_dir / f"{label}.tmp"
            tmp.write_text("\n".join(lines) + "\n")
            tmp.replace(trace_dir / f"{label}.txt")

    threading.Thread(target=serve, name="tracemalloc-snapshots", daemon=True).start()
    sys.argv = ["vkbridge", *argv]
    runpy.run_module("vkbridge", run_name="__main__", alter_sys=True)


def cpu_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    return {k: round(after[k] - before.get(k, 0.0), 2) for k in after}


def sched_delta(
    before: Mapping[str, tuple[float, float, int]], after: Mapping[str, tuple[float, float, int]]
) -> dict[str, dict[str, float]]:
    """Per process: seconds on a CPU, seconds runnable but waiting for one, mean wait per scheduling."""
    out = {}
    for k, (run, wait, slices) in after.items():
        r0, w0, s0 = before.get(k, (0.0, 0.0, 0))
        out[k] = {
            "on_cpu_s": round(run - r0, 2),
            "runqueue_wait_s": round(wait - w0, 2),
            "mean_wait_ms": round((wait - w0) / max(1, slices - s0) * 1000, 2),
        }
    return out


def nodes_for(pods: int) -> int:
    """Fake pool workers for a number of pods (1,000 each), with one spare, at least two."""
    return max(2, math.ceil(pods / (NODE_PODS * 0.9)) + 1)


def common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", type=Path, default=None, help="where the planes live (default: $TMPDIR)")
    p.add_argument(
        "--keep", action="store_true", help="at the end, keep the testbed up until Ctrl-C (to inspect it)"
    )
    p.add_argument("--profile", action="store_true", help="py-spy record vkbridge during the measurement")
    p.add_argument(
        "--vk-arg",
        action="append",
        default=[],
        help="extra vkbridge flag (repeat): --vk-arg=--client-qps=200",
    )
    p.add_argument("--pod-workers", type=int, default=10, help="vkbridge --pod-reflection-workers")


async def gather_limited(coros: Iterable[Awaitable[T]], limit: int) -> list[T | BaseException]:
    sem = asyncio.Semaphore(limit)

    async def one(c: Awaitable[T]) -> T | BaseException:
        async with sem:
            try:
                return await c
            except Exception as exc:
                return exc

    return await asyncio.gather(*(one(c) for c in coros))


# ------------------------------------------------------------------------------------ tunnel subprocess


def _tunnel_main(target_port: int, ready: Path) -> int:
    proxy = TunnelProxy("127.0.0.1", target_port, listen_port=free_port())
    proxy.start()
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(str(proxy.port))
    tmp.replace(ready)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = os.getppid()
    while not stop.wait(1.0):
        if os.getppid() != parent:
            break
    proxy.stop()
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "tunnel":
        sys.exit(_tunnel_main(int(sys.argv[2]), Path(sys.argv[3])))
    if len(sys.argv) > 1 and sys.argv[1] == "traced-vkbridge":
        _traced_vkbridge_main(sys.argv[2:])
    print(
        "usage: python -m bench.common tunnel <target-port> <ready-file> | traced-vkbridge <flags>",
        file=sys.stderr,
    )
    sys.exit(2)


def watch_reflection(
    tb: Testbed, ns: str, remote: str, running: FirstSeen, bound: FirstSeen, shadows: FirstSeen,
    remote_running: FirstSeen,
) -> list[Future[None]]:  # fmt: skip
    """The three watches a reflected pod's journey is timed by: local pods (bound, Running), ShadowPods
    (created) and remote pods (Running)."""
    return [
        watch_phase(tb.api("consumer"), tb.loop, f"/api/v1/namespaces/{ns}/pods", running, bound=bound),
        watch_phase(
            tb.api("pool"),
            tb.loop,
            f"/apis/offloading.liqo.io/v1beta1/namespaces/{remote}/shadowpods",
            FirstSeen(),
            added=shadows,
        ),
        watch_phase(tb.api("pool"), tb.loop, f"/api/v1/namespaces/{remote}/pods", remote_running),
    ]
