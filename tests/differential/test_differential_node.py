"""Differential suite, the node's side: the Node and its Lease, a restart of the virtual kubelet over running
pods, and the API writes each implementation makes for one pod (both API servers' audit logs).

Same rules as test_differential.py: the differences are exactly docs/compatibility.md's rows.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from tests.differential import snapshot as snap
from tests.differential.harness import (
    ImplSwitch,
    Snapshot,
    assert_documented,
    current_impl,
    pod_snapshot,
    run_both,
    running,
    settle,
)
from tests.integration.helpers import get, must, pod_path, pool_pod, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.differential]

LEASE_WATCH_S = 25.0  # long enough for two renewals at Liqo's 10 s (a quarter of the 40 s duration)


def _renew_cadence(consumer: ControlPlane, path: str, seconds: float) -> int | None:
    """The Lease's renew interval, whole seconds (median of the gaps between renewTimes seen)."""
    seen: list[dt.datetime] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        renew = ((get(consumer, path) or {}).get("spec") or {}).get("renewTime")
        if renew:
            t = dt.datetime.fromisoformat(renew.replace("Z", "+00:00"))
            if not seen or t != seen[-1]:
                seen.append(t)
        time.sleep(0.25)
    gaps = [(b - a).total_seconds() for a, b in itertools.pairwise(seen)]
    return round(statistics.median(gaps)) if gaps else None


def node_view(
    switch: ImplSwitch, consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """The Node (labels, taints, capacity, conditions, addresses, daemonEndpoints, nodeInfo) and its Lease
    (holder, duration, owner, renew cadence)."""
    settle()
    assert switch.proc is not None
    node = must(consumer, "GET", f"/api/v1/nodes/{bundle.slug}")
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{bundle.slug}"
    return {
        "node": snap.node(node, listen_port=switch.proc.opts.listen_port),
        "lease": snap.lease(get(consumer, lease_path)),
        "lease-renew": {"seconds": _renew_cadence(consumer, lease_path, LEASE_WATCH_S)},
    }


def _remote_uid(pool: ControlPlane, remote: str, name: str) -> str:
    return str(((get(pool, pod_path(remote, name)) or {}).get("metadata") or {}).get("uid"))


def restart(
    switch: ImplSwitch, consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """Stop the implementation and start it again over a running and a completed pod: its writes per object
    while it comes back, and whether any pod was restarted, re-created or touched."""
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "steady"))
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "done", command="echo done", restart="Never"))
    running(consumer, ns, "steady")
    wait_until(lambda: (get(consumer, pod_path(ns, "done")) or {}).get("status", {}).get("phase") == "Succeeded",
               60, "done Succeeded")  # fmt: skip
    settle(8.0)  # Liqo's Events of the last status write land late: they are not the restart's
    uids = {n: _remote_uid(pool, remote, n) for n in ("steady", "done")}
    assert switch.audit is not None
    switch.audit.mark()
    switch.restart()
    settle(12.0)  # past a Lease renewal and a resync of every pod by the new process
    out: Snapshot = {"writes": switch.audit.write_snapshot(current_impl(switch), (ns, remote), "restart")}
    for n in ("steady", "done"):
        out.update({f"{n}-{k}": v for k, v in pod_snapshot(consumer, pool, ns, remote, n).items()})
        out[f"{n}-remote"] = {"same-uid": _remote_uid(pool, remote, n) == uids[n]}
        # The point of the scenario, whatever the other implementation does: nothing restarted or re-created.
        assert out[f"{n}-remote"]["same-uid"], f"{current_impl(switch)} re-created {n} on the pool"
        restarts = {c["restartCount"] for c in out[f"{n}-pod-status"]["containerStatuses"].values()}
        assert restarts == {0}, f"{current_impl(switch)}: {n} restarted ({restarts})"
    return out


def api_writes(
    switch: ImplSwitch, consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """The writes an implementation makes for one pod from create to Running (and its late status), per
    server and ``<verb> <resource>``: pods, pods/status, ShadowPods, Events."""
    assert switch.audit is not None
    switch.audit.mark()
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "counted"))
    running(consumer, ns, "counted")
    settle(5.0)
    return {"writes": switch.audit.write_snapshot(current_impl(switch), (ns, remote), "api-writes")}


NodeScenario = Callable[[ImplSwitch, ControlPlane, ControlPlane, Bundle, str, str], Snapshot]
SCENARIOS: dict[str, NodeScenario] = {
    "node": node_view,
    "restart": restart,
    "api-writes": api_writes,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_differential(
    name: str, switch: ImplSwitch, consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, fresh_ns: Any
) -> None:
    scenario = functools.partial(SCENARIOS[name], switch)
    liqo, ours = run_both(switch, consumer, pool, bundle, fresh_ns, scenario)
    assert_documented(name, liqo, ours)
