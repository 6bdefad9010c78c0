"""The testbed's real workers on the CONSUMER plane: a flag of the fixtures, not a second testbed.

What vkbridge as a real pod (its image on the consumer) will need, shown with busybox: a pod bound to
the real consumer worker runs, serves logs, and with hostNetwork reaches the consumer API server and the
pool tunnel on 127.0.0.1, where the local flow's servers listen.
"""

from __future__ import annotations

from typing import Any

import pytest

from e2e.controlplane import ControlPlane
from e2e.fixtures_workers import REAL_CONSUMER_NODE, REAL_WORKER_TOLERATION
from e2e.tunnel import TunnelProxy
from e2e.workers import RealWorkers, why_not
from tests.integration.helpers import get, must, pod_path, wait_until

_WHY_NOT = why_not()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]


def test_a_host_network_pod_on_the_real_consumer_worker_reaches_the_consumer_api_and_the_tunnel(
    consumer: ControlPlane, tunnel: TunnelProxy, real_consumer_workers: RealWorkers, fresh_ns: Any
) -> None:
    node = real_consumer_workers.nodes[0]
    assert node.name == REAL_CONSUMER_NODE
    ns = fresh_ns(consumer)
    # busybox nc has no -z: send a line, the TLS servers answer 400 and close (nc exits 0 once connected).
    reach = "printf 'x\\r\\n\\r\\n' | nc -w 3 127.0.0.1 {} >/dev/null"
    script = f"{reach.format(consumer.port)} && {reach.format(tunnel.port)} && echo both reachable"
    pod = {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
        "spec": {"nodeName": node.name, "hostNetwork": True, "restartPolicy": "Never",
                 "tolerations": [REAL_WORKER_TOLERATION], "automountServiceAccountToken": False,
                 "containers": [{"name": "main", "image": "busybox:1.36", "imagePullPolicy": "Never",
                                 "command": ["sh", "-c", script]}]},
    }  # fmt: skip
    must(consumer, "POST", pod_path(ns), pod)
    done = wait_until(
        lambda: (p := get(consumer, pod_path(ns, "probe"))) and p["status"].get("phase") in ("Succeeded", "Failed") and p,
        60, "the probe pod to finish on the real consumer worker", 0.25,
    )  # fmt: skip
    logs = consumer.kubectl("logs", "-n", ns, "probe", check=False)
    assert done["status"]["phase"] == "Succeeded", (done["status"], logs.stdout, logs.stderr)
    assert done["status"]["hostIP"] == node.ip
    assert logs.stdout == "both reachable\n"
