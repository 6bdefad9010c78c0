"""The differential suite's harness: one implementation at a time on the node, a scenario run on both, the
documented differences of docs/compatibility.md, and the API writes each implementation makes (audit log).

Shared by test_differential*.py (fixtures in conftest.py); test_live_switch.py uses ImplSwitch.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path
from typing import Any

from bench.apicalls import POD_RESOURCES, WRITE_VERBS_AUDIT, AuditReader
from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.fixtures_pool import offload_namespace
from e2e.liqo_vk import LiqoVkProcess
from e2e.vkbridge_proc import VkbridgeProcess
from tests.differential import snapshot as snap
from tests.fixtures_vkbridge import start_impl
from tests.integration.helpers import events_for, get, must, pod_path, shadow_path, wait_until

DOC = Path(__file__).resolve().parents[2] / "docs" / "compatibility.md"
Snapshot = dict[str, Any]
Scenario = Callable[[ControlPlane, ControlPlane, Bundle, str, str], Snapshot]


class ImplSwitch:
    """Runs one implementation at a time on the bundle's node; switching stops the running one, deletes
    the Node (each re-creates its own, so nothing of the other's Node is compared) and starts the other."""

    def __init__(self, consumer: ControlPlane, bundle: Bundle, home_kubeconfig: Path, logs: Path) -> None:
        self.consumer, self.bundle, self.home, self.logs = consumer, bundle, home_kubeconfig, logs
        self.current: str | None = None
        self.proc: VkbridgeProcess | None = None
        self.audit: Audit | None = None  # set by the fixture when the planes write an audit log

    def use(self, impl: str) -> VkbridgeProcess:
        if self.current == impl and self.proc is not None and self.proc.alive():
            return self.proc
        self.stop()
        self.consumer.api("DELETE", f"/api/v1/nodes/{self.bundle.slug}")
        wait_until(lambda: get(self.consumer, f"/api/v1/nodes/{self.bundle.slug}") is None, 30, "node gone")
        self.proc = start_impl(impl, self.consumer, self.bundle, self.home, self.logs / f"{impl}.log")
        self.current = impl
        return self.proc

    def restart(self) -> VkbridgeProcess:
        """Stop the running implementation and start the same one again over its Node and pods."""
        impl = self.current
        assert impl is not None and self.proc is not None, "nothing to restart"
        self.proc.stop()
        self.proc = start_impl(impl, self.consumer, self.bundle, self.home, self.logs / f"{impl}.log")
        return self.proc

    def fresh_node(self) -> VkbridgeProcess:
        """Restart the running implementation on a new Node (after a scenario that changed the grant)."""
        impl = self.current
        assert impl is not None, "nothing running"
        self.stop()
        return self.use(impl)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()
        self.proc, self.current = None, None


class Audit:
    """The writes an implementation makes, from the two API servers' audit logs (bench/apicalls.py's
    reader): per server, ``"<verb> <resource>" -> count`` for the pod-related resources only (pods and
    their status, ShadowPods, Events), so the Node's and Lease's heartbeats do not blur a pod's count.
    ``write_snapshot`` makes that comparable: which verb/resource pairs, and the total per server (a
    count per pair depends on timing, e.g. how many status steps the remote pod takes)."""

    def __init__(self, logs: dict[str, Path]) -> None:
        self.readers = {name: AuditReader(path) for name, path in logs.items()}
        self.since = dt.datetime.now(dt.UTC)

    def mark(self) -> None:
        for r in self.readers.values():
            r.mark()
        self.since = dt.datetime.now(dt.UTC)

    def writes(self, impl: str, namespaces: Collection[str]) -> dict[str, dict[str, int]]:
        """What `impl` wrote since mark() on objects in `namespaces` (a scenario's local and remote ones)."""
        out: dict[str, dict[str, int]] = {}
        for server, reader in self.readers.items():
            got: Counter[str] = Counter()
            for (who, verb, res), n in reader.read(self.since, namespaces).items():
                if is_impl(who, impl) and verb in WRITE_VERBS_AUDIT and res in POD_RESOURCES:
                    got[f"{verb} {res}"] += n
            out[server] = dict(sorted(got.items()))
        return out

    def write_snapshot(self, impl: str, namespaces: Collection[str], what: str) -> Snapshot:
        writes = self.writes(impl, namespaces)
        print(f"{what}, {impl}: writes {writes}")
        return {server: {"total": sum(w.values()), **dict.fromkeys(w, True)} for server, w in writes.items()}


def is_impl(who: str, impl: str) -> bool:
    """Whether the audit actor (bench.apicalls.actor) is the virtual kubelet: "vk" for either implementation
    (only one runs at a time, so a window's "vk" writes are `impl`'s), or, from an older ``actor``,
    "vkbridge" or Liqo's client-go default agent ``virtual-kubelet/<version>`` under other:<user>:<agent>."""
    if who == "vk":
        return True
    if impl == "vkbridge":
        return who == "vkbridge"
    return who.startswith("other:") and ":virtual-kubelet/" in who


def documented(scenario: str) -> set[str]:
    """The differences docs/compatibility.md asserts for `scenario`: rows `| scenario | `diff` | why |`."""
    rows = set()
    for line in DOC.read_text().splitlines():
        m = re.match(r"^\|\s*([a-z0-9-]+)\s*\|\s*`([^`]+)`\s*\|", line)
        if m and m.group(1) == scenario:
            rows.add(m.group(2))
    return rows


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
            wait_reflecting(proc, impl, local, remote)
            out[impl] = snap.placeholders(
                scenario(consumer, pool, bundle, local, remote),
                {remote: "<REMOTE_NS>", local: "<NS>"},
            )
        except BaseException:
            print(f"---- {impl} log tail ----\n{(switch.proc or proc).tail(60)}")
            raise
        finally:
            _drain(consumer, pool, local, remote)
        if isinstance(switch.proc, LiqoVkProcess):
            switch.proc.check_running()
    return out["liqo"], out["vkbridge"]


def wait_reflecting(proc: VkbridgeProcess, impl: str, local: str, remote: str) -> None:
    """Until `impl` says the namespace's reflection runs. Liqo's fallback takes a pod created before that
    for one of a namespace it does not reflect (Pending/OffloadingBackOff and a ReflectionDisabled Warning,
    then reflected a second later: liqo#2748's race); vkbridge holds such a pod until the pair is synced.
    Both start from a running reflection, so the race does not decide a scenario."""
    said = {
        "liqo": re.escape(f'Reflection between local namespace "{local}" and remote namespace "{remote}"')
        + " correctly started",
        "vkbridge": rf"engine\s+reflection started namespace={re.escape(local)} ",
    }[impl]
    proc.wait_for_log(said, 60)


def _drain(consumer: ControlPlane, pool: ControlPlane, local: str, remote: str) -> None:
    """Delete the scenario's pods and wait until their ShadowPods are gone, so the next impl starts clean."""
    consumer.api("DELETE", pod_path(local) + "?gracePeriodSeconds=0")
    try:
        wait_until(lambda: not must(pool, "GET", shadow_path(remote))["items"], 30, "shadowpods drained")
    except TimeoutError:
        pool.api("DELETE", shadow_path(remote))


def assert_documented(scenario: str, liqo: Snapshot, ours: Snapshot) -> None:
    found = snap.diff(liqo, ours)
    print(f"{scenario}: differences {sorted(found)}")
    want = documented(scenario)
    assert found == want, (
        f"{scenario}: differences not in docs/compatibility.md: {sorted(found - want)}; "
        f"documented but gone: {sorted(want - found)}"
    )


def current_impl(switch: ImplSwitch) -> str:
    assert switch.current is not None
    return switch.current


# ------------------------------------------------------------------------------------ scenario helpers


def phase_at_least(consumer: ControlPlane, ns: str, name: str, phases: tuple[str, ...]) -> bool:
    pod = get(consumer, pod_path(ns, name)) or {}
    st = pod.get("status") or {}
    return st.get("phase") in phases and all(
        (c.get("state") or {}).get("running") or (c.get("state") or {}).get("terminated")
        for c in st.get("containerStatuses") or [{}]
    )


def running(consumer: ControlPlane, ns: str, name: str, timeout: float = 60) -> None:
    wait_until(lambda: phase_at_least(consumer, ns, name, ("Running",)), timeout, f"{name} Running")


def settle(seconds: float = 3.0) -> None:
    """Let late writes (status, events) land; both impls get the same pause."""
    time.sleep(seconds)


def pod_snapshot(consumer: ControlPlane, pool: ControlPlane, ns: str, remote: str, name: str) -> Snapshot:
    local = get(consumer, pod_path(ns, name))
    uid = ((local or {}).get("metadata") or {}).get("uid", "")
    out = {
        "shadowpod": snap.shadowpod(get(pool, shadow_path(remote, name))),
        "pod-status": snap.pod_status(local),
        "events": snap.events(events_for(consumer, ns, name)),
    }
    return snap.placeholders(out, {uid: "<LOCAL_UID>"})  # type: ignore[no-any-return]
