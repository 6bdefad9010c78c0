"""A consumer API that does not answer at start is waited for (issue 36 point 2).

Before, one failed ``GET /version`` at start was an 84-line traceback and exit 1 (CrashLoopBackOff in a
real cluster). Here the consumer API is reached through a tunnel that refuses every connection for the
first seconds, as during a control-plane upgrade: vkbridge keeps running, says so in WARNING lines (never a
traceback), and its node becomes Ready once the API answers.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeProcess
from tests.fixtures_vkbridge import node_ready, vkbridge_options
from tests.integration.helpers import wait_until
from tests.support.offload import Offload

pytestmark = pytest.mark.integration
DOWN_SECONDS = 8.0


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
        proc = VkbridgeProcess(opts, tmp_path / "vkbridge-late.log").start()
        time.sleep(DOWN_SECONDS)
        assert proc.alive(), proc.tail(40)
        log = proc.log_text()
        assert "consumer API not answering at start; retrying" in log, proc.tail(40)
        tunnel.restore()
        wait_until(
            lambda: node_ready(consumer, node) == "True", 60, f"node {node} Ready once the API answers"
        )
        log = proc.log_text()
        assert "Traceback" not in log
        assert "consumer API answering" in log
    finally:
        if proc is not None:
            proc.stop()
        tunnel.stop()
        consumer.api("DELETE", f"/api/v1/nodes/{node}")
        consumer.api("DELETE", f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{node}")
