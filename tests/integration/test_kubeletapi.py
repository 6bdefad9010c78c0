"""The kubelet HTTPS API (vkbridge.kubeletapi) behind the REAL consumer kube-apiserver.

A fake Node on the consumer points at our in-process KubeletServer (InternalIP 127.0.0.1, our port,
a serving certificate from the consumer CA, which is its --kubelet-certificate-authority). Its pod
"app" is mirrored by a same-name pod in a pool namespace that the fake pool kubelets run. kubectl
against the consumer then exercises logs, exec (SPDY from the apiserver's translator, and WebSocket
passthrough), stdin, TTY and exit codes; plain HTTPS requests exercise authn/authz. The SPDY client
toward a pool that forbids WebSocket exec is driven through the consumer API server as that "pool".
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import json
import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from cryptography import x509

from e2e.controlplane import ControlPlane, free_port, wait_for
from e2e.emulator.rbac import vk_remote_rules
from e2e.fakekubelet import FakeKubeletHandle
from e2e.fixtures_pool import POOL_NODES
from e2e.pki import CertAuthority
from e2e.waiting import eventually
from tests.integration.helpers import must, processes_with, run_in_pty
from vkbridge.credentials.serving import ServingKeyPair
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import PODS, KubeClient
from vkbridge.kube.health import HealthChecks
from vkbridge.kube.kubeconfig import parse_kubeconfig
from vkbridge.kubeletapi.metrics_server import MetricsServer
from vkbridge.kubeletapi.server import KubeletServer
from vkbridge.kubeletapi.streams.channels import V5, StreamOptions
from vkbridge.kubeletapi.streams.pooldial import PoolDialer
from vkbridge.kubeletapi.streams.poolstream import DialError
from vkbridge.kubeletapi.streams.relay import ExecFront, Inbound, relay
from vkbridge.kubeletapi.streams.route import StreamRoute, StreamService
from vkbridge.metrics import Metrics

pytestmark = pytest.mark.integration

Json = dict[str, Any]
TICKER = (
    "for i in 1 2 3 4 5; do echo line-$i; done; i=6; while true; do sleep 0.3; echo line-$i; i=$((i+1)); done"
)


@dataclass
class Env:
    consumer: ControlPlane
    pool: ControlPlane
    node: str
    port: int
    ns: str  # consumer namespace, offloaded
    remote_ns: str  # its pool namespace
    stray_ns: str  # consumer namespace that is not offloaded
    pods: list[Json]
    workdir: Path
    home_kubeconfig: Json
    pool_kubeconfig: Json
    serving: tuple[bytes, bytes]

    def remote_namespace(self, ns: str) -> str | None:
        return self.remote_ns if ns == self.ns else None


def _pod(name: str, node: str, command: list[str] | None = None) -> Json:
    container: Json = {"name": "main", "image": "busybox:1.36"}
    if command:
        container["command"] = command
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [container],
            "tolerations": [{"operator": "Exists"}],  # our fake node never turns Ready
        },
    }


@pytest.fixture(scope="module")
def env(
    consumer: ControlPlane, pool: ControlPlane, fake_nodes: FakeKubeletHandle, tmp_path_factory: Any
) -> Iterator[Env]:
    tag = uuid.uuid4().hex[:6]
    node, ns, stray, remote = f"vk-kapi-{tag}", f"kapi-{tag}", f"kapi-stray-{tag}", f"kapi-{tag}-remote"
    port = free_port()
    workdir = tmp_path_factory.mktemp("kubeletapi")
    cert, key = consumer.ca.issue(f"system:node:{node}", ["system:nodes"], server=True, ips=["127.0.0.1"])
    assert key is not None
    # The consumer side: a Node pointing at us, two namespaces, pods bound to the node.
    must(consumer, "POST", "/api/v1/nodes", {"metadata": {"name": node, "labels": {"type": "virtual"}}})
    must(
        consumer,
        "PATCH",
        f"/api/v1/nodes/{node}/status",
        {
            "status": {
                "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
            }
        },
        content_type="application/merge-patch+json",
    )
    for name in (ns, stray):
        must(consumer, "POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    wait_for(
        lambda: consumer.api("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200, 30, "sa"
    )
    wait_for(
        lambda: consumer.api("GET", f"/api/v1/namespaces/{stray}/serviceaccounts/default")[0] == 200, 30, "sa"
    )
    for pns, name in ((ns, "app"), (stray, "stray")):
        must(consumer, "POST", f"/api/v1/namespaces/{pns}/pods", _pod(name, node))
    # What reflection would report back: the pod runs (kubectl port-forward and attach check it).
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    running = {
        "status": {
            "phase": "Running",
            "startTime": now,
            "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
            "containerStatuses": [
                {"name": "main", "ready": True, "restartCount": 0, "image": "busybox:1.36", "imageID": "",
                 "state": {"running": {"startedAt": now}}}
            ],
        }
    }  # fmt: skip
    pods = [
        must(consumer, "PATCH", f"/api/v1/namespaces/{pns}/pods/{name}/status", running,
                content_type="application/merge-patch+json")
        for pns, name in ((ns, "app"), (stray, "stray"))
    ]  # fmt: skip
    # The pool side: the same pod, run by the fake pool kubelet.
    must(pool, "POST", "/api/v1/namespaces", {"metadata": {"name": remote}})
    wait_for(
        lambda: pool.api("GET", f"/api/v1/namespaces/{remote}/serviceaccounts/default")[0] == 200, 30, "sa"
    )
    must(pool, "POST", f"/api/v1/namespaces/{remote}/pods", _pod("app", POOL_NODES[0], ["sh", "-c", TICKER]))
    wait_for(
        lambda: (
            pool.api("GET", f"/api/v1/namespaces/{remote}/pods/app")[1].get("status", {}).get("phase")
            == "Running"
        ),
        30,
        "pool pod running",
    )
    # Our identities: on the consumer a delegated authn/authz reviewer, on the pool a cluster admin.
    consumer.kubectl("create", "clusterrolebinding", f"kapi-{tag}", "--clusterrole=system:auth-delegator",
                     f"--user=vkbridge-kubeletapi-{tag}")  # fmt: skip
    # ...that reads pods (the pod cache) and ConfigMaps (the client CA), as deploy/rbac.yaml grants.
    consumer.kubectl("create", "clusterrole", f"kapi-read-{tag}", "--verb=get,list,watch",
                     "--resource=pods,configmaps")  # fmt: skip
    consumer.kubectl("create", "clusterrolebinding", f"kapi-read-{tag}", f"--clusterrole=kapi-read-{tag}",
                     f"--user=vkbridge-kubeletapi-{tag}")  # fmt: skip
    hc, hk = consumer.issue_client_cert(f"vkbridge-kubeletapi-{tag}")
    pc, pk = pool.issue_client_cert(f"vkbridge-pool-{tag}", ["system:masters"])
    assert hk is not None and pk is not None
    yield Env(
        consumer=consumer,
        pool=pool,
        node=node,
        port=port,
        ns=ns,
        remote_ns=remote,
        stray_ns=stray,
        pods=pods,
        workdir=workdir,
        home_kubeconfig=consumer.kubeconfig_dict(hc, hk),
        pool_kubeconfig=pool.kubeconfig_dict(pc, pk),
        serving=(cert, key),
    )
    for name in (ns, stray):
        consumer.api("DELETE", f"/api/v1/namespaces/{name}")
    consumer.api("DELETE", f"/api/v1/nodes/{node}")
    consumer.kubectl("delete", "clusterrolebinding", f"kapi-{tag}", f"kapi-read-{tag}", check=False)
    consumer.kubectl("delete", "clusterrole", f"kapi-read-{tag}", check=False)
    pool.api("DELETE", f"/api/v1/namespaces/{remote}", {"gracePeriodSeconds": 0})


@contextlib.asynccontextmanager
async def node_pods(home: KubeClient, node: str) -> AsyncIterator[Cache]:
    """The pods bound to ``node``, as the engine's cache keeps them (compact), synced and following."""
    cache = Cache(home, PODS, field_selector=f"spec.nodeName={node}", name="consumer/pods", compact=True)
    task = asyncio.create_task(cache.run())
    try:
        assert await cache.wait_synced(30)
        yield cache
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


@contextlib.asynccontextmanager
async def running_server(env: Env, metrics: Metrics | None = None) -> AsyncIterator[KubeletServer]:
    """The kubelet API on ``env.port``, serving and wired as app.py wires it (``metrics``: its registry)."""
    home = KubeClient(parse_kubeconfig(env.home_kubeconfig), name="consumer")
    pool = KubeClient(parse_kubeconfig(env.pool_kubeconfig), name="pool")
    served = ServingKeyPair(*env.serving)
    async with node_pods(home, env.node) as local_pods:
        srv = KubeletServer(
            home, pool, node_name=env.node, listen_host="127.0.0.1", port=env.port,
            serving_certificate=lambda: served, client_ca_pem=env.consumer.ca_pem,
            remote_namespace=env.remote_namespace, local_pods=local_pods, metrics=metrics,
        )  # fmt: skip
        await srv.start()
        await srv.wait_serving(5)
        try:
            yield srv
        finally:
            await srv.stop()
            await home.close()
            await pool.close()


@pytest.fixture
async def server(env: Env) -> AsyncIterator[KubeletServer]:
    async with running_server(env) as srv:
        yield srv


async def kubectl(env: Env, *args: str, input: str | None = None, timeout: float = 60) -> Any:
    """kubectl against the consumer, off the event loop (our server runs on it)."""
    return await asyncio.to_thread(env.consumer.kubectl, *args, input=input, check=False, timeout=timeout)


# ---------------------------------------------------------------------------------------------- logs


async def test_kubectl_logs(env: Env, server: KubeletServer) -> None:
    res = await kubectl(env, "logs", "-n", env.ns, "app")
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[:5] == [f"line-{i}" for i in range(1, 6)]
    res = await kubectl(env, "logs", "-n", env.ns, "app", "--tail=1", "--timestamps")
    assert res.returncode == 0, res.stderr
    assert len(res.stdout.splitlines()) == 1 and "Z line-" in res.stdout


async def test_kubectl_logs_follow_streams_and_ends_when_the_client_leaves(
    env: Env, server: KubeletServer
) -> None:
    proc = await asyncio.create_subprocess_exec(
        str(env.consumer.bin["kubectl"]),
        f"--kubeconfig={env.consumer.admin_kubeconfig}",
        "logs",
        "-f",
        "--tail=2",
        "-n",
        env.ns,
        "app",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(20):
            lines = [(await proc.stdout.readline()).decode().strip() for _ in range(4)]
    finally:
        if proc.returncode is None:
            proc.terminate()
        await proc.wait()
    numbers = [int(line.removeprefix("line-")) for line in lines]
    assert numbers == list(range(numbers[0], numbers[0] + 4)), lines  # 2 tail lines, then live ones
    assert numbers[0] >= 4  # not from the start: at least line-1..line-5 existed
    # The pool stream is released once the apiserver hangs up on us.
    await eventually(lambda: server.active_log_streams == 0, 15, "the log stream to close")


async def test_kubectl_logs_follow_ends_when_the_container_ends(env: Env, server: KubeletServer) -> None:
    name = f"short-{uuid.uuid4().hex[:5]}"
    must(env.consumer, "POST", f"/api/v1/namespaces/{env.ns}/pods", _pod(name, env.node))
    body = _pod(name, POOL_NODES[0], ["sh", "-c", "echo first; sleep 4; echo last"])
    body["spec"]["restartPolicy"] = "Never"
    must(env.pool, "POST", f"/api/v1/namespaces/{env.remote_ns}/pods", body)
    await eventually(
        lambda: (
            env.pool.api("GET", f"/api/v1/namespaces/{env.remote_ns}/pods/{name}")[1]
            .get("status", {})
            .get("phase")
            == "Running"
        ),
        30,
        "the pool pod to run",
    )
    started = time.monotonic()
    res = await kubectl(env, "logs", "-f", "-n", env.ns, name, timeout=30)
    assert (res.returncode, res.stdout) == (0, "first\nlast\n"), res.stderr
    assert time.monotonic() - started > 1  # it did follow, then ended with the container
    await eventually(lambda: server.active_log_streams == 0, 5, "the log stream to close")


async def test_logs_of_a_pod_in_a_namespace_we_do_not_reflect_is_404(env: Env, server: KubeletServer) -> None:
    res = await kubectl(env, "logs", "-n", env.stray_ns, "stray")
    assert res.returncode != 0
    assert "(NotFound)" in res.stderr, res.stderr  # the apiserver replaces a kubelet's 404 text
    admin = admin_cert(env, "logs-admin")
    status, body = await _get(env, f"/containerLogs/{env.stray_ns}/stray/main", cert=admin)
    assert status == 404
    assert (
        body
        == f'pods "stray" not found: namespace "{env.stray_ns}" is not reflected to the pool by this node'
    )
    status, body = await _get(env, f"/containerLogs/{env.ns}/ghost/main", cert=admin)
    assert status == 404 and 'pods "ghost" not found' in body, body  # the pool's own NotFound


async def _ws_exec(env: Env, path: str, cert: tuple[bytes, bytes]) -> tuple[int, bytes]:
    """(HTTP status of the upgrade, stdout) of ``echo reached`` sent straight to our kubelet API (v5)."""
    params = [("command", "echo"), ("command", "reached"), ("output", "1")]
    out = b""
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.ws_connect(f"wss://127.0.0.1:{env.port}{path}", params=params, protocols=(V5,),
                            ssl=client_context(env, cert)) as ws,
        ):  # fmt: skip
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY and msg.data[:1] == b"\x01":
                    out += msg.data[1:]
    except aiohttp.WSServerHandshakeError as exc:
        return exc.status, b""
    return 101, out


async def test_logs_and_exec_reach_only_pods_bound_to_this_node_with_the_uid_given(
    env: Env, server: KubeletServer
) -> None:
    """The pool namespace also holds pods we must not reach: another virtual node's (its local pod is
    bound elsewhere) and pods with no local counterpart. A kubelet answers 404 for a pod it does not run,
    and for a UID in the path that is not its pod's."""
    other = f"{env.node}-other"
    must(env.consumer, "POST", "/api/v1/nodes", {"metadata": {"name": other}})
    remote_pods = ("elsewhere", "orphan")
    try:
        must(env.consumer, "POST", f"/api/v1/namespaces/{env.ns}/pods", _pod("elsewhere", other))
        for name in remote_pods:
            body = _pod(name, POOL_NODES[0], ["sh", "-c", TICKER])
            must(env.pool, "POST", f"/api/v1/namespaces/{env.remote_ns}/pods", body)
        await eventually(
            lambda: all(
                env.pool.api("GET", f"/api/v1/namespaces/{env.remote_ns}/pods/{n}")[1]
                .get("status", {})
                .get("phase")
                == "Running"
                for n in remote_pods
            ),
            30,
            "the pool pods to run",
        )
        admin = admin_cert(env, "reach-admin")
        for name in remote_pods:
            status, text = await _get(env, f"/containerLogs/{env.ns}/{name}/main", cert=admin)
            assert (status, text) == (404, f'pods "{name}" not found on node {env.node}')
            assert await _ws_exec(env, f"/exec/{env.ns}/{name}/main", admin) == (404, b"")
            assert await _ws_exec(env, f"/attach/{env.ns}/{name}/main", admin) == (404, b"")
        uid = env.pods[0]["metadata"]["uid"]  # "app": ours
        assert await _ws_exec(env, f"/exec/{env.ns}/app/{uid}/main", admin) == (101, b"reached\n")
        assert await _ws_exec(env, f"/exec/{env.ns}/app/main", admin) == (101, b"reached\n")
        assert await _ws_exec(env, f"/exec/{env.ns}/app/{uuid.uuid4()}/main", admin) == (404, b"")
        status, text = await _get(env, f"/containerLogs/{env.ns}/app/main", cert=admin)
        assert status == 200 and text.startswith("line-1\n"), text
    finally:
        env.consumer.api("DELETE", f"/api/v1/namespaces/{env.ns}/pods/elsewhere", {"gracePeriodSeconds": 0})
        for name in remote_pods:
            env.pool.api(
                "DELETE", f"/api/v1/namespaces/{env.remote_ns}/pods/{name}", {"gracePeriodSeconds": 0}
            )
        env.consumer.api("DELETE", f"/api/v1/nodes/{other}")


# ---------------------------------------------------------------------------------------------- exec


async def test_kubectl_exec_echo_goes_through_spdy_from_the_apiserver(
    env: Env, server: KubeletServer
) -> None:
    res = await kubectl(env, "exec", "-n", env.ns, "app", "--", "echo", "hi")
    assert (res.returncode, res.stdout) == (0, "hi\n"), res.stderr
    # kubectl offers WebSocket v5; the 1.36 apiserver translates it to SPDY/3.1 toward a kubelet
    # whose node does not declare ExtendWebSocketsToKubelet.
    assert server.stream_protocols == {"spdy/v5.channel.k8s.io": 1}


async def test_kubectl_exec_propagates_exit_codes(env: Env, server: KubeletServer) -> None:
    res = await kubectl(env, "exec", "-n", env.ns, "app", "--", "sh", "-c", "echo out; echo err >&2; exit 3")
    assert res.returncode == 3, res.stderr
    assert res.stdout == "out\n"
    assert "err\n" in res.stderr
    res = await kubectl(env, "exec", "-n", env.ns, "app", "--", "sh", "-c", "exit 0")
    assert res.returncode == 0, res.stderr


async def test_kubectl_exec_with_stdin(env: Env, server: KubeletServer) -> None:
    data = "".join(f"row {i}\n" for i in range(2000))  # several frames' worth
    res = await kubectl(
        env, "exec", "-i", "-n", env.ns, "app", "--", "sh", "-c", "cat; echo done", input=data
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout == data + "done\n"


async def test_kubectl_exec_errors_are_reported(env: Env, server: KubeletServer) -> None:
    res = await kubectl(env, "exec", "-n", env.ns, "app", "--", "/nonexistent/binary")
    assert res.returncode != 0
    assert res.stderr.strip(), "the failure must be explained"
    res = await kubectl(env, "exec", "-n", env.stray_ns, "stray", "--", "true")
    assert res.returncode != 0 and "is not reflected to the pool" in res.stderr, res.stderr


async def start_kubectl_exec(env: Env, command: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        str(env.consumer.bin["kubectl"]),
        f"--kubeconfig={env.consumer.admin_kubeconfig}",
        "exec", "-n", env.ns, "app", "--", "sh", "-c", command,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        assert await proc.stdout.readline() == b"started\n"
    return proc


async def test_interrupted_exec_stops_the_remote_process(env: Env, server: KubeletServer) -> None:
    marker = f"sleep {3600 + int(uuid.uuid4().int % 1000)}"
    proc = await start_kubectl_exec(env, f"echo started; exec {marker}")
    try:
        await eventually(lambda: bool(processes_with(marker)), 10, "the remote process")
        assert server.active_exec_sessions == 1
    finally:
        proc.terminate()
        await proc.wait()
    await eventually(lambda: server.active_exec_sessions == 0, 15, "the session to end")
    await eventually(lambda: not processes_with(marker), 15, "the remote process to be killed")


async def test_kubectl_exec_tty_with_resize(env: Env, server: KubeletServer) -> None:
    # The size is read after our input: the remote process starts when we dial the pool, before the
    # client's first resize can arrive (the same race a kubelet has with its runtime).
    script = "test -t 0 && echo is-a-tty; read x; stty size; echo got-$x"
    argv = [str(env.consumer.bin["kubectl"]), f"--kubeconfig={env.consumer.admin_kubeconfig}",
            "exec", "-it", "-n", env.ns, "app", "--", "sh", "-c", script]  # fmt: skip
    rc, out = await asyncio.to_thread(run_in_pty, argv, b"abc\r", 40, rows=33, cols=101, expect=b"is-a-tty")
    text = out.decode(errors="replace")
    assert rc == 0, text
    assert "33 101" in text  # our terminal size reached the remote pty through the resize stream
    assert "got-abc" in text


async def test_exec_websocket_passthrough_v5_and_v4(env: Env, server: KubeletServer) -> None:
    # Declared ExtendWebSocketsToKubelet: the apiserver forwards kubectl's WebSocket v5 unchanged.
    patch = {"status": {"declaredFeatures": ["ExtendWebSocketsToKubelet"]}}
    must(env.consumer, "PATCH", f"/api/v1/nodes/{env.node}/status", patch,
            content_type="application/merge-patch+json")  # fmt: skip
    try:
        node = must(env.consumer, "GET", f"/api/v1/nodes/{env.node}")
        assert node["status"].get("declaredFeatures") == ["ExtendWebSocketsToKubelet"], node["status"]
        res = await kubectl(
            env, "exec", "-i", "-n", env.ns, "app", "--", "sh", "-c", "cat; exit 4", input="x\n"
        )
        assert (res.returncode, res.stdout) == (4, "x\n"), res.stderr
        assert server.stream_protocols["websocket/v5.channel.k8s.io"] == 1, server.stream_protocols
    finally:
        must(env.consumer, "PATCH", f"/api/v1/nodes/{env.node}/status",
                {"status": {"declaredFeatures": None}}, content_type="application/merge-patch+json")  # fmt: skip
    # A v4 client (kubernetes_asyncio's default) is always passed through.
    admin = admin_cert(env, "ws-admin")
    ctx = client_context(env, admin)
    url = f"{env.consumer.url}/api/v1/namespaces/{env.ns}/pods/app/exec".replace("https", "wss")
    params = [("command", "sh"), ("command", "-c"), ("command", "echo v4; exit 2"), ("stdout", "true")]
    out, err = b"", b""
    async with (
        aiohttp.ClientSession() as http,
        http.ws_connect(url, params=params, protocols=("v4.channel.k8s.io",), ssl=ctx) as ws,
    ):
        assert ws.protocol == "v4.channel.k8s.io"
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.BINARY and msg.data:
                if msg.data[0] == 1:
                    out += msg.data[1:]
                elif msg.data[0] == 3:
                    err += msg.data[1:]
    assert out == b"v4\n"
    status = json.loads(err)
    assert status["reason"] == "NonZeroExitCode" and status["details"]["causes"][0]["message"] == "2"
    assert server.stream_protocols["websocket/v4.channel.k8s.io"] == 1


async def test_stats_summary_and_pods(env: Env, server: KubeletServer) -> None:
    # (the apiserver's node proxy refuses loopback node addresses, so ask the kubelet API directly)
    admin = admin_cert(env, "stats-admin")
    body = await _get_ok(env, "/stats/summary", cert=admin)
    summary = json.loads(body)
    assert summary["node"]["nodeName"] == env.node and summary["node"]["startTime"]
    refs = {(p["podRef"]["namespace"], p["podRef"]["name"]) for p in summary["pods"]}
    assert {(env.ns, "app"), (env.stray_ns, "stray")} <= refs  # (other tests add pods to the node)
    assert all(p["podRef"]["uid"] for p in summary["pods"])
    assert "cpu" not in summary["node"]  # the pool has no metrics API: no usage numbers
    for path in ("/pods", "/runningpods/"):
        body = await _get_ok(env, path, cert=admin)
        items = json.loads(body)["items"]
        listed = {(p["metadata"]["namespace"], p["metadata"]["name"]) for p in items}
        if path == "/pods":
            assert listed == refs
        else:  # only what runs (other tests add pods to the node that never run)
            assert {(env.ns, "app"), (env.stray_ns, "stray")} <= listed <= refs
        assert {p["spec"]["nodeName"] for p in items} == {env.node}


async def test_runningpods_without_the_trailing_slash_is_served_as_client_go_calls_it(
    env: Env, server: KubeletServer
) -> None:
    admin = admin_cert(env, "runningpods-admin")
    body = await _get_ok(env, "/runningpods", cert=admin)
    assert (env.ns, "app") in {
        (p["metadata"]["namespace"], p["metadata"]["name"]) for p in json.loads(body)["items"]
    }


# ---------------------------------------------------------------------------------------------- SPDY to the pool


class ScriptedFront(ExecFront):
    """An in-memory client: plays scripted events, then waits; records output and the Status."""

    def __init__(self, events: list[Inbound]) -> None:
        self.protocol = V5
        self._events = list(events)
        self.out: dict[int, bytes] = {1: b"", 2: b""}
        self.status: dict[str, Any] | None = None

    async def receive(self) -> Inbound:
        if self._events:
            return self._events.pop(0)
        await asyncio.Event().wait()  # the client stays until the session ends
        raise AssertionError("unreachable")

    async def send(self, channel: int, data: bytes) -> None:
        self.out[channel] += data

    async def finish(self, status: dict[str, Any]) -> None:
        self.status = status

    async def abort(self) -> None:
        pass


async def test_a_pool_that_forbids_websocket_exec_is_reached_over_spdy(
    env: Env, server: KubeletServer
) -> None:
    """Liqo's pool-side role grants create (SPDY POST) but not get (WebSocket GET) on pods/exec.

    Here the "pool" is the consumer API server with exactly that role, so the SPDY dial goes through
    a real kube-apiserver (passthrough) to our own kubelet API, which relays to the real pool.
    """
    tag = uuid.uuid4().hex[:5]
    user = f"liqo-vk-{tag}"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": user}, "rules": vk_remote_rules()}  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": user},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": user},
        "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}],
    }
    must(env.consumer, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    must(env.consumer, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    cert, key = env.consumer.issue_client_cert(user)
    assert key is not None
    client = KubeClient(parse_kubeconfig(env.consumer.kubeconfig_dict(cert, key)), name="liqo-role")
    dialer = PoolDialer(client)
    service = StreamService(client, dialer, lambda ns: ns)
    route = StreamRoute("exec", env.ns, "app", "main")
    try:
        opts = StreamOptions(True, True, True, False, ("sh", "-c", "cat; echo err >&2; exit 6"))
        stream = await service.open(route, opts)
        assert stream.transport == "spdy" and stream.protocol == V5
        front = ScriptedFront([Inbound("stdin", b"hello\n"), Inbound("stdin_eof")])
        result = await relay(front, stream)
        assert (front.out[1], front.out[2], result.exit_code) == (b"hello\n", b"err\n", 6), front.status
        assert dialer.dials == {"websocket": 1, "spdy": 1}
        # A TTY session, with a resize, goes straight to SPDY now (the 403 is remembered).
        tty = StreamOptions(True, True, False, True, ("sh", "-c", "read x; stty size; echo got-$x"))
        stream = await service.open(route, tty)
        front = ScriptedFront([Inbound("resize", b'{"Width":90,"Height":20}'), Inbound("stdin", b"abc\r")])
        result = await relay(front, stream)
        assert result.exit_code == 0, front.status
        assert b"20 90" in front.out[1] and b"got-abc" in front.out[1], front.out
        assert dialer.dials == {"websocket": 1, "spdy": 2}
        assert server.stream_protocols["spdy/v5.channel.k8s.io"] == 2
        # Refusals carry the API server's own message (the SPDY response body is readable).
        with pytest.raises(DialError) as err:
            await service.open(StreamRoute("exec", env.ns, "ghost", "main"), opts)
        assert (err.value.status, err.value.message) == (404, 'pods "ghost" not found')
    finally:
        await dialer.close()
        await client.close()
        env.consumer.api("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{user}")
        env.consumer.api("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{user}")


# ---------------------------------------------------------------------------------------------- authn/authz


def admin_cert(env: Env, user: str) -> tuple[bytes, bytes]:
    """A consumer client certificate and key for ``user`` in system:masters (allowed every kubelet path)."""
    cert, key = env.consumer.issue_client_cert(user, ["system:masters"])
    assert key is not None
    return cert, key


def _token(env: Env, sa: str) -> str:
    must(env.consumer, "POST", f"/api/v1/namespaces/{env.ns}/serviceaccounts", {"metadata": {"name": sa}})
    tr = must(
        env.consumer,
        "POST",
        f"/api/v1/namespaces/{env.ns}/serviceaccounts/{sa}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 600},
        },
    )
    return str(tr["status"]["token"])


def client_context(env: Env, cert: tuple[bytes, bytes] | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=env.consumer.ca_pem.decode())
    if cert is not None:
        p = env.workdir / f"client-{uuid.uuid4().hex[:6]}.pem"
        p.write_bytes(cert[0] + cert[1])
        p.chmod(0o600)
        ctx.load_cert_chain(p)
        p.unlink()
    return ctx


async def _get(
    env: Env, path: str, *, token: str | None = None, cert: tuple[bytes, bytes] | None = None
) -> tuple[int, str]:
    ctx = client_context(env, cert)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"https://127.0.0.1:{env.port}{path}", ssl=ctx, headers=headers) as resp,
    ):
        return resp.status, await resp.text()


async def _get_ok(
    env: Env, path: str, *, token: str | None = None, cert: tuple[bytes, bytes] | None = None
) -> str:
    """The body of a GET that must be answered 200."""
    status, body = await _get(env, path, token=token, cert=cert)
    assert status == 200, body
    return body


async def test_requests_without_credentials_get_401(env: Env, server: KubeletServer) -> None:
    assert await _get(env, "/pods") == (401, "Unauthorized")
    assert (await _get(env, "/pods", token="not-a-real-token"))[0] == 401


async def test_service_account_tokens_are_authorized_by_subject_access_review(
    env: Env, server: KubeletServer
) -> None:
    tag = uuid.uuid4().hex[:5]
    denied = _token(env, f"noproxy-{tag}")
    status, body = await _get(env, "/pods", token=denied)
    assert status == 403
    assert body == (
        f"Forbidden (user=system:serviceaccount:{env.ns}:noproxy-{tag}, verb=get, resource=nodes, "
        "subresource(s)=[pods proxy])\n"
    )
    allowed = _token(env, f"proxier-{tag}")
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": f"kapi-proxy-{tag}"},
            "rules": [{"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get", "create"]}]}  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": f"kapi-proxy-{tag}"},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": f"kapi-proxy-{tag}",
        },
        "subjects": [{"kind": "ServiceAccount", "name": f"proxier-{tag}", "namespace": env.ns}],
    }
    must(env.consumer, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    must(env.consumer, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)
    try:
        body = await _get_ok(env, "/pods", token=allowed)
        assert json.loads(body)["kind"] == "PodList"
        # nodes/proxy does not grant nodes/stats: the kubelet mapping keeps them apart.
        assert (await _get(env, "/stats/summary", token=allowed))[0] == 403
        assert server.auth.stats.token_reviews == 2
    finally:
        env.consumer.api("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/kapi-proxy-{tag}")
        env.consumer.api("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/kapi-proxy-{tag}")


async def test_client_certificates_authenticate_and_foreign_ones_are_refused(
    env: Env, server: KubeletServer
) -> None:
    admin = admin_cert(env, "some-admin")
    status, body = await _get(env, "/healthz", cert=admin)
    assert (status, body) == (200, "ok")
    nobody = env.consumer.issue_client_cert("nobody-in-particular")
    assert nobody[1] is not None
    status, body = await _get(env, "/healthz", cert=(nobody[0], nobody[1]))
    assert status == 403 and "user=nobody-in-particular" in body
    foreign = CertAuthority.create("someone-else").issue("some-admin", ["system:masters"], client=True)
    assert foreign.key_pem is not None
    with pytest.raises(aiohttp.ClientError):
        await _get(env, "/healthz", cert=(foreign.cert_pem, foreign.key_pem))


# ---------------------------------------------------------------------------------------------- TLS life cycle


async def test_a_changed_client_ca_is_trusted_without_a_restart(env: Env) -> None:
    """A kubelet reloads its client CA file; ours is a ConfigMap (extension-apiserver-authentication in
    kube-system, which kube-apiserver itself rewrites, so a test copy here): a new CA in it admits
    kube-apiserver's new client certificate without restarting vkbridge, and the CA it replaced is
    refused from then on."""
    tag = uuid.uuid4().hex[:5]
    cm = f"client-ca-{tag}"
    old = CertAuthority.create("retired-client-ca")
    must(env.consumer, "POST", f"/api/v1/namespaces/{env.ns}/configmaps",
            {"metadata": {"name": cm}, "data": {"client-ca-file": old.cert_pem.decode()}})  # fmt: skip
    home = KubeClient(parse_kubeconfig(env.home_kubeconfig), name="consumer")
    pool = KubeClient(parse_kubeconfig(env.pool_kubeconfig), name="pool")
    served = ServingKeyPair(*env.serving)
    no_pods = Cache(home, PODS, name="never-run")  # this test reads no pod
    srv = KubeletServer(home, pool, node_name=env.node, listen_host="127.0.0.1", port=0,
                        serving_certificate=lambda: served, client_ca_pem=old.cert_pem,
                        client_ca_configmap=f"{env.ns}/{cm}", remote_namespace=env.remote_namespace,
                        local_pods=no_pods)  # fmt: skip
    admin = admin_cert(env, "ca-reload-admin")
    client = client_context(env, admin)
    retired = old.issue("retired-admin", ["system:masters"], client=True)
    assert retired.key_pem is not None
    by_old = client_context(env, (retired.cert_pem, retired.key_pem))

    async def status(ctx: ssl.SSLContext = client) -> int | None:
        """/pods with kube-apiserver's kind of client certificate; None: the handshake was refused."""
        try:
            async with (
                aiohttp.ClientSession() as http,
                http.get(f"https://127.0.0.1:{srv.port}/pods", ssl=ctx) as r,
            ):
                return r.status
        except aiohttp.ClientError:
            return None

    try:
        await srv.start()
        await srv.wait_serving(5)
        assert await status() is None  # signed by the consumer CA, which is not trusted yet
        assert await status(by_old) == 200
        must(env.consumer, "PATCH", f"/api/v1/namespaces/{env.ns}/configmaps/{cm}",
                {"data": {"client-ca-file": env.consumer.ca_pem.decode()}},
                content_type="application/merge-patch+json")  # fmt: skip
        deadline = time.monotonic() + 15
        while (got := await status()) != 200:
            assert time.monotonic() < deadline, f"still {got} after the CA changed"
            await asyncio.sleep(0.2)
        assert await status(by_old) is None  # the CA removed from the bundle, without a restart
        assert srv.tls.client_ca_reloads == 1
    finally:
        await srv.stop()
        await home.close()
        await pool.close()


async def test_waits_for_a_serving_certificate_then_rotates_it_without_restarting(
    env: Env, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="vkbridge.kubeletapi")
    holder: dict[str, ServingKeyPair | None] = {"ctx": None}
    home = KubeClient(parse_kubeconfig(env.home_kubeconfig), name="consumer")
    pool = KubeClient(parse_kubeconfig(env.pool_kubeconfig), name="pool")
    no_pods = Cache(home, PODS, name="never-run")  # this test reads no pod
    srv = KubeletServer(home, pool, node_name=env.node, listen_host="127.0.0.1", port=0,
                        serving_certificate=lambda: holder["ctx"], client_ca_pem=env.consumer.ca_pem,
                        remote_namespace=env.remote_namespace, local_pods=no_pods)  # fmt: skip
    ca = env.consumer.ca
    client_ctx = ssl.create_default_context(cadata=env.consumer.ca_pem.decode())
    try:
        await srv.start()
        await eventually(
            lambda: any("waits for its serving certificate" in r.getMessage() for r in caplog.records),
            5,
            "the log line (INFO: every start waits for one; a WARNING only after a minute)",
        )
        assert not srv.serving and srv.port == 0
        first = ca.issue(f"system:node:{env.node}", server=True, ips=["127.0.0.1"])
        assert first.key_pem is not None
        holder["ctx"] = ServingKeyPair(first.cert_pem, first.key_pem)
        await srv.wait_serving(10)

        async def served_serial() -> int:
            _, writer = await asyncio.open_connection("127.0.0.1", srv.port, ssl=client_ctx)
            der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()
            return int(x509.load_der_x509_certificate(der).serial_number)

        assert await served_serial() == x509.load_pem_x509_certificate(first.cert_pem).serial_number
        second = ca.issue(f"system:node:{env.node}", server=True, ips=["127.0.0.1"])
        assert second.key_pem is not None
        holder["ctx"] = ServingKeyPair(second.cert_pem, second.key_pem)
        assert await served_serial() == x509.load_pem_x509_certificate(second.cert_pem).serial_number
        assert srv.tls.rotations == 1
        # Client certificates still verify against the client CA after the swap.
        admin = admin_cert(env, "rotation-admin")
        ctx = client_context(env, admin)
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"https://127.0.0.1:{srv.port}/pods", ssl=ctx) as r,
        ):
            assert r.status == 200
    finally:
        await srv.stop()
        await home.close()
        await pool.close()


# ---------------------------------------------------------------------------------------------- metrics


async def test_metrics_server_serves_the_registry_and_probes() -> None:
    metrics = Metrics()
    metrics.reflected_pods.set(7)
    state: dict[str, str | None] = {"leader": None}
    livez, readyz = HealthChecks("livez", failure_status=500), HealthChecks("readyz")
    livez.add("ping", lambda: None)
    readyz.add("ping", lambda: None)
    readyz.add("leader", lambda: state["leader"])
    srv = MetricsServer(metrics, "127.0.0.1", 0, livez=livez, readyz=readyz)
    await srv.start()
    try:
        base = f"http://127.0.0.1:{srv.port}"
        async with aiohttp.ClientSession() as http:
            async with http.get(base + "/metrics") as r:
                assert r.status == 200 and r.content_type == "text/plain"
                assert "vkbridge_reflected_pods 7.0" in await r.text()
            for path in ("/healthz", "/livez", "/readyz", "/readyz/leader", "/livez/ping"):
                async with http.get(base + path) as r:
                    assert (r.status, await r.text()) == (200, "ok"), path
            state["leader"] = "standby: lease t/n held by vk-a"
            async with http.get(base + "/readyz") as r:
                assert r.status == 503
                assert await r.text() == (
                    "[+]ping ok\n[-]leader failed: standby: lease t/n held by vk-a\nreadyz check failed\n"
                )
            async with http.get(base + "/readyz/leader") as r:
                assert r.status == 503 and "[-]leader failed" in await r.text()
            async with http.get(base + "/readyz?exclude=leader") as r:
                assert (r.status, await r.text()) == (200, "ok")
            async with http.get(base + "/livez?verbose") as r:
                assert (r.status, await r.text()) == (200, "[+]ping ok\nlivez check passed\n")
            async with http.get(base + "/readyz/nonexistent") as r:
                assert r.status == 404
    finally:
        await srv.stop()


async def test_port_forward_is_relayed_to_the_pool_and_refused_for_a_namespace_we_do_not_reflect(
    env: Env, server: KubeletServer
) -> None:
    # The fake pool kubelet cannot port-forward: its refusal, not ours, must reach the user.
    res = await kubectl(env, "port-forward", "-n", env.ns, "pod/app", f"{free_port()}:80", timeout=30)
    assert res.returncode != 0
    assert "fake kubelet" in res.stderr and "not implemented by this" not in res.stderr, res.stderr
    admin = admin_cert(env, "pf-admin")
    status, body = await _get(env, f"/portForward/{env.stray_ns}/stray?port=80", cert=admin)
    assert status == 404
    assert body.endswith(f'namespace "{env.stray_ns}" is not reflected to the pool by this node\n')


# ---------------------------------------------------------------------------------------------- Prometheus

PROM_PATHS = ("/metrics", "/metrics/resource", "/metrics/cadvisor", "/metrics/probes")


@contextlib.asynccontextmanager
async def server_with_registry(env: Env, metrics: Metrics) -> AsyncIterator[Env]:
    """A second kubelet API on its own port, wired with vkbridge's registry as app.py wires it."""
    here = dataclasses.replace(env, port=free_port())
    async with running_server(here, metrics):
        yield here


def _families(body: str) -> dict[str, Any]:
    from prometheus_client.parser import text_string_to_metric_families

    return {f.name: f for f in text_string_to_metric_families(body)}


def _bind_node_subresource(env: Env, user: str, subresource: str) -> Callable[[], None]:
    name = f"kapi-{subresource}-{user}"
    role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": [f"nodes/{subresource}"], "verbs": ["get"]}]}  # fmt: skip
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user}],
    }
    must(env.consumer, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", role)
    must(env.consumer, "POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", binding)

    def undo() -> None:
        env.consumer.api("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{name}")
        env.consumer.api("DELETE", f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{name}")

    return undo


async def test_prometheus_kubelet_paths_answer_valid_exposition_to_a_nodes_metrics_reader(env: Env) -> None:
    """kube-prometheus-stack scrapes /metrics, /metrics/cadvisor and /metrics/probes, metrics-server
    /metrics/resource: each is 200 with text prometheus_client parses, for a user granted nodes/metrics."""
    tag = uuid.uuid4().hex[:5]
    reader = f"prom-{tag}"
    cert, key = env.consumer.issue_client_cert(reader)
    assert key is not None
    metrics = Metrics()
    metrics.reflected_pods.set(3)
    undo = _bind_node_subresource(env, reader, "metrics")
    try:
        async with server_with_registry(env, metrics) as here:
            bodies: dict[str, str] = {}
            for path in PROM_PATHS:
                status, body = await _get(here, path, cert=(cert, key))
                assert status == 200, (path, body)
                _families(body)  # parses
                bodies[path] = body
    finally:
        undo()
    own = _families(bodies["/metrics"])
    assert [s.value for s in own["vkbridge_reflected_pods"].samples] == [3.0]  # vkbridge's registry
    (node_name,) = own["kubelet_node_name"].samples
    assert node_name.labels == {"node": env.node} and node_name.value == 1.0
    assert own["kubelet_running_pods"].samples[0].value >= 2  # app and stray run (reflected status)
    resource = _families(bodies["/metrics/resource"])
    # This pool has no metrics API: no usage, but the start time of each running container, and no error.
    assert [s.value for s in resource["scrape_error"].samples] == [0.0]
    assert resource["container_cpu_usage_seconds"].samples == []
    starts = {(s.labels["namespace"], s.labels["pod"], s.labels["container"]): s.value
              for s in resource["container_start_time_seconds"].samples}  # fmt: skip
    started = env.pods[0]["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    expected = dt.datetime.fromisoformat(started).timestamp()
    assert starts[(env.ns, "app", "main")] == expected
    for path in ("/metrics/cadvisor", "/metrics/probes"):
        assert _families(bodies[path]) == {} and bodies[path].startswith("# vkbridge virtual node")


async def test_prometheus_kubelet_paths_refuse_a_user_without_nodes_metrics(
    env: Env, server: KubeletServer
) -> None:
    tag = uuid.uuid4().hex[:5]
    proxier = f"proxy-only-{tag}"
    cert, key = env.consumer.issue_client_cert(proxier)
    assert key is not None
    undo = _bind_node_subresource(env, proxier, "proxy")  # the kubelet maps /metrics* to metrics only
    try:
        for path in PROM_PATHS:
            status, body = await _get(env, path, cert=(cert, key))
            assert status == 403, (path, body)
            assert body == (
                f"Forbidden (user={proxier}, verb=get, resource=nodes, subresource(s)=[metrics])\n"
            ), path
        assert (await _get(env, "/pods", cert=(cert, key)))[0] == 200  # the binding itself works
    finally:
        undo()


async def test_stats_summary_gives_each_running_container_its_start_time(
    env: Env, server: KubeletServer
) -> None:
    admin = admin_cert(env, "stats-containers-admin")
    body = await _get_ok(env, "/stats/summary", cert=admin)
    pods = {(p["podRef"]["namespace"], p["podRef"]["name"]): p for p in json.loads(body)["pods"]}
    started = env.pods[0]["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
    assert pods[(env.ns, "app")]["containers"] == [{"name": "main", "startTime": started}]


async def test_runningpods_lists_only_the_pods_that_run_on_the_pool(env: Env, server: KubeletServer) -> None:
    """A pod held back (here: bound, never sent, so Pending with no container status) is on /pods, not on
    /runningpods: the kubelet lists what its runtime runs."""
    held = f"held-{uuid.uuid4().hex[:5]}"
    must(env.consumer, "POST", f"/api/v1/namespaces/{env.ns}/pods", _pod(held, env.node))
    admin = admin_cert(env, "runningpods-held-admin")
    try:
        for _ in range(100):  # until our pod cache has it
            if held in (await _get(env, "/pods", cert=admin))[1]:
                break
            await asyncio.sleep(0.1)
        names: dict[str, set[str]] = {}
        for path in ("/pods", "/runningpods/", "/runningpods"):
            body = await _get_ok(env, path, cert=admin)
            names[path] = {p["metadata"]["name"] for p in json.loads(body)["items"]}
        assert held in names["/pods"] and "app" in names["/pods"]
        assert held not in names["/runningpods/"] and "app" in names["/runningpods/"]
        assert names["/runningpods"] == names["/runningpods/"]
    finally:
        env.consumer.api("DELETE", f"/api/v1/namespaces/{env.ns}/pods/{held}", {"gracePeriodSeconds": 0})


POD_METRICS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    # *.k8s.io groups need this annotation; "unapproved" values are accepted (test only)
    "metadata": {"name": "pods.metrics.k8s.io",
                 "annotations": {"api-approved.kubernetes.io": "unapproved, test stand-in for metrics-server"}},
    "spec": {
        "group": "metrics.k8s.io",
        "scope": "Namespaced",
        "names": {"plural": "pods", "singular": "podmetrics", "kind": "PodMetrics", "listKind": "PodMetricsList"},
        "versions": [{"name": "v1beta1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object",
                                                     "x-kubernetes-preserve-unknown-fields": True}}}],
    },
}  # fmt: skip


@contextlib.contextmanager
def pool_metrics_api(pool: ControlPlane) -> Iterator[None]:
    """The pool serves ``metrics.k8s.io/v1beta1`` PodMetrics, from a real API server: the same group,
    version, paths and object shape as metrics-server's aggregated API, written by the test."""
    must(pool, "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", POD_METRICS_CRD)
    try:
        served = "/apis/metrics.k8s.io/v1beta1"
        wait_for(lambda: pool.api("GET", served)[0] == 200, 30, "metrics.k8s.io served")
        yield
    finally:
        pool.api("DELETE", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/pods.metrics.k8s.io")
        wait_for(lambda: pool.api("GET", "/apis/metrics.k8s.io/v1beta1")[0] == 404, 30, "metrics.k8s.io gone")


def _pod_metrics(name: str, at: str, cpu: str, memory: str, rv: str | None = None) -> Json:
    meta: Json = {"name": name}
    if rv is not None:
        meta["resourceVersion"] = rv
    return {"apiVersion": "metrics.k8s.io/v1beta1", "kind": "PodMetrics", "metadata": meta,
            "timestamp": at, "window": "30s",
            "containers": [{"name": "main", "usage": {"cpu": cpu, "memory": memory}}]}  # fmt: skip


async def test_resource_metrics_follow_the_pool_pod_metrics_as_a_counter_metrics_server_reads_back(
    env: Env, server: KubeletServer
) -> None:
    """metrics-server scrapes /metrics/resource and takes delta CPU counter over delta sample time: the
    pool's PodMetrics rates, mapped to the local namespace, integrate so that it reads the pool's rate."""
    admin = admin_cert(env, "resource-metrics-admin")
    path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{env.remote_ns}/pods"
    t1, t2 = "2026-12-01T12:00:00Z", "2026-12-01T12:00:15Z"
    with pool_metrics_api(env.pool):
        created = must(env.pool, "POST", path, _pod_metrics("app", t1, "250m", "64Mi"))
        body = await _get_ok(env, "/metrics/resource", cert=admin)
        first = _families(body)
        labels = {"container": "main", "namespace": env.ns, "pod": "app"}  # the local names
        (cpu1,) = [s for s in first["container_cpu_usage_seconds"].samples if s.labels == labels]
        assert cpu1.value == 7.5  # 0.25 cores over the 30 s window
        assert cpu1.timestamp == dt.datetime.fromisoformat(t1).timestamp()
        (mem,) = [s for s in first["container_memory_working_set_bytes"].samples if s.labels == labels]
        assert mem.value == 64 * 2**20
        assert [s.value for s in first["scrape_error"].samples] == [0.0]
        assert first["node_cpu_usage_seconds"].samples[0].value >= 7.5
        must(env.pool, "PUT", f"{path}/app",
                _pod_metrics("app", t2, "500m", "80Mi", created["metadata"]["resourceVersion"]))  # fmt: skip
        body = await _get_ok(env, "/metrics/resource", cert=admin)
        (cpu2,) = [s for s in _families(body)["container_cpu_usage_seconds"].samples if s.labels == labels]
        assert cpu2.timestamp is not None and cpu1.timestamp is not None
        assert (cpu2.value - cpu1.value) / (cpu2.timestamp - cpu1.timestamp) == 0.5  # the pool's latest rate
        body = await _get_ok(env, "/stats/summary", cert=admin)
        (app,) = [p for p in json.loads(body)["pods"] if p["podRef"] == {"name": "app", "namespace": env.ns,
                                                                           "uid": env.pods[0]["metadata"]["uid"]}]  # fmt: skip
        (main,) = app["containers"]
        assert main["cpu"] == {"time": t2, "usageNanoCores": 500_000_000,
                               "usageCoreNanoSeconds": 15_000_000_000}  # fmt: skip
        assert main["memory"]["workingSetBytes"] == 80 * 2**20
        started = env.pods[0]["status"]["containerStatuses"][0]["state"]["running"]["startedAt"]
        assert main["startTime"] == started
