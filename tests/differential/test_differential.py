"""Differential suite: the same scenario against Liqo v1.2's own virtual kubelet and against vkbridge.

Each scenario runs once per implementation on a fresh offloaded namespace of the same testbed (one node,
one peering; the two never run at once), its objects are normalised (tests/differential/snapshot.py: the
ignore list of naturally unique fields) and diffed. The differences must be exactly the rows of
docs/compatibility.md for that scenario: a new difference, or a documented one that went away, fails.
Run alone: ``hack/test.sh tests/differential -m differential`` (Liqo's binary: hack/build-liqo-vk.sh).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle
from e2e.fixtures_pool import offload_namespace
from e2e.liqo_vk import LiqoVkProcess, find_liqo_vk
from e2e.vkbridge_proc import VkbridgeProcess
from tests.differential import snapshot as snap
from tests.fixtures_vkbridge import start_impl, vkbridge_options
from tests.integration.helpers import events_for, get, must, pod_path, pool_pod, shadow_path, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.differential]

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
Snapshot = dict[str, Any]


class ImplSwitch:
    """Runs one implementation at a time on the bundle's node; switching stops the running one, deletes
    the Node (each re-creates its own, so nothing of the other's Node is compared) and starts the other."""

    def __init__(self, consumer: ControlPlane, bundle: Bundle, home_kubeconfig: Path, logs: Path) -> None:
        self.consumer, self.bundle, self.home, self.logs = consumer, bundle, home_kubeconfig, logs
        self.current: str | None = None
        self.proc: VkbridgeProcess | None = None

    def use(self, impl: str) -> VkbridgeProcess:
        if self.current == impl and self.proc is not None and self.proc.alive():
            return self.proc
        self.stop()
        self.consumer.api("DELETE", f"/api/v1/nodes/{self.bundle.slug}")
        wait_until(lambda: get(self.consumer, f"/api/v1/nodes/{self.bundle.slug}") is None, 30, "node gone")
        self.proc = start_impl(impl, self.consumer, self.bundle, self.home, self.logs / f"{impl}.log")
        self.current = impl
        return self.proc

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
        self.proc, self.current = None, None


@pytest.fixture(scope="session")
def switch(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, emulator: EmulatorHandle,
    vk_home_kubeconfig: Path, tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ImplSwitch]:  # fmt: skip
    find_liqo_vk()  # builds it once per machine when missing, before any plane time is spent on it
    sw = ImplSwitch(consumer, bundle, vk_home_kubeconfig, tmp_path_factory.mktemp("differential"))
    yield sw
    sw.stop()


def documented(scenario: str) -> set[str]:
    """The differences docs/compatibility.md asserts for `scenario`: rows `| scenario | `diff` | why |`."""
    rows = set()
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\|\s*([a-z0-9-]+)\s*\|\s*`([^`]+)`\s*\|", line)
        if m and m.group(1) == scenario:
            rows.add(m.group(2))
    return rows


Scenario = Callable[[ControlPlane, ControlPlane, Bundle, str, str], Snapshot]


def run_both(
    switch: ImplSwitch, consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, fresh_ns: Any,
    scenario: Scenario,
) -> tuple[Snapshot, Snapshot]:  # fmt: skip
    """Run the scenario on each implementation (the running one first: one switch per scenario)."""
    order = ["liqo", "vkbridge"] if switch.current != "vkbridge" else ["vkbridge", "liqo"]
    out: dict[str, Snapshot] = {}
    for impl in order:
        proc = switch.use(impl)
        local = fresh_ns(consumer, prefix=f"d-{impl}")
        remote = offload_namespace(consumer, pool, local)
        try:
            out[impl] = snap.placeholders(
                scenario(consumer, pool, bundle, local, remote),
                {remote: "<REMOTE_NS>", local: "<NS>"},
            )
        except BaseException:
            print(f"---- {impl} log tail ----\n{proc.tail(60)}")
            raise
        finally:
            _drain(consumer, pool, local, remote)
        if isinstance(proc, LiqoVkProcess):
            proc.check_running()
    return out["liqo"], out["vkbridge"]


def _drain(consumer: ControlPlane, pool: ControlPlane, local: str, remote: str) -> None:
    """Delete the scenario's pods and wait until their ShadowPods are gone, so the next impl starts clean."""
    consumer.api("DELETE", pod_path(local) + "?gracePeriodSeconds=0")
    try:
        wait_until(lambda: not must(pool, "GET", shadow_path(remote))["items"], 30, "shadowpods drained")
    except TimeoutError:
        pool.api("DELETE", shadow_path(remote))


def assert_documented(scenario: str, liqo: Snapshot, ours: Snapshot) -> None:
    found = snap.diff(liqo, ours)
    want = documented(scenario)
    assert found == want, (
        f"{scenario}: differences not in docs/compatibility.md: {sorted(found - want)}; "
        f"documented but gone: {sorted(want - found)}"
    )


def _phase_at_least(consumer: ControlPlane, ns: str, name: str, phases: tuple[str, ...]) -> bool:
    pod = get(consumer, pod_path(ns, name)) or {}
    st = pod.get("status") or {}
    return st.get("phase") in phases and all(
        (c.get("state") or {}).get("running") or (c.get("state") or {}).get("terminated")
        for c in st.get("containerStatuses") or [{}]
    )


def _settle(seconds: float = 3.0) -> None:
    """Let late writes (status, events) land; both impls get the same pause."""
    time.sleep(seconds)


def _pod_snapshot(consumer: ControlPlane, pool: ControlPlane, ns: str, remote: str, name: str) -> Snapshot:
    local = get(consumer, pod_path(ns, name))
    uid = ((local or {}).get("metadata") or {}).get("uid", "")
    out = {
        "shadowpod": snap.shadowpod(get(pool, shadow_path(remote, name))),
        "pod-status": snap.pod_status(local),
        "events": snap.events(events_for(consumer, ns, name)),
    }
    return snap.placeholders(out, {uid: "<LOCAL_UID>"})  # type: ignore[no-any-return]


def burst_hello(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str) -> Snapshot:
    pod = pool_pod(bundle.slug, "burst-hello", command="echo hello from the pool; sleep 30", restart="Never")
    must(consumer, "POST", pod_path(ns), pod)
    wait_until(lambda: _phase_at_least(consumer, ns, "burst-hello", ("Running",)), 60, "burst-hello Running")
    _settle()
    return _pod_snapshot(consumer, pool, ns, remote, "burst-hello")


def references(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str) -> Snapshot:
    """A Secret and a ConfigMap referenced by env and by volume, one Secret and one ConfigMap nobody uses."""
    for kind, name in (("secrets", "app-secret"), ("secrets", "unused-secret"),
                       ("configmaps", "app-config"), ("configmaps", "unused-config")):  # fmt: skip
        must(consumer, "POST", f"/api/v1/namespaces/{ns}/{kind}",
             {"metadata": {"name": name, "labels": {"app": "refs"}}, "data": {"k1": "dmFsdWU=", "k2": "dmFsdWU="}})  # fmt: skip
    pod = pool_pod(bundle.slug, "refs", command="sleep 30", restart="Never")
    c = pod["spec"]["containers"][0]
    c["env"] = [
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "app-secret", "key": "k1"}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": "app-config", "key": "k1"}}},
    ]
    c["volumeMounts"] = [{"name": "sec", "mountPath": "/sec"}, {"name": "cfg", "mountPath": "/cfg"}]
    pod["spec"]["volumes"] = [
        {"name": "sec", "secret": {"secretName": "app-secret"}},
        {"name": "cfg", "configMap": {"name": "app-config"}},
    ]
    must(consumer, "POST", pod_path(ns), pod)
    wait_until(lambda: _phase_at_least(consumer, ns, "refs", ("Running",)), 60, "refs Running")
    _settle()
    out = _pod_snapshot(consumer, pool, ns, remote, "refs")
    out["secrets"] = snap.configs(must(pool, "GET", f"/api/v1/namespaces/{remote}/secrets")["items"])
    out["configmaps"] = snap.configs(must(pool, "GET", f"/api/v1/namespaces/{remote}/configmaps")["items"],
                                     skip=("kube-root-ca.crt",))  # fmt: skip
    return out


def over_grant(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str) -> Snapshot:
    """A pod asking for more CPU than the whole grant, bound by hand (the scheduler would never bind it)."""
    pod = pool_pod(bundle.slug, "too-big", cpu="64", restart="Never", node_name=bundle.slug)
    must(consumer, "POST", pod_path(ns), pod)

    def decided() -> bool:
        st = (get(consumer, pod_path(ns, "too-big")) or {}).get("status") or {}
        return st.get("phase") in ("Failed", "Running") or bool(events_for(consumer, ns, "too-big"))

    wait_until(decided, 60, "too-big decided")
    _settle(8.0)
    return _pod_snapshot(consumer, pool, ns, remote, "too-big")


def node_view(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str) -> Snapshot:
    _settle()
    return {"node": snap.node(must(consumer, "GET", f"/api/v1/nodes/{bundle.slug}"))}


def local_deletion(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, ns: str, remote: str
) -> Snapshot:
    """Delete the local pod: what is left on each side afterwards, and the pod's events."""
    must(consumer, "POST", pod_path(ns), pool_pod(bundle.slug, "doomed", restart="Never"))
    wait_until(lambda: _phase_at_least(consumer, ns, "doomed", ("Running",)), 60, "doomed Running")
    must(consumer, "DELETE", pod_path(ns, "doomed"))
    wait_until(lambda: get(consumer, pod_path(ns, "doomed")) is None, 60, "doomed gone at home")
    wait_until(lambda: get(pool, pod_path(remote, "doomed")) is None, 60, "doomed gone on the pool")
    return {
        "after": {"shadowpod": get(pool, shadow_path(remote, "doomed")) is not None},
        "events": snap.events(events_for(consumer, ns, "doomed")),
    }


SCENARIOS: dict[str, Scenario] = {
    "burst-hello": burst_hello,
    "references": references,
    "over-grant": over_grant,
    "node": node_view,
    "local-deletion": local_deletion,
}


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_differential(
    name: str, switch: ImplSwitch, consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, fresh_ns: Any
) -> None:
    liqo, ours = run_both(switch, consumer, pool, bundle, fresh_ns, SCENARIOS[name])
    print(f"{name}: differences {sorted(snap.diff(liqo, ours))}")
    assert_documented(name, liqo, ours)


def test_liqo_start_up_error_fails_clearly_though_it_exits_0(
    consumer: ControlPlane, bundle: Bundle, emulator: EmulatorHandle, tmp_path: Path
) -> None:
    """Liqo's main() logs a start-up error and exits 0: check_running must still say it failed, and why."""
    opts = vkbridge_options(consumer, bundle, nodename="ghost-node", env={"VIRTUALNODE_NAME": "no-such-vn"})
    proc = LiqoVkProcess(opts, tmp_path / "liqo.log").start()
    try:
        wait_until(lambda: not proc.alive(), 60, "Liqo's VK to give up")
        assert proc.proc is not None and proc.proc.returncode == 0
        with pytest.raises(RuntimeError, match=r"exited \(code 0; it exits 0 after a start-up error\)"):
            proc.check_running()
        assert "Unable to get virtual node" in proc.log_text()
    finally:
        proc.stop()
