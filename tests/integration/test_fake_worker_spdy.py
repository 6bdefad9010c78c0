"""The fake kubelet speaks SPDY/3.1 for exec next to WebSocket, as a real kubelet does.

Without it, every test on a fake worker that reaches exec the Liqo way (the pool role grants create, not
get, on pods/exec, so vkbridge dials the pool over SPDY and kube-apiserver passes SPDY to the kubelet)
failed with "fake kubelet: SPDY/3.1 is not supported": a protocol gap a real pool does not have.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.controlplane import ControlPlane
from e2e.fakekubelet import FakeKubeletHandle
from e2e.fixtures_pool import POOL_NODES
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import get, must, pod_path, run_in_pty, wait_until
from tests.support.workloads import (
    WorkerPods,
    assert_exec_script_runs,
    first_container_running,
    kubectl,
    kubectl_argv,
)

pytestmark = pytest.mark.integration


def test_kubectl_exec_over_spdy_reaches_a_fake_kubelet_pod_through_the_pool_api_server(
    pool: ControlPlane, fake_nodes: FakeKubeletHandle, fresh_ns: Any
) -> None:
    ns = fresh_ns(pool)
    pod: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "sh"},
        "spec": {"nodeName": POOL_NODES[0], "terminationGracePeriodSeconds": 1,
                 "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "3600"]}]},
    }  # fmt: skip
    must(pool, "POST", pod_path(ns), pod)
    wait_until(lambda: first_container_running(pool, ns, "sh"), 30, "the pod running on the fake worker", 0.2)
    assert_exec_script_runs(pool, ns, "sh", websocket=False)
    # Stdin that ends before the command reads it (stdin stream FIN) and a large stdout (many DATA frames).
    big = kubectl(pool, "exec", "-i", "-n", ns, "sh", "--", "sh", "-c", "cat; head -c 300000 /dev/zero | tr '\\0' x",
                  input="", websocket=False)  # fmt: skip
    assert (big.returncode, big.stdout) == (0, "x" * 300000), big.stderr
    # A TTY (stdin, stdout and resize streams; no stderr): kubectl wants a terminal of its own.
    script = (
        "test -t 0 && echo stdin-is-a-tty; sleep 1; stty size; echo ready; read line; echo got $line; exit 5"
    )
    argv = kubectl_argv(pool, "exec", "-it", "-n", ns, "sh", "--", "sh", "-c", script)
    env = {"KUBECTL_REMOTE_COMMAND_WEBSOCKETS": "false"}
    code, out = run_in_pty(argv, b"typed\r", env=env)
    text = out.decode(errors="replace")
    assert code == 5 and "stdin-is-a-tty" in text and "got typed" in text, text
    assert "24 80" in text, f"the terminal size did not arrive over the resize stream: {text}"
    assert "SPDY/3.1" in fake_nodes.log_tail(400)


def test_offloaded_pod_on_a_fake_worker_serves_kubectl_exec_through_vkbridges_spdy_fallback(
    consumer: ControlPlane, pool: ControlPlane, vkbridge: VkbridgeProcess, fake_worker_pods: WorkerPods,
    fake_nodes: FakeKubeletHandle,
) -> None:  # fmt: skip
    ns, remote_ns, name = fake_worker_pods.run("spdy", "exec sleep 3600", restart="Always")
    remote = get(pool, pod_path(remote_ns, name))
    assert remote is not None and remote["spec"]["nodeName"] in POOL_NODES
    assert_exec_script_runs(consumer, ns, name)
    vkbridge.wait_for_log("the pool forbids WebSocket exec to this identity; using SPDY/3.1", 5)
