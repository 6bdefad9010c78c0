"""The benchmark testbed: two planes, fake workers, tunnel, bundle, emulator and the VK under test.

Bring-up follows e2e/demo.py: two control planes, fake pool workers in no-exec mode (thousands of pods
cost timers, not processes), the tunnel (in a subprocess of its own, bench/tunnel_proc.py), the peering
bundle with a grant large enough for 20,000 tiny pods, the pool emulator and the implementation under test
as deployed: vkbridge (a subprocess with Liqo's flags) or Liqo v1.2's own virtual kubelet (e2e/liqo_vk.py,
with the ForeignCluster and the two extra CRDs it needs, installed for every impl so the testbed is the
same), or none ("vanilla": pods go to the pool directly). `--isolate` pins the VK to a core of its own.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Coroutine, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from bench.isolation import affinity, pin_tree, split_cores, thread_pinned
from bench.kubeapi import Api, AsyncLoop
from bench.measure import REPO, cpu_seconds, mb, proc_status_kb, sched_seconds
from bench.report import say, yes_no
from bench.traced import TracedVkbridge
from e2e.audit import audit_args
from e2e.binaries import find_binaries
from e2e.bundle import Bundle, create_bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle, launch_emulator, names
from e2e.emulator.kube import api_path
from e2e.emulator.quantity import parse as parse_quantity
from e2e.fakekubelet import FakeKubeletHandle, launch_fake_kubelets
from e2e.fakekubelet.node import CAPACITY
from e2e.fixtures_pool import CONSUMER_ID, SLUG, offload_namespace
from e2e.liqo_chart import liqo_crds_dir
from e2e.liqo_vk import LiqoVkProcess, ensure_foreign_cluster
from e2e.planes import CONSUMER_SERVICE_CIDR, POOL_SERVICE_CIDR
from e2e.procs import end_process, raise_interrupt, start_or_stop
from e2e.vkbridge_proc import VkbridgeOptions, VkbridgeProcess
from e2e.waiting import wait_until

T = TypeVar("T")
IMPLS = ("vkbridge", "liqo", "vanilla")
# Liqo's VK panics when its first node ping times out (seen on a loaded machine): a Deployment restarts it.
START_ATTEMPTS = 3


# Large enough for 20,000 pods of BENCH_REQUESTS each (GUIDE §4: the grant is enforced before sending).
BIG_GRANT = {"cpu": "1000", "memory": "4Ti", "pods": "20000", "ephemeral-storage": "20Ti"}


NODE_PODS = int(CAPACITY["pods"])


AUDIT_RULES: list[dict[str, Any]] = [
    {"level": "None", "nonResourceURLs": ["/metrics", "/livez*", "/readyz*", "/healthz*", "/version"]},
    {"level": "Metadata"},
]


@dataclass
class TestbedOptions:
    nodes: int = 2
    impl: str = "vkbridge"  # or "liqo" (Liqo v1.2's own VK) or "vanilla" (no VK: pods on the pool)
    isolate: bool = False  # the VK on a core of its own, everything else on the others
    audit: bool = False
    kcm_qps: int | None = None
    vk_args: list[str] = field(default_factory=list)
    pod_workers: int = 10
    kubelet_events: str = "warnings"  # what the fake pool workers post ("all": a real kubelet's)
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
        self.all_cores = set(os.sched_getaffinity(0))
        self.vk_cores: set[int] | None = None
        self.other_cores: set[int] | None = None
        if opts.isolate:
            self.vk_cores, self.other_cores = split_cores(self.all_cores)
        self.isolated = False
        self.consumer: ControlPlane
        self.pool: ControlPlane
        self.fake: FakeKubeletHandle | None = None
        self.tunnel: subprocess.Popen[bytes] | None = None
        self.tunnel_url = ""
        self.bundle: Bundle
        self.emulator: EmulatorHandle | None = None
        self.vk: VkbridgeProcess | None = None
        self.vk_start_attempts = 0
        self.vk_restarts = 0  # by revive_vk, between two benchmarks of bench.run_all
        if opts.isolate:
            self.set_isolation(True)  # before any thread or child exists: they all inherit it
        self.loop = AsyncLoop()
        self.apis: dict[str, Api] = {}
        self.audit_logs: dict[str, Path] = {}
        self.startup_seconds = 0.0

    # -- lifecycle

    def __enter__(self) -> Testbed:
        if threading.current_thread() is threading.main_thread():
            # TERM's default action exits at once and leaves both planes, the workers and the VK running;
            # as KeyboardInterrupt it unwinds through __exit__, which stops them.
            signal.signal(signal.SIGTERM, raise_interrupt)
        start_or_stop(self.start, self.stop)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        t0 = time.monotonic()
        say(
            f"starting the planes in {self.work} (audit={'on' if self.opts.audit else 'off'}, "
            f"impl {self.opts.impl}, isolated={yes_no(self.isolated)})"
        )
        bins = find_binaries()
        extra: dict[str, dict[str, list[str]]] = {"consumer": {}, "pool": {}}
        if self.opts.audit:
            self.audit_logs = {name: self.work / f"audit-{name}.log" for name in extra}
            extra = audit_args(self.work / "audit-policy.yaml", AUDIT_RULES, self.audit_logs)
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
        liqo_crds_dir()  # fetched once, before the threads, when missing
        with ThreadPoolExecutor(2) as ex:
            for f in [ex.submit(self._bring_up, p) for p in (self.consumer, self.pool)]:
                f.result()
        say(f"planes up; {self.opts.nodes} fake pool workers (no-exec), tunnel, bundle, emulator")
        cert, key = self.pool.ca.issue(
            "system:node:pool-workers", ["system:nodes"], server=True, ips=["127.0.0.1"]
        )
        assert key is not None
        nodes = [f"pool-worker-{i}" for i in range(self.opts.nodes)]
        self.fake = launch_fake_kubelets(
            self.pool.admin_kubeconfig, nodes, cert, key, self.work / "fakekubelet", no_exec=True,
            events=self.opts.kubelet_events, log_level="warning", timeout=120,
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
        if self.opts.impl != "vanilla":
            self.start_vk()
        self.startup_seconds = time.monotonic() - t0
        say(f"testbed up in {self.startup_seconds:.0f}s")

    def _bring_up(self, plane: ControlPlane) -> None:
        """A plane with every CRD of Liqo's chart (its VK waits for two vkbridge never uses): one testbed."""
        plane.start(180, True)

    def start_vk(self) -> VkbridgeProcess:
        """The implementation under test, as deployed (Liqo's flags), started on its core when isolated."""
        opts = VkbridgeOptions(
            home_kubeconfig=self.consumer.admin_kubeconfig, slug=SLUG, consumer_id=CONSUMER_ID,
            secret_name=self.bundle.secret_name, tenant_ns=self.bundle.tenant_ns,
            pod_workers=self.opts.pod_workers, extra_args=list(self.opts.vk_args),
        )  # fmt: skip
        vk: VkbridgeProcess
        if self.opts.impl == "liqo":
            ensure_foreign_cluster(self.consumer, SLUG, self.bundle.tenant_ns)
            vk = LiqoVkProcess(opts, self.work / "liqo-vk.log")
        elif self.opts.tracemalloc:
            vk = TracedVkbridge(opts, self.work / "vkbridge.log")
        else:
            vk = VkbridgeProcess(opts, self.work / "vkbridge.log")
        for attempt in range(1, START_ATTEMPTS + 1):
            with thread_pinned(self.vk_cores if self.isolated else None):
                self.vk = vk.start()
            if self.isolated:
                self.set_isolation(True)
            try:
                wait_until(self._vk_ready, 120, f"the virtual node to be Ready ({self.opts.impl})", 0.5)
                break
            except RuntimeError as err:  # it exited: start it again, as its Deployment would
                if attempt == START_ATTEMPTS:
                    raise
                last = next((ln for ln in reversed(str(err).splitlines()) if ln.strip()), "")
                say(f"{self.opts.impl} exited while starting (attempt {attempt}): {last[:200]}; again")
        self.vk_start_attempts = attempt
        self.set_grant(BIG_GRANT)
        say(f"{self.opts.impl} pid {vk.pid} ready, grant {BIG_GRANT}")
        return vk

    def revive_vk(self) -> bool:
        """Start the VK again when it has exited (as its Deployment would); True when it had to."""
        if self.vk is None or self.vk.alive():
            return False
        code = self.vk.proc.returncode if self.vk.proc else None
        say(f"{self.opts.impl} had exited (code {code}): starting it again")
        self.vk_restarts += 1
        self.start_vk()
        return True

    def set_isolation(self, on: bool) -> dict[str, Any]:
        """Pin (on) the VK's process tree to its core and everything else this bench started to the
        others, or (off) let every one of them use every core; returns what is set now."""
        if on and (self.vk_cores is None or self.other_cores is None):
            self.vk_cores, self.other_cores = split_cores(self.all_cores)
        vk_pid = self.vk.pid if self.vk is not None and self.vk.alive() else None
        skip = frozenset({vk_pid}) if on and vk_pid else frozenset()
        pin_tree(os.getpid(), (self.other_cores or self.all_cores) if on else self.all_cores, skip)
        if on and vk_pid and self.vk_cores:
            pin_tree(vk_pid, self.vk_cores)
        self.isolated = on
        return self.isolation()

    @contextlib.contextmanager
    def shared_for(self, vanilla: bool) -> Iterator[None]:
        """Vanilla has no VK to isolate: it runs with every core for everyone, then isolation is restored."""
        was = self.isolated
        if vanilla and was:
            self.set_isolation(False)
        try:
            yield
        finally:
            if vanilla and was:
                self.set_isolation(True)

    def isolation(self) -> dict[str, Any]:
        """For the JSON: whether isolated, the cores, and each process's affinity as it is now."""
        return {
            "isolated": self.isolated,
            "cores": sorted(self.all_cores),
            "vk_cores": sorted(self.vk_cores) if self.isolated and self.vk_cores else None,
            "other_cores": sorted(self.other_cores) if self.isolated and self.other_cores else None,
            "affinity": {name: affinity(pid) for name, pid in {"bench": os.getpid(), **self.pids()}.items()},
        }

    def describe(self) -> dict[str, Any]:
        """What every result records about the run: impl, isolation, cores."""
        return {
            "impl": self.opts.impl,
            "isolated": self.isolated,
            "isolation": self.isolation(),
            "kubelet_events": self.opts.kubelet_events,
            "vk_start_attempts": self.vk_start_attempts,
            "vk_restarts": self.vk_restarts,
            "vk_alive": self.vk.alive() if self.vk else None,
        }

    def vk_at_end(self) -> dict[str, Any]:
        """What a script records of the VK once it is done: the error lines in its log and whether it
        still runs (None without a VK)."""
        alive = self.vk.alive() if self.vk is not None else None
        return {"vk_error_lines": self.vk_error_lines(), "vk_alive_at_end": alive}

    def vk_error_lines(self) -> int:
        """Error lines in the VK's log: vkbridge's ` ERROR ` level, klog's `E<mmdd>` prefix for Liqo."""
        if self.vk is None:
            return 0
        text = self.vk.log_text()
        if self.opts.impl == "liqo":
            return len(re.findall(r"(?m)^E\d{4} ", text))
        return text.count(" ERROR ")

    def set_grant(self, resources: Mapping[str, str], timeout: float = 60) -> None:
        """helpers.set_grant, comparing quantities by value: the Node shows "1000" cpu as "1k"."""
        path = api_path(names.AUTH, names.RESOURCESLICES, self.bundle.tenant_ns, self.bundle.slug)
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

        wait_until(granted, timeout, f"the grant {dict(resources)} on the ResourceSlice and the node", 0.5)

    def _start_tunnel(self) -> None:
        ready = self.work / "tunnel.ready"
        log = (self.work / "tunnel.log").open("ab")
        self.tunnel = subprocess.Popen(
            [sys.executable, "-m", "bench.tunnel_proc", str(self.pool.port), str(ready)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        port: str = wait_until(
            lambda: (ready.exists() and ready.read_text().strip()) or None, 30, "the tunnel", 0.05
        )
        self.tunnel_url = f"https://127.0.0.1:{int(port)}"

    def _vk_ready(self) -> bool:
        if isinstance(self.vk, LiqoVkProcess):
            self.vk.check_running()  # it exits 0 after a start-up error: fail now, with its log
        return self._node_ready()

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
            previous = signal.signal(signal.SIGTERM, raise_interrupt)  # `kill` too tears it down cleanly
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
        if self.isolated:
            self.set_isolation(False)  # the bench may start another testbed (bench.run_all)

    def _stop_tunnel(self) -> None:
        if self.tunnel is not None:
            end_process(self.tunnel, 5)

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
        wait_until(lambda: plane.api("GET", sa)[0] == 200, 60, f"the default service account in {name}", 0.2)

    def offloaded_namespace(self, name: str) -> str:
        """A consumer namespace offloaded the GUIDE §3.7 way; returns its remote namespace."""
        self.create_namespace(self.consumer, name)
        return offload_namespace(self.consumer, self.pool, name, timeout=120)

    def delete_namespace(
        self, plane: ControlPlane, name: str, timeout: float = 900, wait: bool = True
    ) -> float:
        """Delete a namespace and wait until it is gone; returns the seconds it took (inf on timeout).

        wait=False returns at once: for a namespace already drained of pods, whose deletion (tens of seconds
        of the namespace controller here) is no figure."""
        t0 = time.monotonic()
        plane.api("DELETE", f"/api/v1/namespaces/{name}")
        if not wait:
            return 0.0
        try:
            wait_until(lambda: plane.api("GET", f"/api/v1/namespaces/{name}")[0] == 404, timeout, name, 1.0)
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
        for plane in [p for p in (getattr(self, "consumer", None), getattr(self, "pool", None)) if p]:
            for comp, pid in plane.pids().items():
                out[f"{plane.name}/{comp}"] = pid
        if self.emulator is not None and self.emulator.proc is not None:
            out["emulator"] = self.emulator.proc.pid
        if self.fake is not None:
            out["fakekubelet"] = self.fake.process.pid
        if self.tunnel is not None:
            out["tunnel"] = self.tunnel.pid
        if self.vk is not None and self.vk.alive():
            out["vk"] = self.vk.pid
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
