"""Readiness is "can serve", leadership its own endpoint (issue 36 point 3).

With leadership a condition of /readyz, a standby was unready, so a RollingUpdate under a readiness probe
waited for ever: the new pod for the Lease the old, Ready pod held. Now a standby that reached the
consumer API is ready and /leaderz says who leads. These drive the checks of a VirtualKubelet that has
not started (no I/O) through the states start-up moves it through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from vkbridge.app import WAITING_FOR_LEADERSHIP, VirtualKubelet
from vkbridge.cli import parse_args
from vkbridge.kube.reachability import PoolState

ARGS = ["--foreign-cluster-id=c0123456789ab", "--foreign-kubeconfig-secret-name=kubeconfig-resourceslice-x"]


@dataclass
class Elector:
    is_leader: bool
    holder: str = "vk-old"
    namespace: str = "liqo-tenant-x"
    name: str = "x"


@dataclass
class SyncedCache:
    name: str = "consumer/node"
    state: str = "watching"
    synced: bool = True


class Serving:
    def current_keypair(self) -> Any:
        return object()


def vk() -> VirtualKubelet:
    return VirtualKubelet(parse_args(ARGS, env={}))


def failed(checks: Any) -> list[str]:
    status, text = checks.render(verbose=True)
    return [] if status == 200 else [ln for ln in text.splitlines() if ln.startswith("[-]")]


def test_before_the_consumer_api_answers_nothing_is_ready() -> None:
    v = vk()
    assert any(ln.startswith("[-]consumer-api failed: not connected") for ln in failed(v.readyz))


def test_a_standby_waiting_for_the_lease_is_ready_and_says_so_on_leaderz() -> None:
    v = vk()
    v.home = object()  # type: ignore[assignment]
    v.elector = Elector(is_leader=False)  # type: ignore[assignment]
    v.phase = WAITING_FOR_LEADERSHIP
    assert failed(v.readyz) == []
    assert failed(v.leaderz) == ["[-]leader failed: standby: lease liqo-tenant-x/x held by vk-old"]
    assert v.livez.render()[0] == 200


def test_a_new_leader_is_unready_until_caches_pool_and_certificate_are_there() -> None:
    v = vk()
    v.home = object()  # type: ignore[assignment]
    v.elector = Elector(is_leader=True)  # type: ignore[assignment]
    v.phase = "waiting for the node, VirtualNode and ResourceSlice caches"
    names = {ln.split()[0] for ln in failed(v.readyz)}
    assert names == {"[-]started", "[-]caches", "[-]pool", "[-]serving-certificate"}
    assert failed(v.leaderz) == []

    v.caches = [SyncedCache()]  # type: ignore[list-item]
    v.serving = Serving()  # type: ignore[assignment]
    v.ready.set()
    assert [ln.split()[0] for ln in failed(v.readyz)] == ["[-]pool"]  # first pool check pending
    v.reach.set(PoolState.LOST, "hibernating")  # knowingly lost: ready (a hibernating pool is normal)
    assert failed(v.readyz) == []


def test_without_leader_election_the_process_always_leads() -> None:
    v = VirtualKubelet(parse_args([*ARGS, "--vk-lease-enabled=false"], env={}))
    assert failed(v.leaderz) == []
