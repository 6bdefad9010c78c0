"""The fake kubelet (e2e/fakekubelet) on the real pool API server: node, lease, pod lifecycle, logs and
exec through kube-apiserver, deletion, restarts, and the --no-exec mode at a few hundred pods."""

from __future__ import annotations

import asyncio
import json
import re
import ssl
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from e2e.controlplane import ControlPlane, wait_for
from e2e.fakekubelet import (
    ANN_EXIT_AFTER,
    ANN_EXIT_CODE,
    ANN_FAIL_START,
    FakeKubeletHandle,
    launch_fake_kubelets,
)
from e2e.fakekubelet.kubeclient import KubeClient
from e2e.fixtures_planes import FreshNs
from e2e.kubeconfig import client_ssl_context, read_kubeconfig
from tests.integration.helpers import events_for, processes_with

pytestmark = pytest.mark.integration

Json = dict[str, Any]


@dataclass
class FakeNodes:
    handle: FakeKubeletHandle
    nodes: list[str]
    plane: ControlPlane


def _cleanup_nodes(plane: ControlPlane, nodes: list[str]) -> None:
    """Force-delete what is still bound to our nodes, then the nodes and leases (the plane is shared)."""
    for node in nodes:
        status, body = plane.api("GET", f"/api/v1/pods?fieldSelector=spec.nodeName%3D{node}")
        for pod in body.get("items", []) if status == 200 else []:
            meta = pod["metadata"]
            plane.api(
                "DELETE",
                f"/api/v1/namespaces/{meta['namespace']}/pods/{meta['name']}",
                {"gracePeriodSeconds": 0, "preconditions": {"uid": meta["uid"]}},
            )
        plane.api("DELETE", f"/api/v1/nodes/{node}")
        plane.api("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}")


def _launch(plane: ControlPlane, workdir: Path, prefix: str, no_exec: bool) -> Iterator[FakeNodes]:
    tag = uuid.uuid4().hex[:6]
    nodes = [f"{prefix}-{tag}-a", f"{prefix}-{tag}-b"]
    cert, key = plane.ca.issue(f"system:node:{nodes[0]}", ["system:nodes"], server=True, ips=["127.0.0.1"])
    assert key is not None
    handle = launch_fake_kubelets(plane.admin_kubeconfig, nodes, cert, key, workdir, no_exec=no_exec)
    try:
        yield FakeNodes(handle, nodes, plane)
    finally:
        try:
            _cleanup_nodes(plane, nodes)
        finally:
            handle.stop()


@pytest.fixture(scope="module")
def fk(pool: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeNodes]:
    yield from _launch(pool, tmp_path_factory.mktemp("fakekubelet"), "fkl", no_exec=False)


@pytest.fixture(scope="module")
def fk_noexec(pool: ControlPlane, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeNodes]:
    yield from _launch(pool, tmp_path_factory.mktemp("fakekubelet-noexec"), "fkn", no_exec=True)


# -- helpers ---------------------------------------------------------------------------------------------


def pod_manifest(
    name: str, node: str, command: list[str] | None, restart: str = "Never", **extra: Any
) -> Json:
    container: Json = {"name": "main", "image": "busybox:1.36"}
    if command is not None:
        container["command"] = command
    spec: Json = {"nodeName": node, "restartPolicy": restart, "containers": [container]}
    spec.update(extra.pop("spec", {}))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, **extra}, "spec": spec}


def create_pod(plane: ControlPlane, ns: str, manifest: Json) -> Json:
    status, body = plane.api("POST", f"/api/v1/namespaces/{ns}/pods", manifest)
    assert status == 201, body
    return dict(body)


def get_pod(plane: ControlPlane, ns: str, name: str) -> Json | None:
    status, body = plane.api("GET", f"/api/v1/namespaces/{ns}/pods/{name}")
    if status == 404:
        return None
    assert status == 200, body
    return dict(body)


def wait_pod(
    plane: ControlPlane, ns: str, name: str, pred: Callable[[Json], bool], what: str, timeout: float = 30
) -> Json:
    def check() -> Json | None:
        pod = get_pod(plane, ns, name)
        return pod if pod is not None and pred(pod) else None

    try:
        return wait_for(check, timeout, f"pod {ns}/{name}: {what}")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; last seen: {json.dumps(get_pod(plane, ns, name), indent=1)}") from exc


def phase(value: str) -> Callable[[Json], bool]:
    return lambda p: p.get("status", {}).get("phase") == value


async def follow_logs(plane: ControlPlane, ns: str, name: str, *args: str) -> asyncio.subprocess.Process:
    """``kubectl logs -f`` on the pod, its output piped; the caller kills it."""
    return await asyncio.create_subprocess_exec(
        str(plane.bin["kubectl"]), f"--kubeconfig={plane.admin_kubeconfig}", "logs", "-f", *args, "-n", ns, name,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip


def main_status(pod: Json) -> Json:
    """The first container's status, or {} before the kubelet wrote one."""
    return dict((pod.get("status", {}).get("containerStatuses") or [{}])[0])


def running_and_ready(pod: Json) -> bool:
    conds = {c["type"]: c["status"] for c in pod.get("status", {}).get("conditions", [])}
    return phase("Running")(pod) and conds.get("Ready") == "True"


# -- node and lease --------------------------------------------------------------------------------------


def test_nodes_registered_ready_with_lease_and_kubelet_endpoint(fk: FakeNodes) -> None:
    for node in fk.nodes:
        status, obj = fk.plane.api("GET", f"/api/v1/nodes/{node}")
        assert status == 200, obj
        labels = obj["metadata"]["labels"]
        assert labels["kubernetes.io/hostname"] == node and labels["type"] == "fake-worker"
        st = obj["status"]
        assert st["capacity"]["pods"] == "1k" or st["capacity"]["pods"] == "1000"
        assert st["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
        assert st["daemonEndpoints"]["kubeletEndpoint"]["Port"] == fk.handle.ports[node]
        assert "ExtendWebSocketsToKubelet" in st.get("declaredFeatures", []), st
        ready = next(c for c in st["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "True"
        status, lease = fk.plane.api(
            "GET", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}"
        )
        assert status == 200, lease
        assert lease["spec"]["holderIdentity"] == node
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", lease["spec"]["renewTime"])
        assert lease["metadata"]["ownerReferences"][0]["uid"] == obj["metadata"]["uid"]


async def test_kubelet_https_api_verifies_against_the_pool_ca(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    create_pod(fk.plane, ns, pod_manifest("listed", fk.nodes[1], None, restart="Always"))
    wait_pod(fk.plane, ns, "listed", running_and_ready, "Running")
    ctx = ssl.create_default_context(cadata=fk.plane.ca_pem.decode())  # IP SAN 127.0.0.1 is verified
    port = fk.handle.ports[fk.nodes[1]]
    async with aiohttp.ClientSession() as http:
        async with http.get(f"https://127.0.0.1:{port}/healthz", ssl=ctx) as resp:
            assert resp.status == 200 and await resp.text() == "ok"
        async with http.get(f"https://127.0.0.1:{port}/pods", ssl=ctx) as resp:
            names = [p["metadata"]["name"] for p in (await resp.json())["items"]]
    assert "listed" in names


def test_scheduler_places_pods_on_the_fake_node(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    """No nodeName: needs the node lifecycle controller to lift the admission-time not-ready taint."""
    ns = fresh_ns(fk.plane)
    manifest = pod_manifest("scheduled", "", ["sh", "-c", "echo placed"])
    del manifest["spec"]["nodeName"]
    manifest["spec"]["nodeSelector"] = {"kubernetes.io/hostname": fk.nodes[1]}
    create_pod(fk.plane, ns, manifest)
    pod = wait_pod(fk.plane, ns, "scheduled", phase("Succeeded"), "scheduled and Succeeded", 60)
    assert pod["spec"]["nodeName"] == fk.nodes[1]


# -- pod lifecycle, logs ---------------------------------------------------------------------------------


def test_completed_pod_succeeds_and_kubectl_logs_show_its_output(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    node = fk.nodes[0]
    create_pod(fk.plane, ns, pod_manifest("hello", node, ["sh", "-c", "echo hello; echo oops >&2; exit 0"]))
    pod = wait_pod(fk.plane, ns, "hello", phase("Succeeded"), "Succeeded")
    st = pod["status"]
    term = main_status(pod)["state"]["terminated"]
    assert term["exitCode"] == 0 and term["reason"] == "Completed"
    assert main_status(pod)["containerID"].startswith("fake://")
    assert st["hostIP"] == "127.0.0.1" and st["podIP"].startswith("10.244.") and st["startTime"]
    conds = {c["type"]: c for c in st["conditions"]}
    assert conds["Ready"]["status"] == "False" and conds["Ready"]["reason"] == "PodCompleted"
    assert conds["Initialized"]["status"] == "True" and conds["PodScheduled"]["status"] == "True"
    out = fk.plane.kubectl("logs", "-n", ns, "hello").stdout
    assert out.splitlines() == ["hello", "oops"]

    def kubelet_events() -> set[str] | None:
        evs = [e for e in events_for(fk.plane, ns, "hello") if e["source"].get("component") == "kubelet"]
        reasons = {e["reason"] for e in evs}
        return reasons if {"Pulled", "Created", "Started"} <= reasons else None

    wait_for(kubelet_events, 15, "Pulled/Created/Started events")
    ev = next(e for e in events_for(fk.plane, ns, "hello") if e["reason"] == "Started")
    assert ev["source"] == {"component": "kubelet", "host": node}
    assert (
        ev["reportingComponent"] == "kubelet" and ev["involvedObject"]["fieldPath"] == "spec.containers{main}"
    )


def test_failed_pod_and_env_values(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    manifest = pod_manifest("env", fk.nodes[0], ["sh", "-c", "echo $GREETING $(WHO); exit 4"])
    manifest["spec"]["containers"][0]["env"] = [
        {"name": "WHO", "value": "world"},
        {"name": "GREETING", "value": "hi $(WHO)"},
    ]
    create_pod(fk.plane, ns, manifest)
    pod = wait_pod(fk.plane, ns, "env", phase("Failed"), "Failed")
    assert main_status(pod)["state"]["terminated"]["exitCode"] == 4
    assert fk.plane.kubectl("logs", "-n", ns, "env").stdout == "hi world world\n"


def test_init_containers_run_first_in_order(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    manifest = pod_manifest("init", fk.nodes[0], ["sh", "-c", "echo main"])
    manifest["spec"]["initContainers"] = [
        {"name": "one", "image": "busybox", "command": ["sh", "-c", "echo one"]},
        {"name": "two", "image": "busybox", "command": ["sh", "-c", "echo two"]},
    ]
    create_pod(fk.plane, ns, manifest)
    pod = wait_pod(fk.plane, ns, "init", phase("Succeeded"), "Succeeded")
    inits = pod["status"]["initContainerStatuses"]
    assert [s["state"]["terminated"]["exitCode"] for s in inits] == [0, 0]
    one = inits[0]["state"]["terminated"]["finishedAt"]
    main = main_status(pod)["state"]["terminated"]["startedAt"]
    assert one <= main
    assert fk.plane.kubectl("logs", "-n", ns, "init", "-c", "two").stdout == "two\n"


async def test_long_running_pod_and_logs_follow_tail(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    loop = "i=0; while true; do echo line $i; i=$((i+1)); sleep 0.2; done"
    create_pod(fk.plane, ns, pod_manifest("ticker", fk.nodes[1], ["sh", "-c", loop]))
    pod = wait_pod(fk.plane, ns, "ticker", running_and_ready, "Running and Ready")
    st = main_status(pod)
    assert st["ready"] is True and st["started"] is True and "startedAt" in st["state"]["running"]
    assert st["imageID"].startswith("docker.io/library/busybox@sha256:")
    wait_for(
        lambda: len(fk.plane.kubectl("logs", "-n", ns, "ticker").stdout.splitlines()) >= 5, 15, "5 log lines"
    )

    proc = await follow_logs(fk.plane, ns, "ticker", "--tail=1")
    try:
        assert proc.stdout is not None
        lines = [(await asyncio.wait_for(proc.stdout.readline(), 10)).decode() for _ in range(4)]
    finally:
        proc.kill()
        await proc.wait()
    numbers = [int(line.split()[1]) for line in lines]
    assert numbers[0] >= 4, lines  # --tail=1: the newest line, not the first
    assert numbers == list(range(numbers[0], numbers[0] + 4)), lines

    stamped = fk.plane.kubectl("logs", "-n", ns, "ticker", "--timestamps", "--since=2s").stdout.splitlines()
    assert stamped and len(stamped) < 20, stamped
    now = time.time()
    for line in stamped:
        ts, text = line.split(" ", 1)
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z", ts) and text.startswith("line ")
        secs = time.mktime(time.strptime(ts[:19], "%Y-%m-%dT%H:%M:%S")) - time.timezone
        assert now - 5 < secs <= now + 1
    limited = fk.plane.kubectl("logs", "-n", ns, "ticker", "--limit-bytes=13").stdout
    assert limited == "line 0\nline 1"


# -- deletion --------------------------------------------------------------------------------------------


def test_deletion_stops_processes_and_removes_the_pod(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    marker = f"{uuid.uuid4().int % 100000 + 200000}"
    create_pod(fk.plane, ns, pod_manifest("victim", fk.nodes[0], ["sleep", marker], restart="Always"))
    wait_pod(fk.plane, ns, "victim", running_and_ready, "Running")
    assert processes_with(f"sleep {marker}")
    t0 = time.monotonic()
    status, _ = fk.plane.api("DELETE", f"/api/v1/namespaces/{ns}/pods/victim")
    assert status == 200
    wait_for(lambda: get_pod(fk.plane, ns, "victim") is None, 5, "the pod to be gone")
    print(f"\nfakekubelet: graceful delete took {time.monotonic() - t0:.2f}s")
    wait_for(lambda: not processes_with(f"sleep {marker}"), 5, "the container process to exit")


def test_deletion_kills_after_the_grace_period(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    marker = f"ignore-term-{uuid.uuid4().hex[:8]}"
    script = f"trap 'echo got TERM' TERM; while true; do sleep 0.1; done # {marker}"
    manifest = pod_manifest(
        "stubborn", fk.nodes[0], ["sh", "-c", script], spec={"terminationGracePeriodSeconds": 2}
    )
    create_pod(fk.plane, ns, manifest)
    wait_pod(fk.plane, ns, "stubborn", running_and_ready, "Running")
    t0 = time.monotonic()
    fk.plane.api("DELETE", f"/api/v1/namespaces/{ns}/pods/stubborn")
    wait_for(lambda: get_pod(fk.plane, ns, "stubborn") is None, 10, "the pod to be gone")
    took = time.monotonic() - t0
    assert 1.5 <= took < 8, took
    assert not processes_with(marker)


def test_force_deletion_kills_processes_at_once(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    marker = f"{uuid.uuid4().int % 100000 + 300000}"
    create_pod(fk.plane, ns, pod_manifest("forced", fk.nodes[1], ["sleep", marker]))
    wait_pod(fk.plane, ns, "forced", running_and_ready, "Running")
    fk.plane.api("DELETE", f"/api/v1/namespaces/{ns}/pods/forced", {"gracePeriodSeconds": 0})
    assert get_pod(fk.plane, ns, "forced") is None
    wait_for(lambda: not processes_with(f"sleep {marker}"), 5, "the container process to be killed")


async def test_logs_follow_ends_when_the_container_exits(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    script = "echo first; sleep 1.5; echo last"
    create_pod(fk.plane, ns, pod_manifest("brief", fk.nodes[0], ["sh", "-c", script]))
    wait_pod(fk.plane, ns, "brief", running_and_ready, "Running")
    proc = await follow_logs(fk.plane, ns, "brief")
    try:
        out, err = await asyncio.wait_for(proc.communicate(), 15)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert proc.returncode == 0, err
    assert out == b"first\nlast\n"


# -- restarts --------------------------------------------------------------------------------------------


def test_restart_policy_always_counts_restarts_and_keeps_previous_logs(
    fk: FakeNodes, fresh_ns: FreshNs
) -> None:
    ns = fresh_ns(fk.plane)
    script = 'echo "run at $(date +%s%N)"; sleep 0.3; exit 1'
    create_pod(fk.plane, ns, pod_manifest("crashy", fk.nodes[1], ["sh", "-c", script], restart="Always"))
    pod = wait_pod(
        fk.plane, ns, "crashy", lambda p: main_status(p).get("restartCount", 0) >= 2, "2 restarts", 30
    )
    st = main_status(pod)
    assert pod["status"]["phase"] == "Running"
    assert st["lastState"]["terminated"]["exitCode"] == 1
    assert st["lastState"]["terminated"]["reason"] == "Error"
    previous = fk.plane.kubectl("logs", "-n", ns, "crashy", "--previous").stdout
    assert previous.startswith("run at "), previous
    reasons = {e["reason"] for e in events_for(fk.plane, ns, "crashy")}
    assert "BackOff" in reasons


def test_restart_policy_on_failure_stops_after_success(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    # Fails on the first run, succeeds on the second: the marker file lives in the pod's own HOME.
    script = 'if [ -e "$HOME/ran" ]; then exit 0; fi; touch "$HOME/ran"; exit 7'
    create_pod(fk.plane, ns, pod_manifest("onfail", fk.nodes[0], ["sh", "-c", script], restart="OnFailure"))
    pod = wait_pod(fk.plane, ns, "onfail", phase("Succeeded"), "Succeeded")
    st = main_status(pod)
    assert st["restartCount"] == 1 and st["lastState"]["terminated"]["exitCode"] == 7


# -- exec ------------------------------------------------------------------------------------------------


@dataclass
class ExecResult:
    stdout: bytes
    stderr: bytes
    status: Json | None


async def exec_ws(
    plane: ControlPlane,
    ns: str,
    pod: str,
    command: list[str],
    *,
    protocol: str = "v5.channel.k8s.io",
    stdin: bytes | None = None,
    tty: bool = False,
) -> ExecResult:
    """pods/exec through kube-apiserver as admin, over WebSocket, speaking the channel protocol."""
    ctx: ssl.SSLContext = client_ssl_context(read_kubeconfig(plane.admin_kubeconfig))
    params = [("command", c) for c in command] + [("stdout", "true")]
    params += [("stderr", "true")] if not tty else [("tty", "true")]
    if stdin is not None:
        params.append(("stdin", "true"))
    out, err = bytearray(), bytearray()
    status: Json | None = None
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(
            f"{plane.url}/api/v1/namespaces/{ns}/pods/{pod}/exec",
            params=params,
            protocols=[protocol],
            ssl=ctx,
        ) as ws,
    ):
        assert ws.protocol == protocol
        if stdin is not None:
            await ws.send_bytes(b"\x00" + stdin)
            await ws.send_bytes(b"\xff\x00")  # v5: close stdin
        async with asyncio.timeout(20):
            async for msg in ws:
                if msg.type != aiohttp.WSMsgType.BINARY or not msg.data:
                    continue
                channel, data = msg.data[0], msg.data[1:]
                if channel == 1:
                    out += data
                elif channel == 2:
                    err += data
                elif channel == 3 and data:
                    status = json.loads(data)
    return ExecResult(bytes(out), bytes(err), status)


@pytest.fixture(scope="module")
def exec_target(fk: FakeNodes, pool: ControlPlane) -> Iterator[tuple[str, str]]:
    ns = f"fkl-exec-{uuid.uuid4().hex[:6]}"
    status, body = pool.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    assert status == 201, body
    wait_for(lambda: pool.api("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200, 30, "sa")
    create_pod(pool, ns, pod_manifest("shell", fk.nodes[0], None, restart="Always"))
    wait_pod(pool, ns, "shell", running_and_ready, "Running")
    yield ns, "shell"
    pool.api("DELETE", f"/api/v1/namespaces/{ns}")


async def test_exec_v5_through_the_api_server(fk: FakeNodes, exec_target: tuple[str, str]) -> None:
    ns, pod = exec_target
    res = await exec_ws(fk.plane, ns, pod, ["echo", "hi"])
    assert res.stdout == b"hi\n"
    assert res.status == {"metadata": {}, "status": "Success"}
    assert fk.handle.log_tail(200).count("SPDY") == 0, "the API server fell back to SPDY"


async def test_exec_exit_code_propagates(fk: FakeNodes, exec_target: tuple[str, str]) -> None:
    ns, pod = exec_target
    res = await exec_ws(fk.plane, ns, pod, ["sh", "-c", "echo bad >&2; exit 3"])
    assert res.stderr == b"bad\n"
    assert res.status is not None and res.status["status"] == "Failure"
    assert res.status["reason"] == "NonZeroExitCode"
    assert res.status["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    kubectl = fk.plane.kubectl("exec", "-n", ns, pod, "--", "sh", "-c", "exit 3", check=False)
    assert kubectl.returncode == 3, kubectl.stderr
    assert fk.plane.kubectl("exec", "-n", ns, pod, "--", "echo", "hi").stdout == "hi\n"


async def test_exec_stdin_tty_and_v4(fk: FakeNodes, exec_target: tuple[str, str]) -> None:
    ns, pod = exec_target
    res = await exec_ws(fk.plane, ns, pod, ["cat"], stdin=b"piped data")
    assert res.stdout == b"piped data" and res.status == {"metadata": {}, "status": "Success"}
    res = await exec_ws(fk.plane, ns, pod, ["tty"], tty=True)
    assert res.stdout.startswith(b"/dev/pts/"), res.stdout
    res = await exec_ws(fk.plane, ns, pod, ["sh", "-c", "echo v4"], protocol="v4.channel.k8s.io")
    assert res.stdout == b"v4\n" and res.status == {"metadata": {}, "status": "Success"}


# -- no-exec mode ----------------------------------------------------------------------------------------


async def test_no_exec_mode_runs_200_pods_quickly(fk_noexec: FakeNodes, fresh_ns: FreshNs) -> None:
    plane = fk_noexec.plane
    ns = fresh_ns(plane)
    client = KubeClient(read_kubeconfig(plane.admin_kubeconfig), connections=40)
    sem = asyncio.Semaphore(30)
    n = 200

    async def create(i: int) -> None:
        manifest = pod_manifest(f"p{i}", fk_noexec.nodes[i % 2], None, restart="Always")
        async with sem:
            await client.request("POST", f"/api/v1/namespaces/{ns}/pods", body=manifest)

    async def all_running() -> None:
        """Watch (not poll) until every pod is Running and Ready."""
        path = f"/api/v1/namespaces/{ns}/pods"
        body = await client.request("GET", path)
        running = {p["metadata"]["name"] for p in body["items"] if running_and_ready(p)}
        rv = body["metadata"]["resourceVersion"]
        while len(running) < n:
            async for event in client.watch(path, {"resourceVersion": rv, "timeoutSeconds": 60}):
                obj = event["object"]
                rv = obj["metadata"].get("resourceVersion", rv)
                if event["type"] in ("ADDED", "MODIFIED") and running_and_ready(obj):
                    running.add(obj["metadata"]["name"])
                if len(running) >= n:
                    return

    try:
        t0 = time.monotonic()
        await asyncio.gather(*(create(i) for i in range(n)))
        created = time.monotonic() - t0
        async with asyncio.timeout(60):
            await all_running()
        took = time.monotonic() - t0
        print(f"\nfakekubelet --no-exec: {n} pods created in {created:.1f}s, all Running in {took:.1f}s")
        pgids = fk_noexec.handle.workdir / "pgids"
        assert not list(pgids.iterdir()), "no-exec mode must not start processes"
    finally:
        await client.close()


def test_no_exec_annotations_exit_and_fail_start(fk_noexec: FakeNodes, fresh_ns: FreshNs) -> None:
    plane = fk_noexec.plane
    ns = fresh_ns(plane)
    node = fk_noexec.nodes[0]
    ann = {ANN_EXIT_AFTER: "1", ANN_EXIT_CODE: "3"}
    create_pod(plane, ns, pod_manifest("exits", node, None, annotations=ann))
    create_pod(plane, ns, pod_manifest("pull", node, None, annotations={ANN_FAIL_START: "ImagePullBackOff"}))
    pod = wait_pod(plane, ns, "exits", phase("Failed"), "Failed after exit-after")
    assert main_status(pod)["state"]["terminated"]["exitCode"] == 3
    pod = wait_pod(
        plane,
        ns,
        "pull",
        lambda p: "waiting" in main_status(p).get("state", {}),
        "waiting",
    )
    assert pod["status"]["phase"] == "Pending"
    assert main_status(pod)["state"]["waiting"]["reason"] == "ImagePullBackOff"
    wait_for(
        lambda: any(e["type"] == "Warning" for e in events_for(plane, ns, "pull")),
        15,
        "a Warning event for pull",
    )
    status, _ = plane.api("DELETE", f"/api/v1/namespaces/{ns}/pods/pull")
    assert status == 200
    wait_for(lambda: get_pod(plane, ns, "pull") is None, 5, "the pending pod to be deleted")


def test_exec_mode_honours_exit_after(fk: FakeNodes, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(fk.plane)
    ann = {ANN_EXIT_AFTER: "0.5", ANN_EXIT_CODE: "5"}
    create_pod(fk.plane, ns, pod_manifest("timed", fk.nodes[0], None, annotations=ann))
    pod = wait_pod(fk.plane, ns, "timed", phase("Failed"), "Failed")
    assert main_status(pod)["state"]["terminated"]["exitCode"] == 5
