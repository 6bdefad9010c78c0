"""Scenario 1: the pool hibernates (tunnel black-holed) for minutes while local pods come and go, then wakes.

Scaled: the issue's "several minutes" is OUTAGE_S (2 minutes) with the planes' 20 s node-monitor grace.
Pods created during the outage are bound to the node directly (spec.nodeName), as the scheduler's pods
of a moment before would be: the NotReady node's NoSchedule taint keeps the scheduler away meanwhile.
"""

from __future__ import annotations

import os
import time

from e2e.controlplane import ControlPlane
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeProcess
from tests.fixtures_vkbridge import node_ready
from tests.integration.helpers import must, pod_path, wait_until
from tests.resilience.kit import (
    Figures,
    MiB,
    Sampler,
    TinyPods,
    about_other_namespace,
    is_running,
    log_lines_since,
    poll,
    uid,
)

OUTAGE_S = float(os.environ.get("VKB_RESILIENCE_OUTAGE_S", "120"))
GRACE_S = 20.0  # the planes' --node-monitor-grace-period
RESYNC_TARGET_S = 10.0  # DESIGN §5: all pods re-synced after the pool returns
LOG_LINES_PER_MIN_MAX = 4.0  # background lines (not about a pod we act on): "a few a minute"
RSS_GROWTH_MAX = 8 * MiB


def test_hibernate_then_wake_resyncs_every_pod_within_10s(
    consumer: ControlPlane, tunnel: TunnelProxy, vkbridge: VkbridgeProcess, pods: TinyPods, figures: Figures
) -> None:
    ns, slug = pods.ns, pods.slug
    keep = [f"keep-{i}" for i in range(4)]
    doomed = [f"doomed-{i}" for i in range(3)]  # deleted while the pool sleeps
    pods.run(keep + doomed)
    before = pods.shadows()
    assert set(before) == set(keep + doomed)

    born: list[str] = []  # created during the outage, alive at wake
    flash: list[str] = []  # created and deleted during the outage
    with pods.record_local() as rec:
        sampler = Sampler(vkbridge, every=5.0)
        sampler.start()
        t0 = time.monotonic()
        tunnel.blackhole()
        try:
            wait_until(lambda: node_ready(consumer, slug) not in ("True", None), GRACE_S + 30,
                       "the node to go NotReady", interval=0.5)  # fmt: skip
            notready_after = time.monotonic() - t0
            steady_mark = len(vkbridge.log_text())
            steady_t0 = time.monotonic()
            rss_steady0 = vkbridge.rss_bytes()
            i = 0
            while time.monotonic() - t0 < OUTAGE_S - 10:
                pods.create([f"born-{i}", f"flash-{i}"], bound=True)
                born.append(f"born-{i}")
                flash.append(f"flash-{i}")
                if i < len(doomed):
                    pods.delete([doomed[i]])
                time.sleep(5)
                pods.delete([f"flash-{i}"])
                i += 1
                time.sleep(10)
            for name in doomed[i:]:
                pods.delete([name])
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - t0)))
            steady_lines = log_lines_since(vkbridge, steady_mark)
            steady_minutes = (time.monotonic() - steady_t0) / 60
            rss_steady1 = vkbridge.rss_bytes()
            during = pods.local()
        finally:
            tunnel.restore()
        t_wake = time.monotonic()
        wake_mark = len(vkbridge.log_text())

        t_ready = poll(lambda: node_ready(consumer, slug) == "True", 60)

        def state() -> dict[str, list[str]]:
            local, sps = pods.local(), pods.shadows()
            return {
                "born not reflected": [n for n in born if n not in sps or not is_running(local.get(n))],
                "deleted still present": [n for n in doomed + flash if n in sps or n in local],
                "kept pods disturbed": [
                    n for n in keep if uid(sps.get(n)) != uid(before[n]) or not is_running(local.get(n))
                ],
            }

        t_resynced = poll(lambda: not any(state().values()), 60)
        rows = sampler.stop()
        outage_len = t_wake - t0

    figures.add("outage (black-holed tunnel)", outage_len, "s")
    figures.add("node NotReady after", notready_after, "s")
    figures.add(
        "pods created / deleted during the outage", f"{len(born) + len(flash)} / {len(flash) + len(doomed)}"
    )
    figures.add("node Ready after wake", t_ready if t_ready is not None else "never (60 s)", "s")
    figures.add(
        "all pods re-synced after wake", t_resynced if t_resynced is not None else "never (60 s)", "s"
    )
    others = [ln for ln in steady_lines if about_other_namespace(ln, ns)]
    ours = [ln for ln in steady_lines if not about_other_namespace(ln, ns)]
    per_pod = [ln for ln in ours if " pod=" in ln]
    background = [ln for ln in ours if " pod=" not in ln]
    pod_events = len(flash) + len(doomed)  # each may take one line when vkbridge removes or deletes it
    figures.add("log lines during steady outage", f"{len(steady_lines)} in {steady_minutes:.1f} min "
                f"({len(background) / steady_minutes:.1f}/min background, {len(per_pod)} about "
                f"{pod_events} pods we deleted, {len(others)} about earlier tests' namespaces)")  # fmt: skip

    figures.mib("RSS at NotReady", rss_steady0)
    figures.mib("RSS at wake", rss_steady1)
    figures.mib("RSS max during the scenario", max(r["rss"] for r in rows))
    figures.add(
        "fds min/max during the scenario",
        f"{min(r['fds'] for r in rows):.0f}/{max(r['fds'] for r in rows):.0f}",
    )
    figures.add("log lines in the 10 s after wake", len(log_lines_since(vkbridge, wake_mark)))
    for line in steady_lines[:20]:
        print("   steady-outage log:", line[:200])

    # Invariant 1: an outage never deletes or fails a local pod.
    touched = set(doomed) | set(flash)
    seen = rec.snapshot()
    deleted_by_us = [n for n, s in seen.items() if n not in touched and (s.deletion_requested or s.deleted)]
    failed = [n for n, s in seen.items() if n not in touched and "Failed" in s.phases]
    assert not deleted_by_us, f"pods deleted during the outage that nobody deleted: {deleted_by_us}"
    assert not failed, f"pods failed during the outage: {failed}"
    assert all(n in during and not during[n]["metadata"].get("deletionTimestamp") for n in keep + born)
    assert "reflection-touch" not in vkbridge.log_text()[steady_mark:]

    assert t_ready is not None, "the node did not come back Ready within 60 s of the wake"
    assert t_resynced is not None, f"not re-synced 60 s after the wake: {state()}"
    assert t_resynced <= RESYNC_TARGET_S, f"re-sync took {t_resynced:.1f}s (target {RESYNC_TARGET_S:.0f}s)"
    assert len(background) / steady_minutes <= LOG_LINES_PER_MIN_MAX, "\n".join(background[:40])
    assert len(per_pod) <= pod_events, "more than one line per pod deleted during the outage:\n" + "\n".join(
        per_pod
    )
    assert rss_steady1 - rss_steady0 <= RSS_GROWTH_MAX, "memory grew during the outage"
    must(consumer, "GET", pod_path(ns))  # the consumer API is fine throughout
