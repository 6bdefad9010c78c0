"""Scenario 8: a long outage (6 hours in the issue) leaves the process bounded.

Scaled, not waited: vkbridge runs with a 250 ms ping interval (40x the 10 s default) so the one loop
that a flag can speed up runs as often in STEADY_S as in 40 x STEADY_S at the default; the pool caches'
reconnect backoff is capped at 30 s by construction, so a 2-minute window already runs them at their
cap. Local pods keep coming and going during the outage. What is measured over the steady window
(after the node went NotReady): RSS, open fds and threads (least-squares slope, extrapolated to
6 hours), log lines per minute, and connection attempts through the tunnel per minute. Then the pool
wakes and every pod must be re-synced within 10 s, as after a short outage.
"""

from __future__ import annotations

import os
import time

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.tunnel import TunnelProxy
from tests.fixtures_vkbridge import node_ready
from tests.integration.helpers import wait_until
from tests.resilience.kit import (
    Figures,
    MiB,
    OwnVkbridge,
    Sampler,
    create_pods,
    delete_pods,
    is_running,
    local_pods,
    log_lines_since,
    poll,
    shadowpods,
    slope,
    tiny_pod,
    wait_all_running,
    wait_running_again,
)

STEADY_S = float(os.environ.get("VKB_RESILIENCE_LONG_OUTAGE_S", "120"))
PING_INTERVAL = "250ms"
SPEEDUP = 10.0 / 0.25  # default ping interval / ours
HOURS = 6.0
RESYNC_TARGET_S = 10.0


def test_long_outage_stays_bounded_and_resyncs(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, tunnel: TunnelProxy,
    own_vkbridge: OwnVkbridge, offloaded_ns: tuple[str, str], figures: Figures,
) -> None:  # fmt: skip
    ns, remote = offloaded_ns
    slug = bundle.slug
    vk = own_vkbridge("long-outage", ping_interval=PING_INTERVAL, ping_timeout="1s")
    wait_running_again(vk, consumer, slug, 0, 90)
    base = [f"base-{i}" for i in range(5)]
    create_pods(consumer, ns, [tiny_pod(slug, n) for n in base])
    wait_all_running(consumer, ns, base, 60)

    sampler = Sampler(vk, every=5.0)
    sampler.start()
    tunnel.blackhole()
    t_cut = time.monotonic()
    alive: list[str] = []
    gone: list[str] = []
    try:
        wait_until(lambda: node_ready(consumer, slug) not in ("True", None), 60, "the node to go NotReady",
                   interval=0.5)  # fmt: skip
        steady_from = time.monotonic() - sampler.t0
        mark = len(vk.log_text())
        conns0 = tunnel.connections_total
        t_steady = time.monotonic()
        i = 0
        while time.monotonic() - t_steady < STEADY_S:
            create_pods(consumer, ns, [tiny_pod(slug, f"during-{i}", node_name=slug)])
            alive.append(f"during-{i}")
            if i % 2 == 1:
                victim = alive.pop(0)
                delete_pods(consumer, ns, [victim])
                gone.append(victim)
            i += 1
            time.sleep(6)
        steady_s = time.monotonic() - t_steady
        conns = tunnel.connections_total - conns0
        lines = log_lines_since(vk, mark)
    finally:
        tunnel.restore()
    t_wake = time.monotonic()

    def resynced() -> bool:
        local, sps = local_pods(consumer, ns), shadowpods(pool, remote)
        return all(n in sps and is_running(local.get(n)) for n in alive + base) and all(
            n not in sps and n not in local for n in gone
        )

    t_resync = poll(resynced, 90)
    rows = sampler.stop()
    steady = [r for r in rows if steady_from <= r["t"] <= t_wake - sampler.t0]
    per_hour = 3600.0
    rss_slope, fds_slope, thr_slope = (slope(steady, k) for k in ("rss", "fds", "threads"))
    minutes = steady_s / 60
    figures.add("steady outage window (after NotReady)", steady_s, "s")
    figures.add("equivalent at the default 10 s ping interval", steady_s * SPEEDUP / 60, "min")
    figures.add("pods created / deleted during the outage", f"{len(alive) + len(gone)} / {len(gone)}")
    figures.mib("RSS first steady sample", steady[0]["rss"])
    figures.mib("RSS last steady sample", steady[-1]["rss"])
    figures.add("RSS slope", rss_slope * per_hour / MiB, "MiB/h")
    figures.add(f"RSS extrapolated over {HOURS:.0f} h", rss_slope * per_hour * HOURS / MiB, "MiB")
    figures.add(
        "fds first/last/slope",
        f"{steady[0]['fds']:.0f}/{steady[-1]['fds']:.0f}/{fds_slope * per_hour:.1f} per h",
    )
    figures.add(
        "threads first/last/slope",
        f"{steady[0]['threads']:.0f}/{steady[-1]['threads']:.0f}/{thr_slope * per_hour:.1f} per h",
    )
    figures.add("log lines per minute (steady)", len(lines) / minutes)
    figures.add(f"log lines extrapolated over {HOURS:.0f} h", len(lines) / minutes * 60 * HOURS)
    figures.add("tunnel connection attempts per minute", conns / minutes)
    figures.add("all pods re-synced after wake", t_resync if t_resync is not None else "never (90 s)", "s")
    figures.add("outage total", t_wake - t_cut, "s")
    for line in lines[:30]:
        print("   steady-outage log:", line[:220])

    assert len(lines) / minutes <= 6, "more than a few log lines a minute during the outage"
    assert steady[-1]["fds"] - steady[0]["fds"] <= 5, "file descriptors grow during the outage"
    assert steady[-1]["threads"] - steady[0]["threads"] <= 2, "threads grow during the outage"
    assert rss_slope * per_hour * HOURS <= 64 * MiB, "RSS would grow by more than 64 MiB over 6 hours"
    assert conns / minutes <= 120, "connection attempts to the pool are not bounded by the ping and backoff"
    assert t_resync is not None and t_resync <= RESYNC_TARGET_S, (
        f"re-sync after a long outage took {t_resync}s (target {RESYNC_TARGET_S:.0f}s)"
    )
