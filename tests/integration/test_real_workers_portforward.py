"""kubectl port-forward and attach on the consumer, to an offloaded pod on a real pool kubelet.

The user's way: kubectl -> consumer kube-apiserver -> vkbridge's kubelet API (SPDY) -> the tunnel ->
the pool's ``pods/portforward``/``pods/attach`` -> the real kubelet and runc. Skipped, with the reason,
where real workers cannot run (e2e/workers.why_not).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import fcntl
import hashlib
import os
import pty
import re
import select
import signal
import socket
import ssl
import struct
import subprocess
import termios
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from e2e.controlplane import ControlPlane
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeProcess
from e2e.workers import why_not
from tests.integration.helpers import get, pod_path, wait_until
from tests.support.workloads import WorkerPods, kubectl_argv

_WHY_NOT = why_not()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]

# Two httpd on two ports (different pages, one big file), and a slow stream on 9000 for the cut.
SERVERS = (
    "mkdir -p /a /b && echo page-a > /a/index.html && echo page-b > /b/index.html"
    " && dd if=/dev/urandom of=/a/big bs=1024 count=2048 2>/dev/null && md5sum /a/big > /a/big.md5"
    " && printf '#!/bin/sh\\nwhile true; do echo tick; sleep 0.05; done\\n' > /slow && chmod +x /slow"
    " && printf '#!/bin/sh\\nexec cat\\n' > /echo && chmod +x /echo"
    " && (while true; do nc -l -p 9001 -e /echo; done &)"
    " && httpd -p 8080 -h /a && httpd -p 8081 -h /b"
    " && while true; do nc -l -p 9000 -e /slow; done"
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Forward:
    """``kubectl port-forward`` in the background; ``local[remote_port]`` is where to connect."""

    def __init__(self, plane: ControlPlane, ns: str, name: str, ports: list[int]) -> None:
        self.local = {p: free_port() for p in ports}
        spec = [f"{lp}:{rp}" for rp, lp in self.local.items()]
        self.proc = subprocess.Popen(
            kubectl_argv(plane, "port-forward", "-n", ns, f"pod/{name}", *spec),
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        assert self.proc.stdout is not None
        seen: list[str] = []
        deadline = time.monotonic() + 60
        while len([s for s in seen if s.startswith("Forwarding from 127.0.0.1")]) < len(ports):
            assert time.monotonic() < deadline, f"port-forward did not start: {seen}"
            line = self.proc.stdout.readline()
            if not line:
                _, err = self.proc.communicate(timeout=10)
                raise AssertionError(f"port-forward exited {self.proc.returncode}: {err}")
            seen.append(line)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.communicate(timeout=10)


@pytest.fixture
def forward() -> Iterator[list[Forward]]:
    started: list[Forward] = []
    yield started
    for f in started:
        f.close()


def http_get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as resp:
        return bytes(resp.read())


def wait_forwardable(port: int) -> None:
    """The first connection may race the kubelet's view of the pod: retry it a little."""
    wait_until(lambda: _try(port), 30, "a first HTTP answer through port-forward", 1.0)


def _try(port: int) -> bool:
    try:
        return http_get(port, "/") == b"page-a\n"
    except OSError:
        return False


def test_kubectl_port_forward_on_the_consumer_carries_http_on_two_ports_with_concurrent_connections(
    consumer: ControlPlane, vkbridge: VkbridgeProcess, real_worker_pods: WorkerPods, forward: list[Forward]
) -> None:
    ns, _, name = real_worker_pods.run("pf", SERVERS)
    fwd = Forward(consumer, ns, name, [8080, 8081, 9001])
    forward.append(fwd)
    a, b = fwd.local[8080], fwd.local[8081]
    wait_forwardable(a)
    md5 = http_get(a, "/big.md5").split()[0].decode()
    jobs = [(a, "/"), (b, "/"), (a, "/big"), (b, "/"), (a, "/big"), (a, "/"), (b, "/"), (a, "/big")] * 2
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(jobs)) as pool_exec:
        results = list(pool_exec.map(lambda j: http_get(*j), jobs))
    for (port, path), body in zip(jobs, results, strict=True):
        if path == "/big":
            assert len(body) == 2048 * 1024 and hashlib.md5(body).hexdigest() == md5
        else:
            assert body == (b"page-a\n" if port == a else b"page-b\n")
    # Half-close: an echo answers while we write; our FIN then reaches the runtime, which ends the
    # connection (containerd closes both ways a second after one direction ended): EOF, no hang.
    with socket.create_connection(("127.0.0.1", fwd.local[9001]), timeout=30) as sock:
        sock.sendall(b"x" * 100_000 + b"\n")
        answer = b""
        while len(answer) < 100_001:
            chunk = sock.recv(65536)
            assert chunk, f"the echo ended early after {len(answer)} bytes"
            answer += chunk
        started = time.monotonic()
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
        assert time.monotonic() - started < 10
    assert answer == b"x" * 100_000 + b"\n"
    assert fwd.proc.poll() is None, "port-forward must still run after its connections closed"
    vkbridge.wait_for_log("port-forward", 1)


def test_kubectl_port_forward_ends_cleanly_when_the_tunnel_is_cut_mid_transfer(
    consumer: ControlPlane, vkbridge: VkbridgeProcess, real_worker_pods: WorkerPods, tunnel: TunnelProxy,
    forward: list[Forward],
) -> None:  # fmt: skip
    ns, _, name = real_worker_pods.run("pfcut", SERVERS)
    fwd = Forward(consumer, ns, name, [8080, 9000])
    forward.append(fwd)
    wait_forwardable(fwd.local[8080])
    with socket.create_connection(("127.0.0.1", fwd.local[9000]), timeout=30) as sock:
        got = b""
        while got.count(b"tick") < 5:
            chunk = sock.recv(4096)
            assert chunk, f"the stream ended early: {got!r}"
            got += chunk
        tunnel.reset_all()  # mid-transfer: the pool side of the session is gone
        sock.settimeout(30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if not sock.recv(65536):
                    break
            except ConnectionError:
                break
        else:
            raise AssertionError("the local connection stayed open after the tunnel cut")
    rc = fwd.proc.wait(timeout=30)
    _, err = fwd.proc.communicate(timeout=10)
    assert rc != 0, err
    assert "vkbridge lost its connection to the pool" in err, err  # our error stream, shown by kubectl
    vkbridge.wait_for_log("pool connection lost", 10)


def test_kubectl_attach_without_tty_on_the_consumer_carries_stdin_and_stdout(
    consumer: ControlPlane, real_worker_pods: WorkerPods
) -> None:
    script = 'while read line; do echo got $line; [ "$line" = bye ] && exit 0; done'
    ns, _, name = real_worker_pods.run("att", script, stdin=True)
    proc = subprocess.Popen(
        kubectl_argv(consumer, "attach", "-i", "-n", ns, name, "-c", "hello"),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    try:
        out = Reader(proc.stdout.fileno())
        for _ in range(10):  # the first line may be typed before the attach is in place
            proc.stdin.write(b"hello\n")
            proc.stdin.flush()
            if out.until(rb"got hello\n", 3):
                break
        else:
            raise AssertionError(f"never saw the container's answer: {out.text!r}")
        proc.stdin.write(b"bye\n")
        proc.stdin.flush()
        # Keep stdin open until the answer: containerd ends an attach (stdinOnce false) on stdin EOF.
        assert out.until(rb"got bye\n", 10), out.text
        assert proc.wait(timeout=30) == 0, proc.stderr.read() if proc.stderr else ""  # the container exited
    finally:
        if proc.poll() is None:
            proc.kill()
        with contextlib.suppress(OSError, ValueError):
            proc.communicate(timeout=10)


def test_kubectl_attach_with_tty_on_the_consumer_sees_the_terminal_size_and_its_resize(
    consumer: ControlPlane, real_worker_pods: WorkerPods
) -> None:
    ns, _, name = real_worker_pods.run("tty", "exec sh", stdin=True, tty=True)
    master, slave = pty.openpty()
    set_size(slave, 33, 101)
    proc = subprocess.Popen(
        kubectl_argv(consumer, "attach", "-it", "-n", ns, name, "-c", "hello"),
        stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
    )  # fmt: skip
    os.close(slave)
    try:
        out = Reader(master)
        write_until(master, out, b"stty size\r", rb"33 101")
        set_size(master, 40, 120)
        os.kill(proc.pid, signal.SIGWINCH)
        write_until(master, out, b"stty size\r", rb"40 120")
        os.write(master, b"exit\r")
        assert proc.wait(timeout=30) == 0, out.text
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        os.close(master)


def set_size(fd: int, rows: int, cols: int) -> None:
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))


class Reader:
    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.text = b""

    def until(self, pattern: bytes, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.text):
                return True
            ready, _, _ = select.select([self.fd], [], [], 0.2)
            if ready:
                try:
                    self.text += os.read(self.fd, 4096)
                except OSError:
                    return bool(re.search(pattern, self.text))
        return False


def write_until(fd: int, out: Reader, line: bytes, pattern: bytes) -> None:
    """Type ``line`` until ``pattern`` shows (the first keystrokes may precede the attach)."""
    for _ in range(10):
        out.text = b""
        os.write(fd, line)
        if out.until(pattern, 3):
            return
    raise AssertionError(f"never saw {pattern!r}: {out.text!r}")


def test_websocket_port_forward_straight_to_the_kubelet_api_uses_the_v4_channel_framing(
    consumer: ControlPlane, real_worker_pods: WorkerPods, tmp_path: Path
) -> None:
    """A client speaking WebSocket to the kubelet API (``?port=``): channel 0 data, 1 error."""
    ns, _, name = real_worker_pods.run("pfws", SERVERS)
    node = get(consumer, f"/api/v1/nodes/{get(consumer, pod_path(ns, name))['spec']['nodeName']}")
    assert node is not None
    address = node["status"]["addresses"][0]["address"]
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    cert, key = consumer.issue_client_cert("pf-ws-admin", ["system:masters"])
    assert key is not None
    pem = tmp_path / "client.pem"
    pem.write_bytes(cert + key)
    ctx = ssl.create_default_context(cadata=consumer.ca_pem.decode())
    ctx.load_cert_chain(pem)
    url = f"https://{address}:{port}/portForward/{ns}/{name}?port=8080&port=8081"

    async def session() -> dict[int, bytes]:
        got: dict[int, bytes] = {}
        async with aiohttp.ClientSession() as http, http.ws_connect(url, ssl=ctx,
                                                                     protocols=("v4.channel.k8s.io",)) as ws:  # fmt: skip
            assert ws.protocol == "v4.channel.k8s.io"
            await ws.send_bytes(b"\x00GET / HTTP/1.0\r\n\r\n")
            await ws.send_bytes(b"\x02GET / HTTP/1.0\r\n\r\n")
            async with asyncio.timeout(30):
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        got[msg.data[0]] = got.get(msg.data[0], b"") + msg.data[1:]
        return got

    got = asyncio.run(session())
    # The kubelet's prefix (the port, little-endian) first on each channel, then the pod's bytes.
    assert got[1][:2] == got[0][:2] == struct.pack("<H", 8080)
    assert got[3][:2] == got[2][:2] == struct.pack("<H", 8081)
    assert got[0][2:].startswith(b"HTTP/1.") and got[0].endswith(b"page-a\n"), got[0]
    assert got[2].endswith(b"page-b\n"), got[2]
    assert got[1] == got[1][:2] and got[3] == got[3][:2], "no errors"
