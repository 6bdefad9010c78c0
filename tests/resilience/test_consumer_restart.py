"""Scenario 6: the consumer's kube-apiserver process restarts; vkbridge recovers without anyone's help.

The session's vkbridge keeps running (same pid) through the restart. Afterwards the node Lease is renewed
again, a pod created after the restart runs, a pod deleted after it is removed on both sides, and pods
that ran before are untouched.
"""

from __future__ import annotations

import datetime as dt
import time

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from tests.fixtures_vkbridge import node_ready
from tests.integration.helpers import get, wait_until
from tests.resilience.kit import (
    Figures,
    create_pods,
    delete_pods,
    is_running,
    local_pods,
    log_lines_since,
    poll,
    shadowpods,
    tiny_pod,
    uid,
    wait_all_running,
)

RECOVERY_MAX_S = 30.0


def lease_renewed_after(consumer: ControlPlane, slug: str, since: dt.datetime) -> bool:
    lease = get(consumer, f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{slug}")
    renew = ((lease or {}).get("spec") or {}).get("renewTime")
    if not renew:
        return False
    return dt.datetime.strptime(renew[:19], "%Y-%m-%dT%H:%M:%S").replace(tzinfo=dt.UTC) > since


def test_consumer_apiserver_restart_recovers_without_manual_action(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str], figures: Figures,
) -> None:  # fmt: skip
    ns, remote = offloaded_ns
    slug = bundle.slug
    before = [f"pre-{i}" for i in range(4)]
    create_pods(consumer, ns, [tiny_pod(slug, n) for n in before])
    wait_all_running(consumer, ns, before, 60)
    pre_shadows = shadowpods(pool, remote)
    pid = vkbridge.pid
    mark = len(vkbridge.log_text())

    t0 = time.monotonic()
    consumer.restart_apiserver()
    back = dt.datetime.now(dt.UTC).replace(microsecond=0)
    restart_s = time.monotonic() - t0
    t1 = time.monotonic()

    t_lease = poll(lambda: lease_renewed_after(consumer, slug, back), 60)
    after = [f"post-{i}" for i in range(3)]
    create_pods(consumer, ns, [tiny_pod(slug, n) for n in after])
    t_new = poll(lambda: all(is_running(local_pods(consumer, ns).get(n)) for n in after), 60)
    t_new_total = time.monotonic() - t1
    t_del0 = time.monotonic()
    delete_pods(consumer, ns, [before[0]])
    t_deleted = poll(
        lambda: before[0] not in local_pods(consumer, ns) and before[0] not in shadowpods(pool, remote), 60
    )
    _ = t_del0
    lines = log_lines_since(vkbridge, mark)
    warnings = [ln for ln in lines if " WARNING " in ln or " ERROR " in ln]

    figures.add("kube-apiserver restart (stop to ready)", restart_s, "s")
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

    assert vkbridge.alive() and vkbridge.pid == pid, "vkbridge must ride through, not restart"
    assert t_lease is not None and t_lease <= RECOVERY_MAX_S, (
        "the node Lease was not renewed after the restart"
    )
    assert t_new is not None, "pods created after the restart did not run"
    assert t_deleted is not None, "a pod deleted after the restart was not removed"
    assert node_ready(consumer, slug) == "True"
    shadows = shadowpods(pool, remote)
    assert all(uid(shadows.get(n)) == uid(pre_shadows[n]) for n in before[1:]), (
        "pods from before were disturbed"
    )
    wait_until(
        lambda: all(is_running(local_pods(consumer, ns).get(n)) for n in before[1:]), 30, "old pods Running"
    )
