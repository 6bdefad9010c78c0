"""Consumer pods run the user's way on the pool's workers: offloaded through vkbridge, driven with kubectl.

One home for what the exec, logs, attach, port-forward and metrics tests on real and fake workers share:
kubectl as admin, "the container runs", an offloaded namespace for module fixtures, and a pod runner over
tests/integration's ``offload`` (fixtures ``fake_worker_pods`` and ``real_worker_pods``; a pytest plugin
registered in tests/conftest.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import subprocess
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

import pytest

from e2e.controlplane import ControlPlane
from e2e.fixtures_pool import offload_namespace
from e2e.fixtures_workers import steer_pool_pods_to
from tests.integration.helpers import get, must, pod_path, wait_until
from tests.support.offload import Offload

# stdin, stdout, stderr and the exit code in one exec (assert_exec_script_runs).
EXEC_SCRIPT = "echo out; echo err >&2; read line; echo got $line; exit 3"


def kubectl_argv(plane: ControlPlane, *args: str) -> list[str]:
    return [str(plane.bin["kubectl"]), f"--kubeconfig={plane.admin_kubeconfig}", *args]


def kubectl(plane: ControlPlane, *args: str, input: str | None = None, websocket: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """kubectl as admin, never raising; websocket=False forces SPDY (kubectl's own fallback switch)."""
    env = dict(os.environ, KUBECTL_REMOTE_COMMAND_WEBSOCKETS="true" if websocket else "false")
    return subprocess.run(kubectl_argv(plane, *args), input=input, capture_output=True, text=True, env=env,
                          timeout=timeout)  # fmt: skip


def kubectl_ok(plane: ControlPlane, *args: str) -> bool:
    return kubectl(plane, *args).returncode == 0


def assert_exec_script_runs(plane: ControlPlane, ns: str, name: str, *, websocket: bool = True) -> None:
    """kubectl exec -i of EXEC_SCRIPT: stdin reaches it, its stdout, stderr and exit code come back."""
    res = kubectl(plane, "exec", "-i", "-n", ns, name, "--", "sh", "-c", EXEC_SCRIPT, input="hello\n",
                  websocket=websocket)  # fmt: skip
    how = "exec over WebSocket" if websocket else "exec over SPDY"
    assert res.returncode == 3, f"{how}: {res.returncode} {res.stderr}"
    assert res.stdout == "out\ngot hello\n", how
    assert "err" in res.stderr and "exit code 3" in res.stderr, f"{how}: {res.stderr}"


def first_container_running(plane: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    """The pod once its first container runs (phase Running comes before the container may have)."""
    pod = get(plane, pod_path(ns, name))
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return pod if statuses and "running" in (statuses[0].get("state") or {}) else None


@contextlib.contextmanager
def offloaded_namespace(consumer: ControlPlane, pool: ControlPlane, prefix: str) -> Iterator[tuple[str, str]]:
    """A consumer namespace of its own, offloaded; (local, remote). For module-scoped fixtures, which
    cannot use the function-scoped ``offloaded_ns``; the namespace is deleted on exit."""
    ns = f"{prefix}-{uuid.uuid4().hex[:7]}"
    must(consumer, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        wait_until(lambda: get(consumer, f"/api/v1/namespaces/{ns}/serviceaccounts/default"), 30, "the SA")
        yield ns, offload_namespace(consumer, pool, ns)
    finally:
        consumer.api("DELETE", f"/api/v1/namespaces/{ns}")


class OffloadedPod(NamedTuple):
    ns: str
    remote_ns: str
    name: str


@dataclasses.dataclass(frozen=True)
class WorkerPods:
    """Runs busybox pods in an offloaded namespace until kubectl reaches them; with ``worker``, steered to
    that pool node (a real kubelet, whose locally made images must never be pulled)."""

    offload: Offload
    worker: str | None = None

    def run(self, prefix: str, command: str, *, restart: str = "Never", **container: Any) -> OffloadedPod:
        """Create the pod (``container``: fields for its container); return once it runs on the pool and at
        home and kubectl logs answers (vkbridge's kubelet API listens once the consumer signed its cert)."""
        o = self.offload
        pod = OffloadedPod(o.ns, o.remote_ns, f"{prefix}-{uuid.uuid4().hex[:6]}")
        manifest = o.pod(pod.name, command=command, restart=restart)
        if self.worker:
            container = {"imagePullPolicy": "Never", **container}
        manifest["spec"]["containers"][0].update(container)
        with steer_pool_pods_to(o.pool, self.worker) if self.worker else contextlib.nullcontext():
            o.post(manifest)
            wait_until(lambda: first_container_running(o.pool, o.remote_ns, pod.name), 60,
                       "the remote pod running", 0.25)  # fmt: skip
        wait_until(lambda: first_container_running(o.consumer, o.ns, pod.name), 30,
                   "the local pod running at home", 0.25)  # fmt: skip
        wait_until(lambda: kubectl_ok(o.consumer, "logs", "-n", o.ns, pod.name), 60,
                   "kubectl logs on the consumer", 1.0)  # fmt: skip
        return pod


@pytest.fixture
def fake_worker_pods(offload: Offload) -> WorkerPods:
    """Runs pods of a fresh offloaded namespace on the pool's fake workers."""
    return WorkerPods(offload)


@pytest.fixture
def real_worker_pods(offload: Offload, real_pool_worker: str) -> WorkerPods:
    """Runs pods of a fresh offloaded namespace on the pool's real worker."""
    return WorkerPods(offload, real_pool_worker)
