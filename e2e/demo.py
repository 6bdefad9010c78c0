"""The README's first command: both planes, the pool emulator, vkbridge, and GUIDE §3.8 `burst-hello`.

    python -m e2e.demo            # everything, then waits; Ctrl-C stops it all
    python -m e2e.demo --no-vkbridge   # planes + pool emulator only (to run vkbridge yourself)
    python -m e2e.demo --fake-workers  # fake pool workers even where real ones could run

The pool runs real kubelet workers (e2e/workers: containerd, runc, busybox) where the machine allows it
(root, the tools hack/setup.sh installs, the kubelet binary), else the fake workers, saying why.
Everything runs on 127.0.0.1 (the virtual node and real workers: testbed addresses in 198.18.0.0/15, so
kube-apiserver's nodes/proxy reaches the node) in temporary
directories that are removed on exit.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from e2e.bundle import create_bundle
from e2e.emulator import launch_emulator
from e2e.fakekubelet import launch_fake_kubelets
from e2e.fixtures_pool import CONSUMER_ID, POOL_NODES, SLUG, offload_namespace
from e2e.identity import service_account_kubeconfig
from e2e.liqo_vk import IMPLS, LiqoVkProcess, ensure_foreign_cluster, impl_from_env
from e2e.planes import start_planes
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeOptions, VkbridgeProcess
from e2e.workers import RealWorkers, why_not
from e2e.workers.host import NODE_IP_RANGE, AddressClaim, NodeAddresses

NAMESPACE = "my-team"
REAL_POOL_NODES = ["pool-worker-0"]


def burst_hello(slug: str) -> dict[str, object]:
    """GUIDE §3.8, verbatim but for the slug."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "burst-hello", "namespace": NAMESPACE},
        "spec": {
            "tolerations": [
                {"key": "multicloud.io/pool", "operator": "Equal", "value": slug, "effect": "NoSchedule"}
            ],
            "nodeSelector": {"multicloud.io/pool": slug},
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "hello",
                    "image": "busybox:1.36",
                    "command": ["sh", "-c", "echo hello from the pool; uname -n; sleep 30"],
                    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
                }
            ],
        },
    }


def say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def wait(cond, timeout: float, what: str) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__.splitlines()[0])
    ap.add_argument(
        "--no-vkbridge", action="store_true", help="bring up the planes and the pool emulator only"
    )
    ap.add_argument(
        "--exit", action="store_true", help="stop everything after burst-hello (for CI smoke runs)"
    )
    ap.add_argument(
        "--fake-workers", action="store_true", help="fake pool workers even where real ones could run"
    )
    ap.add_argument(
        "--impl", choices=IMPLS, default=impl_from_env(),
        help="the virtual kubelet to run: vkbridge, or Liqo v1.2's own (hack/build-liqo.sh)",
    )  # fmt: skip
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with tempfile.TemporaryDirectory(prefix="vkbridge-demo-") as tmp:
        work = Path(tmp)
        say("starting the consumer and pool control planes (etcd, apiserver, controller-manager, scheduler)")
        planes = start_planes(base_dir=work)
        consumer, pool = planes.consumer, planes.pool
        handles: list[object] = []
        try:
            say(f"planes up in {planes.startup_seconds:.1f}s")
            handles.append(start_workers(pool, work, fake=args.fake_workers))
            say("starting the tunnel (vkbridge reaches the pool only through it)")
            tunnel = TunnelProxy("127.0.0.1", pool.port)
            tunnel.start()
            handles.append(tunnel)
            bundle = create_bundle(
                consumer, pool, slug=SLUG, consumer_id=CONSUMER_ID, pool_server_url=tunnel.url
            )
            ca_cert, ca_key = pool.ca.write(work / "pool-ca", "pool-ca")
            consumer_ca_cert, consumer_ca_key = consumer.ca.write(work / "consumer-ca", "consumer-ca")
            emulator = launch_emulator(
                consumer_kubeconfig=consumer.admin_kubeconfig, pool_kubeconfig=pool.admin_kubeconfig,
                consumer_id=CONSUMER_ID, slug=SLUG, pool_ca_cert=ca_cert, pool_ca_key=ca_key,
                consumer_ca_cert=consumer_ca_cert, consumer_ca_key=consumer_ca_key,
                workdir=work / "emulator", api_server_url=tunnel.url,
            )  # fmt: skip
            handles.append(emulator)
            say("pool emulator running (Liqo's parts: namespace mapping, ShadowPods, grant, certificates)")
            vk: VkbridgeProcess | None = None
            if not args.no_vkbridge:
                node_address = NodeAddress().start()
                handles.append(node_address)
                opts = VkbridgeOptions(
                    home_kubeconfig=service_account_kubeconfig(consumer, bundle, work), slug=SLUG,
                    consumer_id=CONSUMER_ID, secret_name=bundle.secret_name, tenant_ns=bundle.tenant_ns,
                    certificate_type="kubelet", node_ip=node_address.ip,
                )  # fmt: skip
                if args.impl == "liqo":  # admin identity, self-signed serving cert (see start_impl)
                    ensure_foreign_cluster(consumer, bundle.slug, bundle.tenant_ns)
                    opts.home_kubeconfig, opts.certificate_type = consumer.admin_kubeconfig, "self-signed"
                    vk = LiqoVkProcess(opts, work / "liqo-vk.log").start()
                else:
                    vk = VkbridgeProcess(opts, work / "vkbridge.log").start()
                handles.append(vk)
                say(f"{args.impl} started; waiting for the virtual node to be Ready")
                wait(lambda: _ready(consumer, SLUG), 90, "the virtual node")
                say(f"virtual node {SLUG} is Ready; offloading namespace {NAMESPACE}")
                consumer.api("POST", "/api/v1/namespaces", {"metadata": {"name": NAMESPACE}})
                sa = f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/default"
                wait(lambda: consumer.api("GET", sa)[0] == 200,
                     30, "the default service account")  # fmt: skip
                offload_namespace(consumer, pool, NAMESPACE)
                say("running GUIDE section 3.8 burst-hello")
                consumer.api("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", burst_hello(SLUG))
                wait(lambda: _phase(consumer) in ("Running", "Succeeded"), 90, "burst-hello to run")
                time.sleep(1.0)
                # The kubelet API listens once kube-controller-manager signed vkbridge's serving certificate.
                deadline = time.monotonic() + 60
                while True:
                    logs = consumer.kubectl("-n", NAMESPACE, "logs", "burst-hello", check=False)
                    if logs.returncode == 0 or time.monotonic() > deadline:
                        break
                    time.sleep(1.0)
                say("kubectl -n my-team logs burst-hello:")
                print(
                    logs.stdout if logs.returncode == 0 else f"(kubectl logs failed: {logs.stderr.strip()})"
                )
                exec_and_cp(consumer, work)
                raw = consumer.kubectl("get", "--raw", f"/api/v1/nodes/{SLUG}/proxy/pods", check=False)
                say(
                    f"kubectl get --raw /api/v1/nodes/{SLUG}/proxy/pods (node address {node_address.ip}): "
                    + ("ok" if raw.returncode == 0 else f"failed: {raw.stderr.strip()[:200]}")
                )
            print()
            print("Explore (in another shell):")
            print(f"  export KUBECONFIG={consumer.admin_kubeconfig}   # the consumer (your cluster)")
            print(f"  kubectl get nodes -L multicloud.io/pool; kubectl -n {NAMESPACE} get pods -o wide")
            print(f"  kubectl -n {NAMESPACE} logs -f burst-hello   # follows until it ends (30 s)")
            print(f"  KUBECONFIG={pool.admin_kubeconfig} kubectl get shadowpods,pods -A   # the pool")
            if vk is not None:
                print(f"  tail -f {vk.log_path}   # the vkbridge log")
            print("Ctrl-C stops everything.", flush=True)
            if not args.exit:
                while not stop.wait(1.0):
                    if vk is not None and not vk.alive():
                        say("vkbridge exited:\n" + vk.tail(40))
                        return 1
            return 0
        finally:
            say("stopping")
            for h in reversed(handles):
                try:
                    h.stop()  # type: ignore[attr-defined]
                except Exception as exc:
                    print(f"stop {h}: {exc}", file=sys.stderr)
            planes.stop()


class NodeAddress:
    """The virtual node's address: a testbed-owned 198.18.x address on a link of its own, removed at the
    end. kube-apiserver refuses nodes/proxy to a loopback node address ("address not allowed"), so on
    127.0.0.1 ``kubectl get --raw /api/v1/nodes/<node>/proxy/...`` and scrapes through the API server fail.
    Without the rights to make a link, the node stays on 127.0.0.1 and says so."""

    def __init__(self) -> None:
        self.ip = "127.0.0.1"
        self._claim: AddressClaim | None = None
        self._link: NodeAddresses | None = None

    def start(self) -> NodeAddress:
        owner = f"vkbdemo{os.getpid() % 100000}"
        claim = AddressClaim(owner)
        try:
            ip = str(claim.pick(NODE_IP_RANGE, 32, 1)[0].network_address)
            self._link = NodeAddresses(owner, [ip]).create()
        except (OSError, RuntimeError, subprocess.CalledProcessError) as exc:
            claim.release()
            say(f"no testbed address for the node ({exc}): it stays on 127.0.0.1, nodes/proxy will not work")
            return self
        self._claim, self.ip = claim, ip
        return self

    def stop(self) -> None:
        if self._link is not None:
            self._link.remove()
            self._link = None
        if self._claim is not None:
            self._claim.release()
            self._claim = None


def start_workers(pool, work: Path, *, fake: bool) -> object:  # type: ignore[no-untyped-def]
    """Real kubelet workers where the machine allows it, else (one line saying why) the fake ones."""
    reason = "--fake-workers" if fake else why_not()
    if reason is None:
        say(f"starting {len(REAL_POOL_NODES)} real pool worker (kubelet v1.36.3, containerd, runc, busybox)")
        t0 = time.monotonic()
        try:
            real = RealWorkers(pool, REAL_POOL_NODES).start()
        except Exception as exc:  # the machine said yes but it did not work: still show the demo
            reason = f"they did not start: {str(exc).splitlines()[0]}"
        else:
            say(f"real worker {real.node_names[0]} Ready in {time.monotonic() - t0:.1f}s")
            return real
    say(f"real workers unavailable ({reason}); using {len(POOL_NODES)} fake pool workers instead")
    cert, key = pool.ca.issue("system:node:pool-workers", ["system:nodes"], server=True, ips=["127.0.0.1"])
    assert key is not None
    return launch_fake_kubelets(pool.admin_kubeconfig, POOL_NODES, cert, key, work / "fakekubelet")


def exec_and_cp(consumer, work: Path) -> None:  # type: ignore[no-untyped-def]
    """The user guide's next steps on the running pod: kubectl exec, then kubectl cp in and out."""
    res = consumer.kubectl("-n", NAMESPACE, "exec", "burst-hello", "--", "sh", "-c",
                           "echo exec in $(uname -n)", check=False)  # fmt: skip
    say("kubectl -n my-team exec burst-hello -- sh -c 'echo exec in $(uname -n)':")
    print(res.stdout if res.returncode == 0 else f"(kubectl exec failed: {res.stderr.strip()})")
    src, back = work / "note.txt", work / "note-back.txt"
    src.write_text("copied through the pool\n")
    up = consumer.kubectl("-n", NAMESPACE, "cp", str(src), "burst-hello:note.txt", check=False)
    down = consumer.kubectl("-n", NAMESPACE, "cp", "burst-hello:note.txt", str(back), check=False)
    say("kubectl -n my-team cp note.txt burst-hello:note.txt, and back:")
    if up.returncode == 0 and down.returncode == 0 and back.is_file():
        print(back.read_text())
    else:
        print(f"(kubectl cp failed: {(up.stderr or down.stderr).strip()})")


def _ready(consumer, name: str) -> bool:  # type: ignore[no-untyped-def]
    status, node = consumer.api("GET", f"/api/v1/nodes/{name}")
    if status != 200:
        return False
    return any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in node["status"].get("conditions") or []
    )


def _phase(consumer) -> str | None:  # type: ignore[no-untyped-def]
    status, pod = consumer.api("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/burst-hello")
    return None if status != 200 else (pod.get("status") or {}).get("phase")


if __name__ == "__main__":
    sys.exit(main())
