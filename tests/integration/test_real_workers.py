"""Pods on a real kubelet (v1.36, containerd, runc): exec and logs meet the real thing.

Skipped, with the reason, on machines that cannot run real workers (no root, no containerd, no kubelet
binary; see e2e/workers.why_not). The first test talks to the pool directly; the second goes the user's
way: a consumer pod offloaded through vkbridge, the tunnel and the pool's Liqo-style RBAC (create but
not get on pods/exec, so vkbridge must use SPDY toward the pool).
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.controlplane import ControlPlane
from e2e.fixtures_workers import REAL_WORKER_TOLERATION
from e2e.vkbridge_proc import VkbridgeProcess
from e2e.workers import RealWorkers, why_not
from tests.integration.helpers import get, must, pod_path, wait_until
from tests.support.workloads import WorkerPods, assert_exec_script_runs, first_container_running, kubectl

_WHY_NOT = why_not()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]


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
        assert_exec_script_runs(plane, ns, name, websocket=websocket)


def test_pod_on_a_real_pool_worker_runs_busybox_and_serves_logs_and_exec(
    pool: ControlPlane, real_pool_workers: RealWorkers, fresh_ns: Any
) -> None:
    node = real_pool_workers.nodes[0]
    ns = fresh_ns(pool)
    must(pool, "POST", pod_path(ns), busybox_pod("bb", "echo hello from a real kubelet; exec sleep 3600"))
    pod = wait_until(lambda: first_container_running(pool, ns, "bb"), 60, "the pod Running on the real worker",
                     0.25)  # fmt: skip
    assert pod["spec"]["nodeName"] == node.name
    assert pod["status"]["hostIP"] == node.ip
    assert pod["status"]["podIP"].startswith("198.19.")
    logs = kubectl(pool, "logs", "-n", ns, "bb")
    assert logs.returncode == 0 and logs.stdout == "hello from a real kubelet\n", logs.stderr
    assert_exec_works(pool, ns, "bb")


def test_offloaded_pod_on_a_real_worker_serves_exec_and_logs_on_the_consumer_through_spdy(
    consumer: ControlPlane, pool: ControlPlane, vkbridge: VkbridgeProcess, real_worker_pods: WorkerPods
) -> None:
    ns, remote_ns, name = real_worker_pods.run(
        "real", "echo hello through the tunnel; exec sleep 3600", restart="Always"
    )
    remote = get(pool, pod_path(remote_ns, name))
    assert remote is not None and remote["spec"]["nodeName"] == real_worker_pods.worker
    logs = kubectl(consumer, "logs", "-n", ns, name)
    assert (logs.returncode, logs.stdout) == (0, "hello through the tunnel\n"), logs.stderr
    assert_exec_works(consumer, ns, name)
    vkbridge.wait_for_log("the pool forbids WebSocket exec to this identity; using SPDY/3.1", 5)


def test_kubectl_logs_follow_on_the_consumer_streams_a_real_container_until_it_ends(
    consumer: ControlPlane, real_worker_pods: WorkerPods
) -> None:
    ns, _, name = real_worker_pods.run("follow", "echo one; sleep 3; echo two")
    res = kubectl(consumer, "logs", "-f", "-n", ns, name, timeout=60)
    assert (res.returncode, res.stdout) == (0, "one\ntwo\n"), res.stderr
    wait_until(lambda: (get(consumer, pod_path(ns, name)) or {}).get("status", {}).get("phase") == "Succeeded",
               30, "the local pod Succeeded")  # fmt: skip
