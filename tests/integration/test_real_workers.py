"""Pods on a real kubelet (v1.36, containerd, runc): exec and logs meet the real thing.

Skipped, with the reason, on machines that cannot run real workers (no root, no containerd, no kubelet
binary; see e2e/workers.why_not). The first test talks to the pool directly; the second goes the user's
way: a consumer pod offloaded through vkbridge, the tunnel and the pool's Liqo-style RBAC (create but
not get on pods/exec, so vkbridge must use SPDY toward the pool).
"""

from __future__ import annotations

import os
import subprocess
import uuid
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.fixtures_workers import REAL_WORKER_TOLERATION, steer_pool_pods_to
from e2e.vkbridge_proc import VkbridgeProcess
from e2e.workers import RealWorkers, why_not
from tests.integration.helpers import get, must, pod_path, pool_pod, wait_until

_WHY_NOT = why_not()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]

EXEC_SCRIPT = "echo out; echo err >&2; read line; echo got $line; exit 3"


def kubectl(plane: ControlPlane, *args: str, input: str | None = None, websocket: bool = True,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """kubectl as admin; websocket=False forces SPDY (kubectl's own fallback switch)."""
    env = dict(os.environ, KUBECTL_REMOTE_COMMAND_WEBSOCKETS="true" if websocket else "false")
    argv = [str(plane.bin["kubectl"]), f"--kubeconfig={plane.admin_kubeconfig}", *args]
    return subprocess.run(argv, input=input, capture_output=True, text=True, env=env, timeout=timeout)


def running(plane: ControlPlane, ns: str, name: str) -> dict[str, Any] | None:
    pod = get(plane, pod_path(ns, name))
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return pod if statuses and "running" in (statuses[0].get("state") or {}) else None


def busybox_pod(name: str, command: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "tolerations": [REAL_WORKER_TOLERATION],
            "nodeSelector": {"vkbridge.e2e/real-worker": "true"},
            "automountServiceAccountToken": False,
            "terminationGracePeriodSeconds": 2,
            "containers": [
                {"name": "main", "image": "busybox:1.36", "imagePullPolicy": "Never",
                 "command": ["sh", "-c", command]}
            ],
        },
    }  # fmt: skip


def assert_exec_works(plane: ControlPlane, ns: str, name: str) -> None:
    """exec with stdin, stdout, stderr and the exit code, over WebSocket and over SPDY."""
    for websocket in (True, False):
        res = kubectl(plane, "exec", "-i", "-n", ns, name, "--", "sh", "-c", EXEC_SCRIPT,
                      input="hello\n", websocket=websocket)  # fmt: skip
        how = "WebSocket" if websocket else "SPDY"
        assert res.returncode == 3, f"exec over {how}: {res.returncode} {res.stderr}"
        assert res.stdout == "out\ngot hello\n", how
        assert "err" in res.stderr and "exit code 3" in res.stderr, how


def test_pod_on_a_real_pool_worker_runs_busybox_and_serves_logs_and_exec(
    pool: ControlPlane, real_pool_workers: RealWorkers, fresh_ns: Any
) -> None:
    node = real_pool_workers.nodes[0]
    ns = fresh_ns(pool)
    must(pool, "POST", pod_path(ns), busybox_pod("bb", "echo hello from a real kubelet; exec sleep 3600"))
    pod = wait_until(lambda: running(pool, ns, "bb"), 60, "the pod Running on the real worker", 0.25)
    assert pod["spec"]["nodeName"] == node.name
    assert pod["status"]["hostIP"] == node.ip
    assert pod["status"]["podIP"].startswith("198.19.")
    logs = kubectl(pool, "logs", "-n", ns, "bb")
    assert logs.returncode == 0 and logs.stdout == "hello from a real kubelet\n", logs.stderr
    assert_exec_works(pool, ns, "bb")


def test_offloaded_pod_on_a_real_worker_serves_exec_and_logs_on_the_consumer_through_spdy(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str], real_pool_worker: str,
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    name = f"real-{uuid.uuid4().hex[:6]}"
    pod = pool_pod(bundle.slug, name, command="echo hello through the tunnel; exec sleep 3600")
    pod["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    with steer_pool_pods_to(pool, real_pool_worker):
        must(consumer, "POST", pod_path(ns), pod)
        wait_until(lambda: running(pool, remote_ns, name), 60, "the remote pod Running", 0.25)
    remote = get(pool, pod_path(remote_ns, name))
    assert remote is not None and remote["spec"]["nodeName"] == real_pool_worker
    wait_until(lambda: running(consumer, ns, name), 30, "the local pod Running at home", 0.25)
    # vkbridge's kubelet API listens once the consumer's kube-controller-manager signed its certificate.
    logs = wait_until(lambda: (r := kubectl(consumer, "logs", "-n", ns, name)).returncode == 0 and r,
                      60, "kubectl logs on the consumer", 1.0)  # fmt: skip
    assert logs.stdout == "hello through the tunnel\n"
    assert_exec_works(consumer, ns, name)
    vkbridge.wait_for_log("the pool forbids WebSocket exec to this identity; using SPDY/3.1", 5)


def test_kubectl_logs_follow_on_the_consumer_streams_a_real_container_until_it_ends(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str], real_pool_worker: str,
) -> None:  # fmt: skip
    ns, remote_ns = offloaded_ns
    name = f"follow-{uuid.uuid4().hex[:6]}"
    pod = pool_pod(bundle.slug, name, command="echo one; sleep 3; echo two", restart="Never")
    pod["spec"]["containers"][0]["imagePullPolicy"] = "Never"
    with steer_pool_pods_to(pool, real_pool_worker):
        must(consumer, "POST", pod_path(ns), pod)
        wait_until(lambda: running(pool, remote_ns, name), 60, "the remote pod Running", 0.25)
    wait_until(lambda: running(consumer, ns, name), 30, "the local pod Running at home", 0.25)
    res = kubectl(consumer, "logs", "-f", "-n", ns, name, timeout=60)
    assert (res.returncode, res.stdout) == (0, "one\ntwo\n"), res.stderr
    wait_until(lambda: (get(consumer, pod_path(ns, name)) or {}).get("status", {}).get("phase") == "Succeeded",
               30, "the local pod Succeeded")  # fmt: skip
