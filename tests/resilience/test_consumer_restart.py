"""Scenario 6: the consumer's kube-apiserver process restarts; vkbridge recovers without anyone's help.

The session's vkbridge keeps running (same pid) through a restart shorter than its leader-election renew
deadline; after a longer one it may step down (exit 1, "lost leadership", as client-go does), and the test
then restarts it as the kubelet would. Afterwards the node Lease is renewed again, a pod created after the
restart runs, a pod deleted after it is removed on both sides, and pods that ran before are untouched.
"""

from __future__ import annotations

import datetime as dt
import time

from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from tests.fixtures_vkbridge import node_ready
from tests.integration.helpers import get, wait_until
from tests.resilience.kit import (
    Figures,
    TinyPods,
    is_running,
    log_lines_since,
    poll,
    uid,
)

RECOVERY_MAX_S = 30.0
RENEW_DEADLINE_S = 10.0  # --vk-lease-renew-interval default


def lease_renewed_after(consumer: ControlPlane, slug: str, since: dt.datetime) -> bool:
    lease = get(consumer, f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{slug}")
    renew = ((lease or {}).get("spec") or {}).get("renewTime")
    if not renew:
        return False
    return dt.datetime.strptime(renew[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC) > since


def test_consumer_apiserver_restart_recovers_without_manual_action(
    consumer: ControlPlane, vkbridge: VkbridgeProcess, pods: TinyPods, figures: Figures
) -> None:
    slug = pods.slug
    before = [f"pre-{i}" for i in range(4)]
    pods.run(before)
    pre_shadows = pods.shadows()
    pid = vkbridge.pid
    mark = len(vkbridge.log_text())

    t0 = time.monotonic()
    consumer.restart_apiserver()
    back = dt.datetime.now(dt.UTC).replace(microsecond=0)
    restart_s = time.monotonic() - t0
    t1 = time.monotonic()

    # With leader election on (the default) vkbridge steps down when it cannot renew its Lease for
    # --vk-lease-renew-interval (10 s), as client-go does, and Kubernetes restarts it: emulate that restart.
    poll(lambda: lease_renewed_after(consumer, slug, back) or not vkbridge.alive(), 60)
    stepped_down: int | None = None
    if not vkbridge.alive():
        stepped_down = vkbridge.stop()
        restart_mark = len(vkbridge.log_text())
        vkbridge.start()
        vkbridge.wait_for_log("vkbridge running", 60, start=restart_mark)
    t_lease = poll(lambda: lease_renewed_after(consumer, slug, back), 60)
    after = [f"post-{i}" for i in range(3)]
    pods.create(after)
    t_new = poll(lambda: all(is_running(pods.local().get(n)) for n in after), 60)
    t_new_total = time.monotonic() - t1
    t_del0 = time.monotonic()
    pods.delete([before[0]])
    t_deleted = poll(lambda: before[0] not in pods.local() and before[0] not in pods.shadows(), 60)
    _ = t_del0
    lines = log_lines_since(vkbridge, mark)
    warnings = [ln for ln in lines if " WARNING " in ln or " ERROR " in ln]

    figures.add("kube-apiserver restart (stop to ready)", restart_s, "s")
    figures.add("vkbridge", "rode through (same pid)" if stepped_down is None
                else f"stepped down (exit {stepped_down}); restarted as the kubelet would")  # fmt: skip
    figures.add(
        "node Lease renewed after the restart", t_lease if t_lease is not None else "never (60 s)", "s"
    )
    figures.add(
        "new pods Running after the restart", t_new_total if t_new is not None else "never (60 s)", "s"
    )
    figures.add("pod deleted on both sides", t_deleted if t_deleted is not None else "never (60 s)", "s")
    figures.add("vkbridge log lines / warnings+errors since the restart", f"{len(lines)} / {len(warnings)}")
    for ln in warnings[:15]:
        print("   warning:", ln[:220])

    if stepped_down is None:
        assert vkbridge.pid == pid
    else:
        assert restart_s >= RENEW_DEADLINE_S - 1, (
            f"stepped down (exit {stepped_down}) after a {restart_s:.1f}s outage"
        )
        assert "lost leadership" in vkbridge.log_text()[mark:], "a step-down must say why"
    assert vkbridge.alive()
    assert t_lease is not None and t_lease <= RECOVERY_MAX_S, (
        "the node Lease was not renewed after the restart"
    )
    assert t_new is not None, "pods created after the restart did not run"
    assert t_deleted is not None, "a pod deleted after the restart was not removed"
    assert node_ready(consumer, slug) == "True"
    shadows = pods.shadows()
    assert all(uid(shadows.get(n)) == uid(pre_shadows[n]) for n in before[1:]), (
        "pods from before were disturbed"
    )
    wait_until(lambda: all(is_running(pods.local().get(n)) for n in before[1:]), 30, "old pods Running")
