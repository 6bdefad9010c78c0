"""A consumer API that does not answer at start is waited for (issue 36 point 2).

Before, one failed ``GET /version`` at start was an 84-line traceback and exit 1 (CrashLoopBackOff in a
real cluster). Here the consumer API is reached through a tunnel that refuses every connection for the
first seconds, as during a control-plane upgrade: vkbridge keeps running, says so in WARNING lines (never a
traceback), and its node becomes Ready once the API answers. Its health endpoints, served without
--metrics-enabled (issue 36 point 3), say the same: alive throughout, ready once the API answered.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from e2e.controlplane import free_port
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeProcess
from tests.fixtures_vkbridge import node_ready, vkbridge_options
from tests.integration.helpers import wait_until
from tests.support.offload import Offload

pytestmark = pytest.mark.integration
DOWN_SECONDS = 8.0


def probe(port: int, path: str) -> tuple[int | None, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=3) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError as err:
        return None, str(err)


def test_a_consumer_api_down_at_start_is_retried_then_the_node_is_ready(
    offload: Offload, tmp_path: Path
) -> None:
    consumer, bundle = offload.consumer, offload.bundle
    target = urlsplit(consumer.url)
    tunnel = TunnelProxy(target.hostname or "127.0.0.1", int(target.port or 443))
    tunnel.start()
    node = f"{bundle.slug}-late"
    proc: VkbridgeProcess | None = None
    try:
        tunnel.refuse()
        doc = yaml.safe_load(Path(consumer.admin_kubeconfig).read_text())
        doc["clusters"][0]["cluster"]["server"] = tunnel.url
        kubeconfig = tmp_path / "consumer-through-tunnel"
        kubeconfig.write_text(yaml.safe_dump(doc))
        opts = vkbridge_options(consumer, bundle, nodename=node, env={"VIRTUALNODE_NAME": bundle.slug})
        opts.home_kubeconfig = kubeconfig
        health = free_port()
        opts.extra_args += ["--metrics-enabled=false", f"--health-probe-bind-address=127.0.0.1:{health}"]
        proc = VkbridgeProcess(opts, tmp_path / "vkbridge-late.log").start()
        time.sleep(DOWN_SECONDS)
        assert proc.alive(), proc.tail(40)
        assert probe(health, "/livez") == (200, "ok"), proc.tail(20)
        status, body = probe(health, "/readyz?verbose")
        assert status == 503 and "[-]consumer-api failed: not connected" in body, (status, body)
        assert probe(health, "/metrics")[0] == 404  # metrics stay off; the probes do not
        assert probe(opts.metrics_port, "/livez")[0] is None
        log = proc.log_text()
        assert "consumer API not answering at start; retrying" in log, proc.tail(40)
        tunnel.restore()
        wait_until(
            lambda: node_ready(consumer, node) == "True", 60, f"node {node} Ready once the API answers"
        )
        wait_until(lambda: probe(health, "/readyz")[0] == 200, 30, "ready once the API answered")
        assert probe(health, "/leaderz")[0] == 200
        log = proc.log_text()
        assert "Traceback" not in log
        assert "consumer API answering" in log
        assert "health endpoints listening" in log
    finally:
        if proc is not None:
            proc.stop()
        tunnel.stop()
        consumer.api("DELETE", f"/api/v1/nodes/{node}")
        consumer.api("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}")
