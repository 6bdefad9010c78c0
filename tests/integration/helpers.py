"""Small synchronous helpers for integration tests over ControlPlane.api (raw JSON)."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import http.server
import os
import pty
import select
import signal
import ssl
import struct
import subprocess
import termios
import threading
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from e2e.bundle import Bundle, create_bundle, delete_bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle, launch_emulator
from e2e.emulator.certs import parse_duration
from e2e.emulator.grant import b64
from e2e.pki import CertAuthority, write_pem
from e2e.waiting import wait_until as wait_until  # re-exported: tests import it from here

SHADOWPODS = "/apis/offloading.liqo.io/v1beta1"


def get(plane: ControlPlane, path: str) -> dict[str, Any] | None:
    status, body = plane.api("GET", path)
    if status == 404:
        return None
    assert status == 200, f"GET {path}: {status} {body}"
    return body  # type: ignore[no-any-return]


def must(plane: ControlPlane, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
    status, out = plane.api(method, path, body, **kw)
    assert 200 <= status < 300, f"{method} {path}: {status} {out}"
    return out  # type: ignore[no-any-return]


def pod_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def shadow_path(ns: str, name: str = "") -> str:
    return f"{SHADOWPODS}/namespaces/{ns}/shadowpods" + (f"/{name}" if name else "")


def pool_pod(slug: str, name: str | None = None, *, command: str = "echo hello from the pool; sleep 3600",
             restart: str = "Always", cpu: str = "100m", memory: str = "64Mi", labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, node_name: str | None = None,
             extra_spec: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """A pod that opts in to the pool the GUIDE §4 way (toleration + nodeSelector)."""
    spec: dict[str, Any] = {
        "tolerations": [
            {"key": "multicloud.io/pool", "operator": "Equal", "value": slug, "effect": "NoSchedule"}
        ],
        "nodeSelector": {"multicloud.io/pool": slug},
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 2,
        "containers": [
            {
                "name": "hello",
                "image": "busybox:1.36",
                "command": ["sh", "-c", command],
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    spec.update(extra_spec or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or f"p-{uuid.uuid4().hex[:8]}",
            "labels": labels or {"app": "burst"},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def phase(plane: ControlPlane, ns: str, name: str) -> str | None:
    pod = get(plane, pod_path(ns, name))
    return None if pod is None else (pod.get("status") or {}).get("phase")


def events_for(plane: ControlPlane, ns: str, name: str) -> list[dict[str, Any]]:
    body = must(plane, "GET", f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name={name}")
    return list(body.get("items") or [])


def processes_with(marker: str) -> list[int]:
    """Pids whose command line contains marker (the fake pool kubelets run containers as local processes)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker.encode() in cmdline:
                found.append(int(entry))
    return found


@contextlib.asynccontextmanager
async def fresh_peering(
    consumer: ControlPlane, pool: ControlPlane, pool_url: str, pool_ca_files: tuple[Path, Path], workdir: Path,
    lifetime: str, controllers: str | None, **emulator: Any,
) -> AsyncIterator[tuple[Bundle, EmulatorHandle | None]]:  # fmt: skip
    """A peering of its own (new slug and consumer ID) with certificates of ``lifetime`` reaching the pool at
    ``pool_url``, and an emulator running ``controllers`` (none: no emulator); both removed afterwards."""
    slug, cid = f"c{uuid.uuid4().hex[:12]}", f"c-{uuid.uuid4().hex[:8]}"
    b = await asyncio.to_thread(create_bundle, consumer, pool, slug=slug, consumer_id=cid, pool_server_url=pool_url,
                                cert_lifetime=parse_duration(lifetime))  # fmt: skip
    emu: EmulatorHandle | None = None
    try:
        if controllers:
            emu = await asyncio.to_thread(
                launch_emulator, consumer_kubeconfig=consumer.admin_kubeconfig,
                pool_kubeconfig=pool.admin_kubeconfig, consumer_id=cid, slug=slug,
                pool_ca_cert=pool_ca_files[0], pool_ca_key=pool_ca_files[1], workdir=workdir / f"emulator-{slug}",
                api_server_url=pool_url, cert_lifetime=lifetime, controllers=controllers, **emulator,
            )  # fmt: skip
        yield b, emu
    finally:
        if emu is not None:
            await asyncio.to_thread(emu.stop)
        await asyncio.to_thread(delete_bundle, consumer, pool, b)


DEFAULT = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}


def rs_path(bundle: Bundle) -> str:
    return f"/apis/authentication.liqo.io/v1beta1/namespaces/{bundle.tenant_ns}/resourceslices/{bundle.slug}"


def set_grant(consumer: ControlPlane, bundle: Bundle, resources: dict[str, str]) -> None:
    """Ask the pool for `resources` (spec) and wait until it granted them and our node shows them."""
    must(consumer, "PATCH", rs_path(bundle), {"spec": {"resources": resources}},
         content_type="application/merge-patch+json")  # fmt: skip

    def granted() -> bool:
        st = ((get(consumer, rs_path(bundle)) or {}).get("status") or {}).get("resources") or {}
        node = get(consumer, f"/api/v1/nodes/{bundle.slug}") or {}
        cap = (node.get("status") or {}).get("capacity") or {}
        return all(st.get(k) == v and cap.get(k) == v for k, v in resources.items())

    wait_until(granted, 30, f"the grant {resources} on the ResourceSlice and the node")


def node_pods_active(consumer: ControlPlane, node: str) -> list[str]:
    body = must(consumer, "GET", f"/api/v1/pods?fieldSelector=spec.nodeName={node}")
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in body["items"]
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]


class RecordingServer:
    """An HTTPS server on 127.0.0.1 that records the Authorization header of every request.

    It stands for "whatever server a hostile kubeconfig names": a test asserts that no credential of
    ours (a token read from a local file) ever reaches it. Runs in a thread, so sync and async tests can
    use it; ``ca_pem`` is what a kubeconfig must trust to reach it.
    """

    def __init__(self, workdir: Path) -> None:
        ca = CertAuthority.create("recorder-ca")
        issued = ca.issue("127.0.0.1", server=True, ips=["127.0.0.1"])
        assert issued.key_pem is not None
        write_pem(workdir / "recorder.crt", issued.cert_pem, 0o644)
        write_pem(workdir / "recorder.key", issued.key_pem)
        self.ca_pem = ca.cert_pem
        self.seen: list[str] = []
        seen = self.seen

        class Handler(http.server.BaseHTTPRequestHandler):
            def _any(self) -> None:
                seen.append(self.headers.get("Authorization") or "")
                body = b'{"kind":"Status","status":"Failure","code":401}'
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _any

            def log_message(self, format: str, *args: Any) -> None:
                pass

        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(workdir / "recorder.crt", workdir / "recorder.key")
        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self._httpd.server_address[1]}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    def __enter__(self) -> RecordingServer:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(5)


def token_file_kubeconfig(server: str, ca_pem: bytes, token_file: Path) -> dict[str, Any]:
    """A kubeconfig whose user names a local token file (what a pool kubeconfig Secret must not do)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "evil",
        "clusters": [
            {"name": "evil", "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}
        ],
        "users": [{"name": "evil", "user": {"tokenFile": str(token_file)}}],
        "contexts": [{"name": "evil", "context": {"cluster": "evil", "user": "evil"}}],
    }


def run_in_pty(argv: list[str], send: bytes, timeout: float = 30, env: dict[str, str] | None = None, *,
               rows: int = 24, cols: int = 80, expect: bytes = b"ready") -> tuple[int, bytes]:  # fmt: skip
    """Run argv on a rows x cols pseudo-terminal (kubectl -t wants one); writes send once expect shows."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
    proc = subprocess.Popen(argv, stdin=slave, stdout=slave, stderr=slave, start_new_session=True,
                            env={**os.environ, **(env or {})})  # fmt: skip
    os.close(slave)
    out = bytearray()
    deadline = time.monotonic() + timeout
    sent = False
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.2)
            if ready:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break  # EIO: the child closed its side
                if not chunk:
                    break
                out += chunk
            if not sent and expect in out:
                os.write(master, send)
                sent = True
            if proc.poll() is not None and not ready:
                break
        return proc.wait(timeout=5), bytes(out)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)  # its own session: kubectl and whatever it started
            proc.wait()
        os.close(master)
