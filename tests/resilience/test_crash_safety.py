"""Scenario 4: SIGKILL vkbridge at five random moments of a create/delete churn, restart it each time.

Nothing is persisted by vkbridge, so every restart rebuilds its view from the two API servers. Checked
afterwards: the state converges, no ShadowPod was ever created twice (a recording watch on the pool sees
every uid a name had), nothing on the pool outlives its local pod, and no local pod was failed, aborted or
deleted by anyone but the test. The seed is printed so a failing run can be replayed (VKB_RESILIENCE_SEED).
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time

from e2e.controlplane import ControlPlane
from tests.resilience.kit import (
    Background,
    Figures,
    OwnVkbridge,
    TinyPods,
    is_running,
    poll,
    wait_running_again,
)

KILLS = 5
CHURN_PERIOD_S = 0.4  # one create per period; the oldest pod is deleted once LIVE_MAX are alive
LIVE_MAX = 25


class Churn(Background):
    def __init__(self, pods: TinyPods) -> None:
        super().__init__("churn", join_timeout=30)
        self.pods = pods
        self.alive: list[str] = []
        self.deleted: list[str] = []
        self.errors: list[BaseException] = []

    def run(self) -> None:
        i = 0
        while not self._halt.is_set():
            try:
                name = f"c-{i:04d}"
                self.pods.create([name], workers=1)
                self.alive.append(name)
                if len(self.alive) > LIVE_MAX:
                    victim = self.alive.pop(0)
                    self.pods.delete([victim])
                    self.deleted.append(victim)
            except BaseException as err:  # surfaced by the test
                self.errors.append(err)
                return
            i += 1
            self._halt.wait(CHURN_PERIOD_S)


def test_sigkill_five_times_during_churn_converges_without_duplicates(
    consumer: ControlPlane, own_vkbridge: OwnVkbridge, pods: TinyPods, figures: Figures
) -> None:
    slug = pods.slug
    seed = int(os.environ.get("VKB_RESILIENCE_SEED", str(random.randrange(1 << 30))))
    rng = random.Random(seed)
    figures.add("seed", seed)
    vk = own_vkbridge("crash")
    wait_running_again(vk, consumer, slug, 0, 90)

    restarts: list[float] = []
    with (
        pods.record_shadows() as sp_rec,
        pods.record_local() as local_rec,
    ):
        churn = Churn(pods)
        churn.start()
        try:
            for _ in range(KILLS):
                time.sleep(rng.uniform(2.0, 8.0))
                vk.kill()
                mark = len(vk.log_text())
                vk.start()
                restarts.append(wait_running_again(vk, consumer, slug, mark, 90))
            time.sleep(3)
        finally:
            churn.stop()
        assert not churn.errors, churn.errors

        def state() -> dict[str, list[str]]:
            local, sps, rps = pods.local(), pods.shadows(), pods.remotes()
            return {
                "alive but not reflected and Running": [
                    n for n in churn.alive if n not in sps or not is_running(local.get(n))
                ],
                "deleted but still present": [n for n in churn.deleted if n in local or n in sps or n in rps],
                "orphans on the pool": sorted((set(sps) | set(rps)) - set(churn.alive)),
            }

        t0 = time.monotonic()
        t_converged = poll(lambda: not any(state().values()), 90, interval=0.5)
        last_state = state()
        sp_seen, local_seen = sp_rec.snapshot(), local_rec.snapshot()

    duplicates = {n: s.uids for n, s in sp_seen.items() if len(s.uids) > 1}
    deleted = set(churn.deleted)
    aborted = {
        n: (s.phases, sorted(s.reasons))
        for n, s in local_seen.items()
        if n not in deleted
        and (
            "Failed" in s.phases
            or s.deletion_requested
            or s.reasons & {"OffloadingAborted", "OffloadingBackOff"}
        )
    }
    log = vk.log_text()
    figures.add("kills (SIGKILL) and restarts", KILLS)
    figures.add("restart -> running and node Ready", " ".join(f"{r:.1f}" for r in restarts), "s")
    figures.add(
        "pods created / deleted by the churn", f"{len(churn.alive) + len(churn.deleted)} / {len(deleted)}"
    )
    figures.add(
        "converged after the churn stopped", t_converged if t_converged is not None else "never (90 s)", "s"
    )
    figures.add("ShadowPod names with more than one uid", len(duplicates))
    figures.add("local pods aborted, failed or deleted by us", len(aborted))
    figures.add(
        "'ShadowPod created' lines / distinct pods", f"{log.count('ShadowPod created')} / {len(sp_seen)}"
    )
    _ = t0

    assert t_converged is not None, f"not converged 90 s after the churn: {last_state}"
    assert not duplicates, f"ShadowPods created twice: {duplicates}"
    assert not aborted, f"pods aborted or deleted by us: {aborted}"


SIGTERM_EXIT_MAX_S = 5.0


def test_sigterm_at_any_moment_of_start_up_exits_within_seconds(
    own_vkbridge: OwnVkbridge, pods: TinyPods, figures: Figures
) -> None:
    """A rolling update or a crash loop stops vkbridge while it starts: SIGTERM must still be quick."""
    pods.create(f"p-{i}" for i in range(5))
    vk = own_vkbridge("sigterm")
    exits: list[tuple[str, float, int | None]] = []
    moments = [("at start", 0.5)] + [
        (f"running +{d:g} s", d) for d in (0.0, 0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0)
    ]
    for when, delay in moments:
        mark = len(vk.log_text())
        if not vk.alive():
            vk.start()
        if when == "at start":
            time.sleep(delay)
        else:
            vk.wait_for_log("vkbridge running", 60, start=mark)
            time.sleep(delay)
        assert vk.proc is not None
        t0 = time.monotonic()
        vk.proc.send_signal(signal.SIGTERM)
        try:
            code = vk.proc.wait(30)
        except subprocess.TimeoutExpired:
            code = None
            vk.proc.send_signal(signal.SIGUSR1)  # a debugging sitecustomize may dump the asyncio tasks
            time.sleep(1)
            vk.kill()
        exits.append((when, time.monotonic() - t0, code))
        figures.add(f"SIGTERM {when} (#{len(exits)}): exit after", f"{exits[-1][1]:.2f} s, code {code}")
    slow = [e for e in exits if e[2] is None or e[1] > SIGTERM_EXIT_MAX_S]
    assert not slow, f"SIGTERM not honoured within {SIGTERM_EXIT_MAX_S:.0f} s: {slow}\n{vk.tail(30)}"
