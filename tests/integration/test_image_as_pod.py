"""vkbridge from its image, as the pod of deploy/deployment.yaml on a real kubelet of the consumer.

deploy/serviceaccount.yaml, rbac.yaml and deployment.yaml are applied with kubectl as a user would; only
what the testbed forces is adapted (see ``rendered_manifests``). The shipped probes, read-only root,
non-root user, memfd-held keys, in-cluster config and least RBAC then run for real.

The testbed's addresses (never the machine's external interface): the consumer worker's node IP (a
198.18.0.0/16 address on a host-side testbed interface) carries two forwarders, e2e/tunnel.py proxies,
one to the consumer's kube-apiserver (there is no kube-proxy, so the kubernetes Service's ClusterIP
leads nowhere; the Deployment's copy sets KUBERNETES_SERVICE_HOST/PORT to it, and container env
overrides the kubelet's service env) and one to the pool (the tunnel; the bundle's kubeconfig Secret
names it). Both planes' serving certificates get that IP as a SAN (ControlPlane.add_serving_ip). The
consumer's kube-apiserver dials vkbridge's kubelet API at the Node's InternalIP = the pod IP
(--node-ip=$(POD_IP), as Liqo runs its VK with hostNetwork false), routed by the host to the CNI bridge.

The pod takes over the session's peering (its slug and emulator): run this file in a session where the
host ``vkbridge`` fixture has not started (it would hold the Lease and the pod would stay a standby).
Set VKBRIDGE_IMAGE_TAR to a ``hack/image.sh --save`` tarball to skip the build.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import re
import subprocess
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.binaries import REPO
from e2e.bundle import Bundle, create_bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle
from e2e.fixtures_pool import offload_namespace
from e2e.liqo_vkargs import liqo_vk_args
from e2e.tunnel import TunnelProxy
from e2e.workers import RealWorkers, why_not
from tests.integration.helpers import get, must, pod_path, pool_pod, wait_until

_WHY_NOT = why_not()
pytestmark = [
    pytest.mark.integration,
    pytest.mark.shipping,
    pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT)),
]

IMAGE = "docker.io/library/vkbridge:dev"  # what `docker save` of hack/image.sh's vkbridge:dev imports as
CONSUMER_NODE = "consumer-real-0"
PRIORITY_CLASS = "mc-virtual-kubelet-priority"  # created by the Extend chart (deployment.yaml)


@dataclass
class PodTestbed:
    node_ip: str
    pod_cidr: str
    apiserver: TunnelProxy
    tunnel: TunnelProxy
    timings: dict[str, float] = field(default_factory=dict)


def kubectl(plane: ControlPlane, *args: str, input: str | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
    argv = [str(plane.bin["kubectl"]), f"--kubeconfig={plane.admin_kubeconfig}", *args]
    return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def image_tar(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, float]]:
    """The image as a `docker save` tarball: $VKBRIDGE_IMAGE_TAR, or built now by hack/image.sh."""
    given = os.environ.get("VKBRIDGE_IMAGE_TAR")
    if given:
        if not Path(given).is_file():
            pytest.fail(f"VKBRIDGE_IMAGE_TAR={given} is not a file")
        yield Path(given), 0.0
        return
    out = tmp_path_factory.mktemp("image") / "vkbridge-image.tar"
    sbom = out.with_name("sbom.cdx.json")
    t = time.monotonic()
    res = subprocess.run(["bash", str(REPO / "hack/image.sh"), "--save", str(out), "--sbom", str(sbom)],
                         capture_output=True, text=True, timeout=1200)  # fmt: skip
    if res.returncode != 0:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1]
        pytest.skip(f"the vkbridge image cannot be built here (hack/image.sh exit {res.returncode}: {tail})")
    assert_sbom_lists_the_image(sbom)
    yield out, time.monotonic() - t
    out.unlink(missing_ok=True)


def assert_sbom_lists_the_image(path: Path) -> None:
    """Issue 36 point 8: CI makes a CycloneDX SBOM of the image it tests, from the image's own files: every
    pinned dependency at its pinned version with its hashes, vkbridge itself, the base's python3."""
    bom = json.loads(path.read_text())
    assert bom["bomFormat"] == "CycloneDX" and bom["specVersion"] == "1.5"
    purls = {c["purl"]: c for c in bom["components"]}
    lock = (REPO / "requirements" / "image.txt").read_text().replace("\\\n", " ")
    for name, version in re.findall(r"^([a-z0-9._-]+)==(\S+)", lock, re.M):
        comp = purls.get(f"pkg:pypi/{name}@{version}")
        assert comp is not None and comp.get("hashes"), f"{name}=={version} missing from the SBOM"
    assert any(p.startswith("pkg:pypi/vkbridge@") for p in purls), "vkbridge itself missing from the SBOM"
    assert any(p.startswith("pkg:deb/debian/python3") for p in purls), "the base's Debian packages missing"
    print(f"SBOM: {len(purls)} components ({path})")


@pytest.fixture(scope="module")
def consumer_worker(consumer: ControlPlane, image_tar: tuple[Path, float]) -> Iterator[RealWorkers]:
    """One real kubelet on the consumer, untainted (only this module's pods exist while it runs), with
    the vkbridge image imported into its containerd."""
    workers = RealWorkers(consumer, [CONSUMER_NODE]).start()
    try:
        t = time.monotonic()
        # ~190 MB through the native snapshotter: about a minute on a busy 2-core machine.
        workers.nodes[0].containerd.run_ctr("images", "import", "--snapshotter", "native", str(image_tar[0]),
                                            timeout=300)  # fmt: skip
        workers.timings["vkbridge_image_import_s"] = time.monotonic() - t
    except BaseException:
        workers.stop()
        raise
    yield workers
    problems = workers.stop()
    if problems:
        pytest.fail(f"real workers left things behind: {problems}")


@pytest.fixture(scope="module")
def pod_testbed(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, emulator: EmulatorHandle,
    tunnel: TunnelProxy, consumer_worker: RealWorkers,
) -> Iterator[PodTestbed]:  # fmt: skip
    """Both API servers reachable from pods at the node IP; the bundle's kubeconfig names the tunnel there."""
    holder = _fresh_lease_holder(consumer, bundle)
    if holder:
        pytest.fail(f"vkbridge {holder!r} holds Lease {bundle.tenant_ns}/{bundle.slug}: run this file in "
                    "a session where the host vkbridge fixture has not started")  # fmt: skip
    node = consumer_worker.nodes[0]
    for plane in (consumer, pool):
        plane.add_serving_ip(node.ip)
    apiserver = TunnelProxy("127.0.0.1", consumer.port, listen_host=node.ip)
    pod_tunnel = TunnelProxy("127.0.0.1", pool.port, listen_host=node.ip)
    apiserver.start()
    pod_tunnel.start()
    try:
        create_bundle(consumer, pool, slug=bundle.slug, consumer_id=bundle.consumer_id,
                      pool_server_url=pod_tunnel.url)  # fmt: skip
        _ensure_priority_class(consumer)
        yield PodTestbed(node.ip, node.containerd.net.subnet, apiserver, pod_tunnel)
    finally:
        # Back to the session's loopback tunnel for the tests that follow; the Node goes with its pod.
        create_bundle(consumer, pool, slug=bundle.slug, consumer_id=bundle.consumer_id,
                      pool_server_url=tunnel.url)  # fmt: skip
        consumer.api("DELETE", f"/api/v1/nodes/{bundle.slug}")
        pod_tunnel.stop()
        apiserver.stop()


def _fresh_lease_holder(consumer: ControlPlane, bundle: Bundle) -> str | None:
    """Who holds the leader Lease, when it was renewed in the last 20 s (a live vkbridge)."""
    status, lease = consumer.api(
        "GET", f"/apis/coordination.k8s.io/v1/namespaces/{bundle.tenant_ns}/leases/{bundle.slug}"
    )
    if status != 200:
        return None
    spec = lease.get("spec") or {}
    renewed = spec.get("renewTime")
    if not spec.get("holderIdentity") or not renewed:
        return None
    when = dt.datetime.strptime(renewed[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC)
    age = (dt.datetime.now(dt.UTC) - when).total_seconds()
    return str(spec["holderIdentity"]) if age < 20 else None


def _ensure_priority_class(consumer: ControlPlane) -> None:
    """What the Extend chart creates before the Deployment (deploy/deployment.yaml names it)."""
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": PRIORITY_CLASS}, "value": 1000000000, "globalDefault": False}  # fmt: skip
    status, got = consumer.api("POST", "/apis/scheduling.k8s.io/v1/priorityclasses", body)
    if status not in (201, 409):
        raise RuntimeError(f"creating PriorityClass {PRIORITY_CLASS}: {status} {got}")


def rendered_manifests(bundle: Bundle, bed: PodTestbed) -> str:
    """deploy/{serviceaccount,rbac,deployment}.yaml with deploy/README.md's sed, plus the one forced change:
    KUBERNETES_SERVICE_HOST/PORT naming the testbed's forwarder to the consumer API (no kube-proxy)."""
    subs = {"__SLUG__": bundle.slug, "__CONSUMER_ID__": bundle.consumer_id, "__IMAGE__": IMAGE,
            "__LOCAL_POD_CIDR__": bed.pod_cidr}  # fmt: skip
    docs: list[Any] = []
    for name in ("serviceaccount.yaml", "rbac.yaml", "deployment.yaml"):
        text = (REPO / "deploy" / name).read_text()
        for token, value in subs.items():
            text = text.replace(token, value)
        docs += [d for d in yaml.safe_load_all(text) if d]
    deployment = next(d for d in docs if d["kind"] == "Deployment")
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    container["env"] += [
        {"name": "KUBERNETES_SERVICE_HOST", "value": bed.node_ip},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(bed.apiserver.port)},
    ]
    return yaml.safe_dump_all(docs)


def ready_pod(consumer: ControlPlane, ns: str, selector: str) -> dict[str, Any] | None:
    status, body = consumer.api("GET", f"{pod_path(ns)}?labelSelector={selector}")
    for pod in body.get("items") or [] if status == 200 else []:
        conds = (pod.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds):
            return dict(pod)
    return None


def pod_timeline(pod: dict[str, Any]) -> dict[str, float]:
    """Seconds from the pod's creation to its container start and to Ready (the API's 1 s stamps)."""

    def at(stamp: str) -> float:
        return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC).timestamp()

    created = at(pod["metadata"]["creationTimestamp"])
    started = pod["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    ready = next(c for c in pod["status"]["conditions"] if c["type"] == "Ready")["lastTransitionTime"]
    return {"pod_container_started_s": at(started) - created, "pod_ready_after_create_s": at(ready) - created}


def node_ready(consumer: ControlPlane, name: str) -> dict[str, Any] | None:
    node = get(consumer, f"/api/v1/nodes/{name}")
    conds = ((node or {}).get("status") or {}).get("conditions") or []
    return node if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds) else None


def running(plane: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    pod = get(plane, pod_path(ns, name))
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return pod if statuses and "running" in (statuses[0].get("state") or {}) else None


def test_vkbridge_image_as_the_pod_of_deploy_reflects_a_pod_and_serves_its_logs(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, pod_testbed: PodTestbed,
    consumer_worker: RealWorkers, image_tar: tuple[Path, float], fresh_ns: Any,
) -> None:  # fmt: skip
    bed = pod_testbed
    t0 = time.monotonic()
    manifests = rendered_manifests(bundle, bed)
    applied = kubectl(consumer, "apply", "-f", "-", input=manifests)
    assert applied.returncode == 0, applied.stderr
    selector = f"liqo.io/virtual-node={bundle.slug}"
    try:
        check_vkbridge_pod(consumer, pool, bundle, bed, fresh_ns, t0)
    except BaseException:
        print(kubectl(consumer, "describe", "pods", "-n", bundle.tenant_ns, "-l", selector).stdout)
        print(kubectl(consumer, "logs", "-n", bundle.tenant_ns, "-l", selector, "--tail=100").stdout)
        raise
    finally:
        bed.timings["image_build_s"] = image_tar[1]
        bed.timings.update({f"worker_{k}": v for k, v in consumer_worker.timings.items()})
        print("\ntimings: " + ", ".join(f"{k}={v:.1f}" for k, v in sorted(bed.timings.items())))
        deleted = kubectl(consumer, "delete", "-f", "-", "--wait=true", input=manifests, timeout=90)
        assert deleted.returncode == 0, deleted.stderr


def check_vkbridge_pod(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, bed: PodTestbed,
                       fresh_ns: Any, t0: float) -> None:  # fmt: skip
    ns, slug = bundle.tenant_ns, bundle.slug
    selector = f"liqo.io/virtual-node={slug}"
    vk_pod = wait_until(lambda: ready_pod(consumer, ns, selector), 180, "the vkbridge pod Ready", 0.5)
    bed.timings["pod_ready_s"] = time.monotonic() - t0
    bed.timings.update(pod_timeline(vk_pod))
    # The args it runs with are those Liqo's controller-manager writes from deploy/vkoptionstemplate.yaml
    # for the bundle's VirtualNode (so Liqo's way starts us too).
    vn = must(consumer, "GET", f"/apis/offloading.liqo.io/v1beta1/namespaces/{ns}/virtualnodes/{slug}")
    template = yaml.safe_load((REPO / "deploy/vkoptionstemplate.yaml").read_text())
    liqo_args = liqo_vk_args(template["spec"], vn, home_cluster_id=bundle.consumer_id,
                             local_pod_cidrs=[bed.pod_cidr])  # fmt: skip
    assert vk_pod["spec"]["containers"][0]["args"] == liqo_args
    pod_ip = vk_pod["status"]["podIP"]
    assert vk_pod["spec"]["nodeName"] == CONSUMER_NODE and pod_ip.startswith("198.19.")
    node = wait_until(lambda: node_ready(consumer, slug), 60, "the virtual node Ready", 0.5)
    bed.timings["node_ready_s"] = time.monotonic() - t0
    addresses = {a["type"]: a["address"] for a in node["status"]["addresses"]}
    assert addresses["InternalIP"] == pod_ip  # --node-ip=$(POD_IP): the apiserver dials the pod

    local = fresh_ns(consumer)
    remote = offload_namespace(consumer, pool, local)
    name = f"img-{uuid.uuid4().hex[:6]}"
    t = time.monotonic()
    pod = pool_pod(slug, name, command="echo hello via the vk pod; sleep 3600")
    must(consumer, "POST", pod_path(local), pod)
    wait_until(lambda: running(pool, remote, name), 60, "the reflected pod Running on the pool", 0.25)
    wait_until(lambda: running(consumer, local, name), 30, "the local pod Running at home", 0.25)
    bed.timings["pod_reflected_s"] = time.monotonic() - t
    logs = wait_until(lambda: (r := kubectl(consumer, "logs", "-n", local, name)).returncode == 0 and r,
                      60, "kubectl logs through vkbridge-in-a-pod", 1.0)  # fmt: skip
    assert logs.stdout == "hello via the vk pod\n"

    # The shipped hardening, from inside the running container (exec through the real kubelet).
    probe = "id -u; touch /probe 2>/dev/null && echo writable || echo read-only; find /tmp -type f | wc -l"
    res = kubectl(consumer, "exec", "-n", ns, vk_pod["metadata"]["name"], "--", "sh", "-c", probe)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["65532", "read-only", "0"]  # non-root; read-only root; keys not on /tmp
    restarts = vk_pod["status"]["containerStatuses"][0]["restartCount"]
    assert restarts == 0, "the liveness probe restarted vkbridge"


def leaders(consumer: ControlPlane, ns: str, selector: str) -> dict[str, int | None]:
    """/leaderz of every Running vkbridge pod, straight to its pod IP (the host routes the CNI subnet)."""
    status, body = consumer.api("GET", f"{pod_path(ns)}?labelSelector={selector}")
    out: dict[str, int | None] = {}
    for pod in body.get("items") or [] if status == 200 else []:
        ip = (pod.get("status") or {}).get("podIP")
        if not ip or (pod.get("metadata") or {}).get("deletionTimestamp"):
            continue
        try:
            with urllib.request.urlopen(f"http://{ip}:8081/leaderz", timeout=3) as resp:
                out[pod["metadata"]["name"]] = resp.status
        except urllib.error.HTTPError as err:
            out[pod["metadata"]["name"]] = err.code
        except OSError:
            out[pod["metadata"]["name"]] = None
    return out


def ready_pods(consumer: ControlPlane, ns: str, selector: str) -> list[str]:
    status, body = consumer.api("GET", f"{pod_path(ns)}?labelSelector={selector}")
    return [
        p["metadata"]["name"]
        for p in body.get("items") or [] if status == 200
        if not p["metadata"].get("deletionTimestamp")
        and any(c.get("type") == "Ready" and c.get("status") == "True" for c in p["status"].get("conditions") or [])
    ]  # fmt: skip


class LeaderWatch(threading.Thread):
    """Samples every pod's /leaderz twice a second: two 200s in one sample would be two leaders."""

    def __init__(self, consumer: ControlPlane, ns: str, selector: str) -> None:
        super().__init__(name="leader-watch", daemon=True)
        self.args = (consumer, ns, selector)
        self.samples: list[dict[str, int | None]] = []
        self._halt = threading.Event()

    def run(self) -> None:
        while not self._halt.is_set():
            self.samples.append(leaders(*self.args))
            self._halt.wait(0.5)

    def stop(self) -> list[dict[str, int | None]]:
        self._halt.set()
        if self.ident is not None:  # started
            self.join(15)
        return self.samples


def test_rolling_updates_of_1_and_2_replicas_under_readiness_probes_finish_with_one_leader(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, pod_testbed: PodTestbed,
    consumer_worker: RealWorkers,
) -> None:  # fmt: skip
    """Issue 36 point 3: deploy/deployment.yaml (RollingUpdate, one surge pod, readiness on /readyz) rolls
    with 1 and with 2 replicas: the new pod is a Ready standby, the old one releases the Lease, the
    rollout completes; at no sample do two pods answer /leaderz 200, and the Node is Ready at the end.
    Before, a standby was unready and the rollout waited for ever for the Lease the old pod held."""
    ns, slug = bundle.tenant_ns, bundle.slug
    selector = f"liqo.io/virtual-node={slug}"
    deployment = f"deployment/vk-{slug}"
    manifests = rendered_manifests(bundle, pod_testbed)
    applied = kubectl(consumer, "apply", "-f", "-", input=manifests)
    assert applied.returncode == 0, applied.stderr
    watch = LeaderWatch(consumer, ns, selector)
    figures: dict[str, float] = {}
    try:
        wait_until(lambda: ready_pods(consumer, ns, selector), 180, "the vkbridge pod Ready", 0.5)
        wait_until(lambda: node_ready(consumer, slug), 60, "the virtual node Ready", 0.5)
        watch.start()
        for replicas in (1, 2):
            if replicas == 2:
                scaled = kubectl(consumer, "-n", ns, "scale", deployment, "--replicas=2")
                assert scaled.returncode == 0, scaled.stderr
                wait_until(lambda: len(ready_pods(consumer, ns, selector)) == 2, 120, "2 Ready replicas", 0.5)
            before = set(ready_pods(consumer, ns, selector))
            t = time.monotonic()
            restarted = kubectl(consumer, "-n", ns, "rollout", "restart", deployment)
            assert restarted.returncode == 0, restarted.stderr
            done = kubectl(consumer, "-n", ns, "rollout", "status", deployment, "--timeout=240s", timeout=260)
            assert done.returncode == 0, (
                f"the {replicas}-replica rollout did not finish: {done.stdout}{done.stderr}"
            )
            figures[f"rollout of {replicas} replica(s) s"] = time.monotonic() - t
            after = set(ready_pods(consumer, ns, selector))
            assert len(after) == replicas and not after & before, (before, after)
            led = wait_until(
                lambda: (lz := leaders(consumer, ns, selector)) and [n for n, s in lz.items() if s == 200], 60,
                "one of the new pods to lead", 0.5,
            )  # fmt: skip
            assert len(led) == 1 and led[0] in after, (led, after)
            assert _fresh_lease_holder(consumer, bundle) == led[0]
            wait_until(
                lambda: node_ready(consumer, slug), 60, "the virtual node Ready after the rollout", 0.5
            )
        samples = watch.stop()
        two = [s for s in samples if sum(1 for v in s.values() if v == 200) > 1]
        figures["leader samples"] = len(samples)
        assert samples and not two, f"two leaders at once: {two[:3]}"
    except BaseException:
        print(kubectl(consumer, "-n", ns, "get", "pods,rs", "-o", "wide").stdout)
        print(kubectl(consumer, "logs", "-n", ns, "-l", selector, "--tail=60", "--prefix").stdout)
        raise
    finally:
        watch.stop()
        print("\nrollout figures: " + ", ".join(f"{k}={v:.1f}" for k, v in figures.items()))
        deleted = kubectl(consumer, "delete", "-f", "-", "--wait=true", input=manifests, timeout=120)
        assert deleted.returncode == 0, deleted.stderr
