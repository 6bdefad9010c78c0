"""Scenario 8: a long outage (6 hours in the issue) leaves the process bounded.

Scaled, not waited: vkbridge runs with a 250 ms ping interval (40x the 10 s default) so the one loop
that a flag can speed up runs as often in STEADY_S as in 40 x STEADY_S at the default; the pool caches'
reconnect backoff is capped at 30 s by construction, so a 2-minute window already runs them at their
cap. Local pods keep coming and going during the outage. What is measured over the steady window
(after the node went NotReady; black-holed for the first 40%, refused for the rest, as a tunnel
whose far end is down answers): RSS (growth once the allocator settled after the switch, and its
slope extrapolated to 6 hours, for information), open fds and threads, log lines per minute (split
into lines about the pods we churn and background lines; the background rate is what scales to 6
hours), and connection attempts through the tunnel per minute. Then the pool wakes and every pod must
be re-synced within 10 s, as after a short outage.
"""

from __future__ import annotations

import os
import time

from e2e.controlplane import ControlPlane
from e2e.tunnel import TunnelProxy
from tests.fixtures_vkbridge import node_ready
from tests.integration.helpers import wait_until
from tests.resilience.kit import (
    Figures,
    MiB,
    OwnVkbridge,
    Sampler,
    TinyPods,
    about_other_namespace,
    is_running,
    log_lines_since,
    log_time,
    poll,
    slope,
    wait_running_again,
)

STEADY_S = float(os.environ.get("VKB_RESILIENCE_LONG_OUTAGE_S", "120"))
PING_INTERVAL = "250ms"
SPEEDUP = 10.0 / 0.25  # default ping interval / ours
PINGS_PER_MIN = 60 / 0.25
REFUSE_FROM = 0.4  # fraction of the steady window after which the tunnel refuses instead of hanging
SETTLE_S = 20.0  # after the switch to refusing, the allocator takes a step up: judge growth after it
TAIL_RSS_GROWTH_MAX = 1.5 * MiB
HOURS = 6.0
RESYNC_TARGET_S = 10.0


def test_long_outage_stays_bounded_and_resyncs(
    consumer: ControlPlane, tunnel: TunnelProxy, own_vkbridge: OwnVkbridge, pods: TinyPods, figures: Figures
) -> None:
    ns, slug = pods.ns, pods.slug
    vk = own_vkbridge(
        "long-outage", ping_interval=PING_INTERVAL, ping_timeout="1s", env={"PYTHONFAULTHANDLER": "1"}
    )
    wait_running_again(vk, consumer, slug, 0, 90)
    base = [f"base-{i}" for i in range(5)]
    pods.run(base)

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
        refused_at: float | None = None
        refused_wall = 0.0
        while time.monotonic() - t_steady < STEADY_S:
            if refused_at is None and time.monotonic() - t_steady >= STEADY_S * REFUSE_FROM:
                tunnel.refuse()  # second half: the tunnel's far end refuses at once (no hang)
                refused_at = time.monotonic()
                refused_wall = time.time()
            pods.create([f"during-{i}"], bound=True)
            alive.append(f"during-{i}")
            if i % 2 == 1:
                victim = alive.pop(0)
                pods.delete([victim])
                gone.append(victim)
            i += 1
            time.sleep(6)
        steady_s = time.monotonic() - t_steady
        end_wall = time.time()
        conns = tunnel.connections_total - conns0
        lines = log_lines_since(vk, mark)
    finally:
        tunnel.restore()
    t_wake = time.monotonic()

    def resynced() -> bool:
        local, sps = pods.local(), pods.shadows()
        return all(n in sps and is_running(local.get(n)) for n in alive + base) and all(
            n not in sps and n not in local for n in gone
        )

    t_resync = poll(resynced, 90)
    rows = sampler.stop()
    steady = [r for r in rows if steady_from <= r["t"] <= t_wake - sampler.t0]
    per_hour = 3600.0
    assert refused_at is not None
    tail = [r for r in steady if r["t"] >= refused_at - sampler.t0 + SETTLE_S]
    rss_slope = slope(tail, "rss")
    fds_slope, thr_slope = (slope(steady, k) for k in ("fds", "threads"))
    minutes = steady_s / 60
    figures.add("steady outage window (after NotReady)", steady_s, "s")
    figures.add("equivalent at the default 10 s ping interval", steady_s * SPEEDUP / 60, "min")
    figures.add("pods created / deleted during the outage", f"{len(alive) + len(gone)} / {len(gone)}")
    figures.mib("RSS first steady sample", steady[0]["rss"])
    figures.mib("RSS last steady sample", steady[-1]["rss"])
    figures.add(
        f"RSS growth over the last {tail[-1]['t'] - tail[0]['t']:.0f} s",
        (tail[-1]["rss"] - tail[0]["rss"]) / MiB,
        "MiB",
    )
    figures.add(f"RSS slope there, extrapolated over {HOURS:.0f} h (noisy: a short window)",
                rss_slope * per_hour * HOURS / MiB, "MiB")  # fmt: skip
    figures.add(
        "fds first/last/slope",
        f"{steady[0]['fds']:.0f}/{steady[-1]['fds']:.0f}/{fds_slope * per_hour:.1f} per h",
    )
    figures.add(
        "threads first/last/slope",
        f"{steady[0]['threads']:.0f}/{steady[-1]['threads']:.0f}/{thr_slope * per_hour:.1f} per h",
    )
    others = [ln for ln in lines if about_other_namespace(ln, ns)]
    per_pod = [ln for ln in lines if " pod=" in ln and ln not in others]
    background = [ln for ln in lines if " pod=" not in ln and ln not in others]
    figures.add("log lines per minute (steady)", f"{len(lines) / minutes:.1f} ({len(per_pod) / minutes:.1f} "
                f"about the pods we churn, {len(background) / minutes:.1f} background, "
                f"{len(others)} lines about earlier tests' namespaces)")  # fmt: skip
    settled = refused_wall + SETTLE_S
    recurring = [ln for ln in background if (log_time(ln) or 0.0) >= settled]
    recurring_per_min = len(recurring) / max(1e-6, (end_wall - settled) / 60)
    figures.add("background lines per minute once settled", recurring_per_min)
    figures.add(f"background lines extrapolated over {HOURS:.0f} h", recurring_per_min * 60 * HOURS)
    figures.add("tunnel connection attempts per minute", conns / minutes)
    figures.add("  of which pings at most", PINGS_PER_MIN)
    figures.add("all pods re-synced after wake", t_resync if t_resync is not None else "never (90 s)", "s")
    figures.add("outage total", t_wake - t_cut, "s")
    print(
        "   samples (t s: RSS MiB/fds):",
        " ".join(f"{r['t']:.0f}:{r['rss'] / MiB:.1f}/{r['fds']:.0f}" for r in rows),
    )
    for line in lines[:30]:
        print("   steady-outage log:", line[:220])

    died = [r for r in steady if r["rss"] == 0]
    assert not died, f"vkbridge died {died[0]['t']:.0f} s into the sampling:\n{vk.tail(15)}"
    assert len(background) / minutes <= 3, "more than a few background log lines a minute during the outage"
    assert recurring_per_min <= 1, "background lines keep coming during the outage"
    assert len(per_pod) <= len(alive) + 2 * len(gone), "more than a line or two per pod event"
    assert steady[-1]["fds"] - steady[0]["fds"] <= 5, "file descriptors grow during the outage"
    assert steady[-1]["threads"] - steady[0]["threads"] <= 2, "threads grow during the outage"
    assert tail[-1]["rss"] - tail[0]["rss"] <= TAIL_RSS_GROWTH_MAX, "RSS keeps growing during the outage"
    assert conns / minutes <= PINGS_PER_MIN + 30, (
        "connection attempts exceed the pings plus capped reconnects"
    )
    assert t_resync is not None and t_resync <= RESYNC_TARGET_S, (
        f"re-sync after a long outage took {t_resync}s (target {RESYNC_TARGET_S:.0f}s)"
    )
