"""Scenario 2: a 300-pod burst through a slow tunnel (300 ms each way) that resets every connection after
20-40 s: every pod Running, no ShadowPod created twice, no status update lost.

The pods are tiny (1m CPU, 1Mi) and the grant's pod count is raised for the burst, so the grant never
holds a pod back: what is measured is the tunnel's effect alone.
"""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import wait_until
from tests.resilience.kit import (
    Figures,
    OwnVkbridge,
    TinyPods,
    granted_pods,
    is_running,
    log_lines_since,
    phase_of,
    poll,
    wait_running_again,
)

BURST = int(os.environ.get("VKB_RESILIENCE_BURST", "300"))
# Empty: the session's vkbridge (Liqo's default 1 s ping timeout). Set (e.g. "3s"): an own vkbridge with
# that --node-ping-timeout, to measure the rest of the scenario while the ping cannot cope with latency.
PING_TIMEOUT = os.environ.get("VKB_RESILIENCE_FLAKY_PING_TIMEOUT", "")
LATENCY_S = 0.3
CUT_EVERY_S = (20.0, 40.0)
RUN_TIMEOUT_S = 240.0


def mirrored(local: dict[str, Any], remote: dict[str, Any]) -> bool:
    """The local status says what the remote one says (phase, start, container states and readiness)."""
    ls, rs = local.get("status") or {}, remote.get("status") or {}
    if ls.get("phase") != rs.get("phase") or ls.get("startTime") != rs.get("startTime"):
        return False
    lc = {c["name"]: c for c in ls.get("containerStatuses") or []}
    rc = {c["name"]: c for c in rs.get("containerStatuses") or []}
    if set(lc) != set(rc):
        return False
    for name, r in rc.items():
        c = lc[name]
        if c.get("state") != r.get("state") or c.get("ready") != r.get("ready"):
            return False
        if int(c.get("restartCount") or 0) != int(r.get("restartCount") or 0):
            return False
    return True


@pytest.fixture
def reflector(request: pytest.FixtureRequest, consumer: ControlPlane, bundle: Bundle) -> VkbridgeProcess:
    if not PING_TIMEOUT:
        return request.getfixturevalue("vkbridge")  # type: ignore[no-any-return]
    own: OwnVkbridge = request.getfixturevalue("own_vkbridge")
    vk = own("flaky", ping_timeout=PING_TIMEOUT)
    wait_running_again(vk, consumer, bundle.slug, 0, 90)
    return vk


def test_burst_of_300_through_a_slow_resetting_tunnel(
    consumer: ControlPlane, bundle: Bundle, tunnel: TunnelProxy, reflector: VkbridgeProcess, pods: TinyPods,
    figures: Figures,
) -> None:  # fmt: skip
    vkbridge = reflector
    names = [f"b-{i:03d}" for i in range(BURST)]
    with (
        granted_pods(consumer, bundle, BURST + 200),
        pods.record_shadows() as sp_rec,
        pods.record_local() as local_rec,
    ):
        mark = len(vkbridge.log_text())
        tunnel.set_latency(LATENCY_S)
        tunnel.cut_every(*CUT_EVERY_S)
        resets0 = tunnel.resets_total
        t0 = time.monotonic()
        try:
            pods.create(names, workers=8)
            t_created = time.monotonic() - t0

            def not_running() -> list[str]:
                local = pods.local()
                return [n for n in names if not is_running(local.get(n))]

            t_running = poll(lambda: not not_running(), RUN_TIMEOUT_S, interval=1.0)
            resets = tunnel.resets_total - resets0

            def all_mirrored() -> bool:
                local, rp = pods.local(), pods.remotes()
                return all(n in rp and mirrored(local[n], rp[n]) for n in names)

            t_mirror = poll(all_mirrored, 30 if t_running is not None else 1, interval=1.0)
            sps, rps, local = pods.shadows(), pods.remotes(), pods.local()
        finally:
            tunnel.set_latency(0)
            tunnel.cut_every(None)
        lines = log_lines_since(vkbridge, mark)

        stuck = not_running()
        created_lines = [ln for ln in lines if "ShadowPod created" in ln]
        retries = [ln for ln in lines if " retry " in ln]
        dup_uids = {n: s.uids for n, s in sp_rec.snapshot().items() if len(s.uids) > 1}
        aborted = [n for n, s in local_rec.snapshot().items() if "Failed" in s.phases or s.deletion_requested]
        lost = [n for n in names if n in rps and n in local and not mirrored(local[n], rps[n])]

        figures.add("pods", BURST)
        figures.add("ping timeout", PING_TIMEOUT or f"{vkbridge.opts.ping_timeout} (session vkbridge)")
        figures.add("tunnel", f"{LATENCY_S * 1000:.0f} ms each way, every connection reset after "
                    f"{CUT_EVERY_S[0]:.0f}-{CUT_EVERY_S[1]:.0f} s")  # fmt: skip
        figures.add("create calls done (consumer)", t_created, "s")
        figures.add("all Running at home after the first create",
                    t_running + t_created if t_running is not None else f"never ({RUN_TIMEOUT_S:.0f} s)", "s")  # fmt: skip
        figures.add("all statuses mirrored after that", t_mirror if t_mirror is not None else "no", "s")
        figures.add("connections reset by the tunnel during the burst", resets)
        figures.add("pool reachability transitions logged", sum("pool unreachable" in ln for ln in lines))
        figures.add("ShadowPods / 'ShadowPod created' lines (the rest adopted after a lost response)",
                    f"{len(sps)} / {len(created_lines)}")  # fmt: skip
        figures.add("work-queue retries logged", len(retries))
        figures.add("ShadowPods with more than one uid (duplicates)", len(dup_uids))
        figures.add("local pods aborted or deleted", len(aborted))
        figures.add("local statuses not matching the remote (lost updates)", len(lost))
        figures.add("pods never Running", len(stuck))
        for name in stuck[:5]:
            about = [ln for ln in lines if f"/{name} " in ln + " "]
            figures.add(f"  {name}", f"phase {phase_of(local.get(name))}, ShadowPod {'yes' if name in sps else 'no'}, "
                        f"{len(about)} log lines")  # fmt: skip

        assert not stuck, f"{len(stuck)} pods never Running, e.g. {stuck[:5]}"
        assert set(sps) == set(names), (
            f"ShadowPods missing {set(names) - set(sps)} extra {set(sps) - set(names)}"
        )
        assert set(rps) == set(names), "one remote pod per ShadowPod"
        assert not dup_uids, f"ShadowPods created twice: {dup_uids}"
        assert not aborted, f"pods aborted or deleted: {aborted}"
        assert not lost, f"status updates lost for {lost[:10]}"

        t1 = time.monotonic()
        pods.delete(names)
        wait_until(lambda: not pods.local() and not pods.shadows(), 180,
                   "the burst to be deleted everywhere", interval=1.0)  # fmt: skip
        figures.add("burst deleted everywhere (normal tunnel)", time.monotonic() - t1, "s")
