"""Scenario 1b: a short loss of the tunnel after which the old connections stay dead.

A tunnel that restarts (or a NAT that forgets its table) leaves every open connection hung, not reset: no
RST, no FIN, just silence. vkbridge's requests and watches on those connections, and the idle kept-alive
ones, would otherwise wait out their timeouts (60 s for a request, the cache's inactivity timeout for a
watch) after the pool is back. When the pinger declares the pool lost, vkbridge ends them all
(`KubeClient.abandon_inflight`), so the pods of the outage are reflected within seconds of its end.
"""

from __future__ import annotations

import time

from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import wait_until
from tests.resilience.kit import (
    Figures,
    TinyPods,
    is_running,
    log_lines_since,
    poll,
)

RESYNC_TARGET_S = 10.0  # DESIGN §5: all pods re-synced after the pool returns


def test_short_loss_with_dead_connections_resyncs_within_10s(
    tunnel: TunnelProxy, vkbridge: VkbridgeProcess, pods: TinyPods, figures: Figures
) -> None:
    keep = [f"keep-{i}" for i in range(3)]
    doomed = ["doomed-0"]
    pods.run(keep + doomed)

    mark = len(vkbridge.log_text())
    t0 = time.monotonic()
    tunnel.blackhole()
    try:
        wait_until(lambda: "pool unreachable" in vkbridge.log_text()[mark:], 60, "vkbridge to declare the pool lost",
                   interval=0.2)  # fmt: skip
        lost_after = time.monotonic() - t0
        born = [f"born-{i}" for i in range(5)]
        pods.create(born, bound=True)
        pods.delete(doomed)
        time.sleep(3)
    finally:
        tunnel.restore(reset_blackholed=False)  # the connections of before stay hung for ever
    t_back = time.monotonic()
    outage_lines = log_lines_since(vkbridge, mark)
    back_mark = len(vkbridge.log_text())

    def pending() -> dict[str, list[str]]:
        local, sps = pods.local(), pods.shadows()
        return {
            "born not reflected": [n for n in born if n not in sps or not is_running(local.get(n))],
            "deleted still present": [n for n in doomed if n in sps or n in local],
            "kept pods disturbed": [n for n in keep if n not in sps or not is_running(local.get(n))],
        }

    resynced = poll(lambda: not any(pending().values()), 90)
    figures.add("pool declared lost after", lost_after, "s")
    figures.add("outage (black-holed, old connections never reset)", t_back - t0, "s")
    figures.add("all pods re-synced after the tunnel forwards again",
                resynced if resynced is not None else "never (90 s)", "s")  # fmt: skip
    ended = [ln for ln in outage_lines if "ended requests and watches" in ln]
    figures.add("abandon log line", ended[0][:160] if ended else "none")

    for line in log_lines_since(vkbridge, back_mark)[:40]:
        print("   after the tunnel is back:", line[:220])

    assert ended, "vkbridge did not end the requests and watches stuck on the lost pool"
    assert resynced is not None and resynced <= RESYNC_TARGET_S, (
        f"re-sync took {resynced} s (target {RESYNC_TARGET_S} s): {pending()}"
    )
