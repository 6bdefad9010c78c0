"""Live switch: Liqo v1.2's own virtual kubelet -> vkbridge -> Liqo's, on one virtual node with running pods.

What a user does to migrate (docs/operations.md, "Migrating between Liqo's virtual kubelet and vkbridge"):
the VK Deployment's image changes, Kubernetes sends SIGTERM to the old process and starts the new one; the
Node, its Lease, the ShadowPods, the remote pods and the Secret/ConfigMap copies stay. Unlike the
differential suite's ImplSwitch, the Node is never deleted here. At each switch the test records every
pod (local uid, ShadowPod uid, remote pod uid, restart counts, container ids and start times) and asserts
that none was lost, restarted, duplicated or aborted, and no copy leaked or lost. The ``fact_*`` helpers
assert what each implementation does to the other's objects: the migration guide cites them by name.
Run alone: ``python3 -m pytest tests/differential/test_live_switch.py -m differential``.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle
from e2e.fixtures_pool import offload_namespace
from e2e.liqo_vk import LiqoVkProcess, ensure_foreign_cluster, find_liqo_vk
from e2e.vkbridge_proc import VkbridgeProcess
from e2e.waiting import wait_until
from reflectors.forge import constants as c
from reflectors.forge.configuration import node_mark
from reflectors.forge.names import remote_configmap_name
from tests.differential.harness import ImplSwitch
from tests.fixtures_vkbridge import vkbridge_options
from tests.integration.helpers import events_for, get, must, pod_path, pool_pod, shadow_path

pytestmark = [pytest.mark.integration, pytest.mark.differential]

SECRETS = ("s-a", "s-b", "s-shared", "s-new", "s-unused")  # s-unused: no pod references it
CONFIGMAPS = ("cm-a", "cm-b", "cm-shared")
LIQO_NODE_ANNOTATIONS = (
    "virtual-kubelet.io/last-applied-node-status",
    "virtual-kubelet.io/last-applied-object-meta",
)
VKBRIDGE_NODE_ANNOTATION = "vkbridge.multicloud.io/last-applied-node-metadata"
SWITCH_TIMEOUT = 90.0
# Status writers that are no virtual kubelet: PodScheduled; Ready=False while the Node is Unknown.
CONTROL_PLANE_MANAGERS = {"kube-scheduler", "kube-controller-manager"}
LIQO_SHARED_LEASE = "virtual-kubelet-leader-election"  # Liqo's "shared resources" election
SURGE_WATCH_SECONDS = 6.0  # how long a rolling update's new pod is watched waiting for the leader Lease
Obj = dict[str, Any]


@dataclass(frozen=True)
class PodRecord:
    """What must not change for a running pod across a switch (a change is a restart or a re-creation)."""

    local_uid: str
    shadow_uid: str
    remote_uid: str
    restarts: tuple[int, ...]
    containers: tuple[tuple[str, str], ...]  # (containerID, state.running.startedAt) per container
    phase: str
    ready: str


@dataclass
class Switch:
    """One switch, timed from the old implementation's SIGTERM."""

    old: str
    new: str
    node_ready_s: float = 0.0  # until the new one renewed the Lease and the Node is Ready
    pods_ready_s: float = 0.0  # until the new one took over every ShadowPod and copy, every pod Ready
    not_ready_seen: list[str] = field(default_factory=list)  # the Node's Ready status whenever not True
    elected_s: float = 0.0  # until the new one holds the leader Lease <tenant ns>/<node>
    old_released: bool = False  # the old one released the leader Lease as it exited
    heartbeat_gap_s: float = 0.0  # between the old one's last node Lease renewal and the new one's first


def _meta(obj: Obj | None, key: str) -> Any:
    return ((obj or {}).get("metadata") or {}).get(key)


def _labels(obj: Obj | None) -> dict[str, str]:
    return dict(_meta(obj, "labels") or {})


def _annotations(obj: Obj | None) -> dict[str, str]:
    return dict(_meta(obj, "annotations") or {})


def _ready(node: Obj) -> str | None:
    for cond in (node.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Ready":
            return str(cond.get("status"))
    return None


def _time(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")) if value else None


def _managers(obj: Obj) -> set[str]:
    return {str(m.get("manager")) for m in _meta(obj, "managedFields") or []}


def _with_refs(pod: Obj, *, secret: str, configmap: str) -> None:
    """Env and volume references to one Secret and one ConfigMap, so copies exist on the pool."""
    ct = pod["spec"]["containers"][0]
    ct["env"] = [
        {"name": "S", "valueFrom": {"secretKeyRef": {"name": secret, "key": "k"}}},
        {"name": "C", "valueFrom": {"configMapKeyRef": {"name": configmap, "key": "k"}}},
    ]
    ct["volumeMounts"] = [{"name": "sec", "mountPath": "/sec"}, {"name": "cfg", "mountPath": "/cfg"}]
    pod["spec"]["volumes"] = [
        {"name": "sec", "secret": {"secretName": secret}},
        {"name": "cfg", "configMap": {"name": configmap}},
    ]


def _pod_references(pod: Obj) -> tuple[set[str], set[str]]:
    """(Secrets, ConfigMaps) a pod references by volume (projected too), env and envFrom."""
    secrets: set[str] = set()
    cms: set[str] = set()
    for v in pod["spec"].get("volumes") or []:
        if "secret" in v:
            secrets.add(v["secret"]["secretName"])
        if "configMap" in v:
            cms.add(v["configMap"]["name"])
        cms.update(
            s["configMap"]["name"]
            for s in (v.get("projected") or {}).get("sources") or []
            if "configMap" in s
        )
    for ct in pod["spec"].get("containers") or []:
        for e in ct.get("env") or []:
            ref = e.get("valueFrom") or {}
            if "secretKeyRef" in ref:
                secrets.add(ref["secretKeyRef"]["name"])
            if "configMapKeyRef" in ref:
                cms.add(ref["configMapKeyRef"]["name"])
        for e in ct.get("envFrom") or []:
            secrets.update([e["secretRef"]["name"]] if "secretRef" in e else [])
            cms.update([e["configMapRef"]["name"]] if "configMapRef" in e else [])
    return secrets, cms


@dataclass
class Live:
    """The node, one offloaded namespace with its workload, and the implementation running now."""

    consumer: ControlPlane
    pool: ControlPlane
    bundle: Bundle
    home: Path
    logs: Path
    ns: str = ""
    remote: str = ""
    proc: VkbridgeProcess | None = None
    strategy: str = "recreate"  # how the VK Deployment replaces its pod: "recreate" or "rolling"
    generation: int = 0  # pods started so far: the next one is vk-<slug>-<generation + 1>
    switches: list[Switch] = field(default_factory=list)

    # ------------------------------------------------------------------------------------------ reads

    def local_pods(self) -> dict[str, Obj]:
        return {p["metadata"]["name"]: p for p in must(self.consumer, "GET", pod_path(self.ns))["items"]}

    def shadows(self) -> dict[str, Obj]:
        return {s["metadata"]["name"]: s for s in must(self.pool, "GET", shadow_path(self.remote))["items"]}

    def remote_pods(self) -> dict[str, Obj]:
        return {p["metadata"]["name"]: p for p in must(self.pool, "GET", pod_path(self.remote))["items"]}

    def copies(self, kind: str) -> dict[str, Obj]:
        """The remote copies of ``kind`` (secrets/configmaps) a virtual kubelet made (origin label)."""
        items = must(self.pool, "GET", f"/api/v1/namespaces/{self.remote}/{kind}")["items"]
        return {o["metadata"]["name"]: o for o in items if c.ORIGIN_LABEL in _labels(o)}

    def copy_uids(self) -> dict[str, dict[str, str]]:
        return {k: {n: _meta(o, "uid") for n, o in self.copies(k).items()} for k in ("secrets", "configmaps")}

    def references(self) -> dict[str, set[str]]:
        """Remote names of the Secrets/ConfigMaps the live local pods reference (the root CA renamed)."""
        secrets: set[str] = set()
        cms: set[str] = set()
        for pod in self.local_pods().values():
            if not _meta(pod, "deletionTimestamp"):
                s, m = _pod_references(pod)
                secrets |= s
                cms |= m
        return {
            "secrets": secrets,
            "configmaps": {remote_configmap_name(n, self.bundle.consumer_id) for n in cms},
        }

    def referenced_copies(self) -> list[Obj]:
        want, secrets, cms = self.references(), self.copies("secrets"), self.copies("configmaps")
        return [secrets[n] for n in want["secrets"] if n in secrets] + [
            cms[n] for n in want["configmaps"] if n in cms
        ]

    def node(self) -> Obj:
        return must(self.consumer, "GET", f"/api/v1/nodes/{self.bundle.slug}")

    def lease(self) -> Obj:
        path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{self.bundle.slug}"
        return must(self.consumer, "GET", path)

    def reflected_events(self) -> dict[str, tuple[str, str]]:
        """Local copies of the pool's pod Events (origin/destination labels): name -> (uid, reason)."""
        items = must(self.consumer, "GET", f"/api/v1/namespaces/{self.ns}/events")["items"]
        return {e["metadata"]["name"]: (_meta(e, "uid"), e.get("reason", "")) for e in items
                if c.ORIGIN_LABEL in _labels(e)}  # fmt: skip

    def record(self) -> dict[str, PodRecord]:
        shadows, remotes = self.shadows(), self.remote_pods()
        out = {}
        for name, pod in self.local_pods().items():
            st = pod.get("status") or {}
            cs = st.get("containerStatuses") or []
            out[name] = PodRecord(
                local_uid=_meta(pod, "uid"),
                shadow_uid=_meta(shadows.get(name), "uid") or "",
                remote_uid=_meta(remotes.get(name), "uid") or "",
                restarts=tuple(int(x.get("restartCount", 0)) for x in cs),
                containers=tuple(
                    (
                        x.get("containerID", ""),
                        ((x.get("state") or {}).get("running") or {}).get("startedAt", ""),
                    )
                    for x in cs
                ),
                phase=st.get("phase", ""),
                ready=next((x["status"] for x in st.get("conditions") or [] if x.get("type") == "Ready"), ""),
            )
        return out

    # ------------------------------------------------------------------------------------------ implementations

    def start(self, impl: str) -> VkbridgeProcess:
        """Start ``impl`` as the next pod of the VK Deployment: a pod name of its own (``POD_NAME``, the
        identity both use in the leader Lease ``<tenant ns>/<node>``), as each rollout makes one."""
        self.generation += 1
        pod_name, log_path = (
            f"vk-{self.bundle.slug}-{self.generation}",
            self.logs / f"{impl}-{self.generation}.log",
        )
        if impl == "liqo":
            ensure_foreign_cluster(self.consumer, self.bundle.slug, self.bundle.tenant_ns)
            opts = vkbridge_options(self.consumer, self.bundle, env={"POD_NAME": pod_name})
            return LiqoVkProcess(opts, log_path).start()
        opts = vkbridge_options(self.consumer, self.bundle, self.home, env={"POD_NAME": pod_name})
        return VkbridgeProcess(opts, log_path).start()

    def first(self, impl: str) -> None:
        self.proc = self.start(impl)

        def ready() -> bool:
            if isinstance(self.proc, LiqoVkProcess):
                self.proc.check_running()
            node = get(self.consumer, f"/api/v1/nodes/{self.bundle.slug}")
            return node is not None and _ready(node) == "True" and self.leader() == self.pod_name()

        wait_until(ready, SWITCH_TIMEOUT, f"the node Ready under {impl}", interval=0.2)
        if impl == "liqo":
            # Liqo's Secret/ConfigMap/Event reflectors act only while it holds this second Lease, and drop
            # what happened before: a predecessor that exited without releasing it delays it up to 15 s.
            shared = LIQO_SHARED_LEASE
            wait_until(lambda: self.leader(shared) == self.pod_name(), SWITCH_TIMEOUT, f"Lease {shared}")

    def pod_name(self) -> str:
        return f"vk-{self.bundle.slug}-{self.generation}"

    def leader(self, lease: str = "") -> str | None:
        """The holder of a Lease of the tenant namespace (default: the node's leader Lease)."""
        name = lease or self.bundle.slug
        path = f"/apis/coordination.k8s.io/v1/namespaces/{self.bundle.tenant_ns}/leases/{name}"
        return ((get(self.consumer, path) or {}).get("spec") or {}).get("holderIdentity")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.stop()  # SIGTERM, as Kubernetes does to the old pod of a rollout
        self.proc = None

    def switch(self, new: str) -> Switch:
        """Replace the running implementation by ``new`` on the same Node (never deleted), as the VK
        Deployment's rollout does, and wait until ``new`` holds the node (a Lease renewal of its own, Ready)
        and has taken over every pod and copy. ``rolling`` (Liqo's generated Deployment: the default
        RollingUpdate, one surge pod): the new pod starts first and must wait for the leader Lease doing
        nothing; ``recreate`` (deploy/deployment.yaml): it starts once the old one has exited."""
        sw = Switch("liqo" if isinstance(self.proc, LiqoVkProcess) else "vkbridge", new)
        old_pod = self.pod_name()
        surge = self.start(new) if self.strategy == "rolling" else None
        if surge is not None:
            self.hold_off(surge, old_pod, new)
        t0 = time.monotonic()
        last_renewal = _time(self.lease()["spec"].get("renewTime"))
        self.stop()
        started = dt.datetime.now(dt.UTC)
        sw.old_released = self.leader() != old_pod
        self.proc = surge or self.start(new)

        def watch() -> None:
            if (ready := _ready(self.node())) != "True":
                sw.not_ready_seen.append(str(ready))

        def elected() -> bool:
            watch()
            return self.leader() == self.pod_name()

        wait_until(elected, SWITCH_TIMEOUT, f"{new} elected", interval=0.2)
        sw.elected_s = time.monotonic() - t0

        def node_ready() -> bool:
            watch()
            renewed = _time(self.lease()["spec"].get("renewTime"))
            return (
                renewed is not None and renewed > started and _ready(self.node()) == "True"
                and self.leader() == self.pod_name()
            )  # fmt: skip

        wait_until(node_ready, SWITCH_TIMEOUT, f"the node Ready with a Lease renewed by {new}", interval=0.2)
        sw.node_ready_s = time.monotonic() - t0
        first_renewal = _time(self.lease()["spec"].get("renewTime"))
        if last_renewal and first_renewal:
            sw.heartbeat_gap_s = (first_renewal - last_renewal).total_seconds()  # an upper bound: 0.2 s polls

        def taken_over() -> bool:
            watch()
            return self.taken_over(new) and all(r.ready == "True" for r in self.record().values())

        wait_until(taken_over, SWITCH_TIMEOUT, f"{new} to take over every ShadowPod and copy", interval=0.3)
        sw.pods_ready_s = time.monotonic() - t0
        self.switches.append(sw)
        return sw

    def hold_off(self, surge: VkbridgeProcess, old_pod: str, impl: str) -> None:
        """While the old pod holds the leader Lease the surge pod runs and touches nothing."""
        deadline = time.monotonic() + SURGE_WATCH_SECONDS
        while time.monotonic() < deadline:
            assert surge.alive(), f"the surge pod ({impl}) exited:\n{surge.tail(20)}"
            assert self.leader() == old_pod, (
                f"the leader Lease moved to {self.leader()} before the old pod stopped"
            )
            assert not self.taken_over(impl), f"the surge pod ({impl}) reflected before it was elected"
            time.sleep(0.5)

    def taken_over(self, impl: str) -> bool:
        """Each implementation leaves a mark the other lacks on what it reconciled: vkbridge the local pod's
        uid on each ShadowPod and its node mark on each referenced copy; Liqo's VK rewrites both away."""
        shadows = self.shadows()
        if impl == "vkbridge":
            pods, mark = self.local_pods(), node_mark(self.bundle.slug)
            return all(
                _annotations(s).get(c.LOCAL_POD_UID_ANNOTATION) == _meta(pods.get(n), "uid")
                for n, s in shadows.items()
            ) and all(mark in _labels(o) for o in self.referenced_copies())
        return all(c.LOCAL_POD_UID_ANNOTATION not in _annotations(s) for s in shadows.values())

    # ------------------------------------------------------------------------------------------ workload

    def create_workload(self) -> None:
        """Two pods with a Secret and a ConfigMap each (env and volume), a bare pod, a Deployment of 2
        replicas sharing a Secret and a ConfigMap, and a Secret no pod references."""
        for name in SECRETS:
            body = {"metadata": {"name": name}, "data": {"k": "dmFsdWU="}}
            must(self.consumer, "POST", f"/api/v1/namespaces/{self.ns}/secrets", body)
        for name in CONFIGMAPS:
            body = {"metadata": {"name": name}, "data": {"k": "value"}}
            must(self.consumer, "POST", f"/api/v1/namespaces/{self.ns}/configmaps", body)
        self.create_pod("refs-a", secret="s-a", configmap="cm-a")
        self.create_pod("refs-b", secret="s-b", configmap="cm-b")
        self.create_pod("bare")
        template = pool_pod(self.bundle.slug, "web", labels={"app": "web"})
        _with_refs(template, secret="s-shared", configmap="cm-shared")
        must(self.consumer, "POST", f"/apis/apps/v1/namespaces/{self.ns}/deployments", {
            "metadata": {"name": "web"},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": template["spec"]}},
        })  # fmt: skip

    def create_pod(self, name: str, *, secret: str | None = None, configmap: str | None = None) -> None:
        pod = pool_pod(self.bundle.slug, name, labels={"app": name})
        if secret and configmap:
            _with_refs(pod, secret=secret, configmap=configmap)
        must(self.consumer, "POST", pod_path(self.ns), pod)

    def wait_running(self, count: int) -> dict[str, PodRecord]:
        def running() -> dict[str, PodRecord] | None:
            rec = self.record()
            ok = len(rec) == count and all(
                r.phase == "Running" and r.ready == "True" and r.remote_uid and r.shadow_uid
                and all(cid and started for cid, started in r.containers) for r in rec.values()
            )  # fmt: skip
            return rec if ok else None

        return wait_until(running, 120, f"{count} pods Running and Ready", interval=0.5)

    def delete_pod(self, name: str) -> None:
        """Delete a local pod and wait until it, its ShadowPod and its remote pod are gone."""
        must(self.consumer, "DELETE", pod_path(self.ns, name))
        wait_until(lambda: get(self.consumer, pod_path(self.ns, name)) is None, 60, f"{name} gone at home")
        wait_until(lambda: name not in self.shadows(), 60, f"{name}'s ShadowPod gone")
        wait_until(lambda: name not in self.remote_pods(), 60, f"{name}'s remote pod gone")

    def drain(self) -> None:
        """Delete the workload while a virtual kubelet still runs, so no ShadowPod is left on the pool."""
        self.consumer.api("DELETE", f"/apis/apps/v1/namespaces/{self.ns}/deployments/web")
        self.consumer.api("DELETE", pod_path(self.ns) + "?gracePeriodSeconds=0")
        try:
            wait_until(lambda: not self.shadows() and not self.local_pods(), 60, "the workload drained")
        except TimeoutError:
            self.pool.api("DELETE", shadow_path(self.remote))


@pytest.fixture
def live(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, emulator: EmulatorHandle,
    vk_home_kubeconfig: Path, fresh_ns: Any, tmp_path: Path, switch: ImplSwitch,
) -> Iterator[Live]:  # fmt: skip
    """A fresh offloaded namespace on the node, with no implementation running (the suite's switch stops)."""
    find_liqo_vk()
    switch.stop()  # exactly one virtual kubelet on the node: ours
    lv = Live(consumer, pool, bundle, vk_home_kubeconfig, tmp_path)
    lv.ns = fresh_ns(consumer, prefix="live")
    lv.remote = offload_namespace(consumer, pool, lv.ns)
    try:
        yield lv
    finally:
        if lv.proc is not None:
            print(f"---- {type(lv.proc).__name__} log tail ----\n{lv.proc.tail(30)}")
            lv.drain()
        lv.stop()


# ---------------------------------------------------------------------------------------------- invariants


def assert_survived(before: dict[str, PodRecord], after: dict[str, PodRecord], impl: str) -> None:
    """Every pod still there, the same pod (local, ShadowPod and remote uids), not restarted, Running."""
    assert set(after) == set(before), f"pods lost or added under {impl}: {set(before) ^ set(after)}"
    for name, was in before.items():
        now = after[name]
        assert now.local_uid == was.local_uid, f"{name}: local pod re-created under {impl}"
        assert now.shadow_uid == was.shadow_uid, f"{name}: ShadowPod replaced under {impl}"
        assert now.remote_uid == was.remote_uid, f"{name}: remote pod re-created under {impl}"
        assert now.restarts == was.restarts, f"{name}: restartCount {was.restarts} -> {now.restarts} ({impl})"
        assert now.containers == was.containers, f"{name}: container restarted under {impl}"
        assert (now.phase, now.ready) == ("Running", "True"), f"{name}: {now.phase}/{now.ready} under {impl}"


def assert_one_shadow_per_pod(lv: Live) -> None:
    """No duplicate: one ShadowPod and one remote pod per local pod, each remote pod owned by its ShadowPod."""
    local, shadows, remotes = lv.local_pods(), lv.shadows(), lv.remote_pods()
    assert set(shadows) == set(local) == set(remotes)
    for name, rp in remotes.items():
        owners = [o["uid"] for o in _meta(rp, "ownerReferences") or [] if o.get("controller")]
        assert owners == [_meta(shadows[name], "uid")], f"{name}: remote pod owners {owners}"


def assert_no_pod_aborted(lv: Live) -> None:
    for name, pod in lv.local_pods().items():
        st = pod.get("status") or {}
        assert st.get("phase") == "Running" and st.get("reason") != c.REASON_OFFLOADING_ABORTED, (name, st)
        assert not _meta(pod, "deletionTimestamp"), f"{name} is being deleted"


def assert_referenced_copies_kept(lv: Live, before: dict[str, dict[str, str]]) -> None:
    """Every copy a live pod references exists, and those that existed before are the same objects."""
    want, now = lv.references(), lv.copy_uids()
    for kind in ("secrets", "configmaps"):
        assert want[kind] <= set(now[kind]), f"referenced {kind} copies lost: {want[kind] - set(now[kind])}"
        changed = {n for n in want[kind] if n in before[kind] and now[kind][n] != before[kind][n]}
        assert not changed, f"{kind} copies deleted and re-created: {changed}"


def assert_switch_clean(lv: Live, sw: Switch, node0: Obj, lease0: Obj, since: dt.datetime) -> None:
    """The Node and its Lease are the same objects; the Node is never NotReady, and Unknown only when the
    heartbeats paused longer than node-monitor-grace-period; no Warning on any pod but NodeNotReady then."""
    assert set(sw.not_ready_seen) <= {"Unknown"}, f"the node went {set(sw.not_ready_seen)}: {sw}"
    paused = heartbeats_paused(lv, sw)
    if sw.not_ready_seen:
        assert paused, f"Ready=Unknown after a heartbeat gap shorter than the grace period: {sw}"
    node, lease = lv.node(), lv.lease()
    assert _meta(node, "uid") == _meta(node0, "uid"), "the Node was re-created"
    assert _meta(lease, "uid") == _meta(lease0, "uid"), "the Lease was re-created"
    assert lease["spec"]["holderIdentity"] == lv.bundle.slug
    assert [o["uid"] for o in _meta(lease, "ownerReferences") or []] == [_meta(node0, "uid")]
    assert set(_labels(node)) >= set(_labels(node0)), "Node labels lost"

    def taints(n: Obj) -> set[tuple[str, str]]:
        return {(t["key"], t["effect"]) for t in n["spec"].get("taints") or []}

    # The node lifecycle controller's unreachable taint (after Unknown) goes within its monitor period.
    wait_until(lambda: taints(lv.node()) == taints(node0), 30, f"the Node's taints back to {taints(node0)}")
    allowed = {"NodeNotReady"} if paused else set()  # what the node lifecycle controller says
    warnings = [
        f"{e.get('reason')}: {e.get('message')}"
        for e in pod_events_since(lv, since)
        if e.get("type") == "Warning" and e.get("reason") not in allowed
    ]
    assert not warnings, f"Warnings during {sw.old} -> {sw.new}: {warnings}"


def switch_keeping_every_pod(
    lv: Live,
    new: str,
    impl: str,
    before: dict[str, PodRecord],
    copies: dict[str, dict[str, str]],
    node0: Obj,
    lease0: Obj,
) -> tuple[Switch, dt.datetime]:
    """Switch to ``new`` once the old one's last Events about the pods landed, and check what every switch
    keeps: the same pods, one ShadowPod each, none aborted, the referenced copies, a clean Node and Lease.
    Returns the switch and the time it began (the test's facts look at what came after it)."""
    time.sleep(2.0)
    since = dt.datetime.now(dt.UTC)
    sw = lv.switch(new)
    assert_survived(before, lv.record(), impl)
    assert_one_shadow_per_pod(lv)
    assert_no_pod_aborted(lv)
    assert_referenced_copies_kept(lv, copies)
    assert_switch_clean(lv, sw, node0, lease0, since)
    return sw, since


def heartbeats_paused(lv: Live, sw: Switch) -> bool:
    """Did the node Lease go unrenewed longer than kube-controller-manager's node monitor grace period
    (minus its 2 s monitor period, e2e/controlplane.py), so it may have marked the Node Unknown?"""
    grace = float(str(lv.consumer.grace).rstrip("s"))
    return sw.heartbeat_gap_s > grace - 2.0


def pod_events_since(lv: Live, since: dt.datetime) -> list[Obj]:
    """Events about the namespace's pods recorded (or repeated) after ``since``'s second (Event times have
    second precision), local copies of pool Events excluded."""
    since = since.replace(microsecond=0)
    out = []
    for name in lv.local_pods():
        for ev in events_for(lv.consumer, lv.ns, name):
            when = _time(ev.get("lastTimestamp") or ev.get("eventTime"))
            if when is not None and when > since and c.ORIGIN_LABEL not in _labels(ev):
                out.append(ev)
    return out


def reflection_events_since(lv: Live, since: dt.datetime) -> list[Obj]:
    """The pod Events a virtual kubelet's reflection wrote (source ``liqo-<reflector>-reflection``, the
    same for both), not the node lifecycle controller's."""
    rx = re.compile(r"^liqo-\w+-reflection$")
    return [
        e for e in pod_events_since(lv, since) if rx.match((e.get("source") or {}).get("component") or "")
    ]


def error_lines(proc: VkbridgeProcess, since: int) -> list[str]:
    """ERROR lines of vkbridge's log, or klog E lines of Liqo's, after offset ``since``."""
    rx = re.compile(r"^E\d{4} |^\S+ ERROR ")
    return [line for line in proc.log_text()[since:].splitlines() if rx.match(line)]


# ---------------------------------------------------------------------------------------------- facts


def fact_vkbridge_adopts_liqo_shadowpods(lv: Live, shadows0: dict[str, Obj]) -> None:
    """vkbridge adopts the ShadowPods Liqo's VK made (no uid mark): same object and spec, labels untouched,
    plus its mark ``vkbridge.multicloud.io/local-pod-uid`` = the local pod's uid. Never replaced."""
    shadows, pods = lv.shadows(), lv.local_pods()
    for name, was in shadows0.items():
        now = shadows[name]
        assert _meta(now, "uid") == _meta(was, "uid") and now["spec"] == was["spec"], name
        assert _labels(now) == _labels(was), name
        assert _annotations(now) == {
            **_annotations(was),
            c.LOCAL_POD_UID_ANNOTATION: _meta(pods[name], "uid"),
        }
        assert _managers(now) <= {c.FIELD_MANAGER, "Python"}, _managers(
            now
        )  # "Python": the emulator's status
    assert "replacing it" not in (lv.proc.log_text() if lv.proc else "")


def fact_vkbridge_marks_and_prunes_liqo_copies(lv: Live) -> None:
    """vkbridge adopts the copies Liqo's VK made that a pod references (same objects: asserted by
    assert_referenced_copies_kept), adds its node mark to them, and deletes the copies no pod references
    (Liqo copies every Secret/ConfigMap of the namespace); the local objects stay."""
    mark = node_mark(lv.bundle.slug)
    assert all(_labels(o).get(mark) == "true" for o in lv.referenced_copies())
    assert all(_managers(o) == {c.FIELD_MANAGER} for o in lv.referenced_copies())

    def exactly_referenced() -> bool:
        want = lv.references()
        return (
            set(lv.copies("secrets")) == want["secrets"]
            and set(lv.copies("configmaps")) == want["configmaps"]
        )

    wait_until(exactly_referenced, 30, "vkbridge to leave exactly the referenced copies")
    assert "s-unused" not in lv.copies("secrets")
    assert get(lv.consumer, f"/api/v1/namespaces/{lv.ns}/secrets/s-unused") is not None


def fact_vkbridge_keeps_liqo_node_and_event_copies(
    lv: Live, node0: Obj, events0: dict[str, tuple[str, str]]
) -> None:
    """vkbridge keeps the Node as Liqo's VK left it (labels, taints, Liqo's virtual-kubelet annotations) and
    adds its own record of the metadata it owns. Of Liqo's local copies of pool Events it keeps each one it
    reflects too (same object) and deletes those of the pool scheduler's ``Scheduled`` Events, which it
    does not reflect. It writes no Event of its own about an adopted pod."""
    annotations = _annotations(lv.node())
    assert all(annotations.get(k) == _annotations(node0).get(k) for k in LIQO_NODE_ANNOTATIONS)
    assert VKBRIDGE_NODE_ANNOTATION in annotations
    now = lv.reflected_events()
    kept = {n: v for n, v in events0.items() if v[1] != "Scheduled"}
    assert kept and all(now.get(n) == v for n, v in kept.items()), "vkbridge dropped Liqo's Event copies"
    scheduled = {n for n, v in events0.items() if v[1] == "Scheduled"}
    wait_until(lambda: not scheduled & set(lv.reflected_events()), 30, "copies of Scheduled Events deleted")


def fact_liqo_rewrites_vkbridge_marks(lv: Live, shadows_vk: dict[str, Obj], since: dt.datetime) -> None:
    """Liqo's VK updates each ShadowPod whose annotations differ from the local pod's: vkbridge's uid mark
    goes (metadata only: same object, same spec, no restart), with one ``SuccessfulReflection`` Event per
    pod. Its apply of each copy (the same field manager, ``reflection.liqo.io``) drops vkbridge's node
    marks. It leaves vkbridge's Node annotation in place."""
    shadows = lv.shadows()
    for name, was in shadows_vk.items():
        now = shadows[name]
        assert _meta(now, "uid") == _meta(was, "uid") and now["spec"] == was["spec"], name
        assert c.LOCAL_POD_UID_ANNOTATION not in _annotations(now), name
    reflected = {
        e["involvedObject"]["name"]
        for e in pod_events_since(lv, since)
        if e.get("reason") == "SuccessfulReflection"
    }
    assert reflected == set(shadows_vk), f"SuccessfulReflection since the switch on {sorted(reflected)}"
    mark = node_mark(lv.bundle.slug)
    wait_until(
        lambda: all(mark not in _labels(o) for o in lv.referenced_copies()), 30, "Liqo to drop the marks"
    )
    assert VKBRIDGE_NODE_ANNOTATION in _annotations(lv.node())


def fact_liqo_copies_every_object(lv: Live) -> None:
    """Liqo's VK copies every Secret/ConfigMap of the namespace again, those vkbridge had deleted too."""
    want_cms = {*CONFIGMAPS, remote_configmap_name(c.ROOT_CA_CONFIGMAP, lv.bundle.consumer_id)}

    def everything() -> bool:
        return set(lv.copies("secrets")) == set(SECRETS) and set(lv.copies("configmaps")) == want_cms

    wait_until(everything, 60, "Liqo's VK to copy every Secret and ConfigMap")


def fact_one_status_field_manager(lv: Live) -> None:
    """Both write the local pod status (and the ``liqo.io/shadowPod`` label) as field manager
    ``reflection.liqo.io``: a pod's managedFields name one writer whichever implementation reflected it."""
    for name, pod in lv.local_pods().items():
        status = {
            m.get("manager") for m in _meta(pod, "managedFields") or [] if m.get("subresource") == "status"
        }
        assert status - CONTROL_PLANE_MANAGERS == {c.FIELD_MANAGER}, f"{name}: status written by {status}"


def fact_vkbridge_hands_over_at_once(sw: Switch) -> None:
    """vkbridge releases the leader Lease as it exits on SIGTERM, so Liqo's VK is elected at its next try
    and the Node never leaves Ready (Liqo's VK exits without waiting for its release, asserted nowhere:
    its successor then waits until the Lease expires, LeaseDuration 15 s, the switch figures show it)."""
    assert sw.old == "vkbridge" and sw.old_released, sw
    assert not sw.not_ready_seen, sw


def fact_local_pods_untouched(lv: Live, rvs: dict[str, str], impl: str) -> None:
    """Taking over a running pod writes nothing to the local pod (same resourceVersion)."""
    now = {n: _meta(p, "resourceVersion") for n, p in lv.local_pods().items()}
    assert now == rvs, f"{impl} wrote to local pods: {sorted(n for n in rvs if now.get(n) != rvs[n])}"


# ---------------------------------------------------------------------------------------------- the test


@pytest.mark.parametrize("strategy", ["recreate", "rolling"])
def test_live_switch_liqo_to_vkbridge_and_back_loses_no_pod(live: Live, strategy: str) -> None:
    lv = live
    lv.strategy = strategy
    # 1. Liqo's VK over a running workload.
    lv.first("liqo")
    lv.create_workload()
    before = lv.wait_running(5)
    fact_liqo_copies_every_object(lv)  # s-unused too (once it holds its shared-resources leader Lease)
    node0, lease0, copies0, shadows0 = lv.node(), lv.lease(), lv.copy_uids(), lv.shadows()
    rvs0 = {n: _meta(p, "resourceVersion") for n, p in lv.local_pods().items()}

    def both_kinds() -> dict[str, tuple[str, str]] | None:
        events = lv.reflected_events()
        reasons = {r for _, r in events.values()}
        return events if "Scheduled" in reasons and reasons - {"Scheduled"} else None

    events0 = wait_until(both_kinds, 60, "Liqo's VK to copy the pool's pod Events home")
    assert all(c.LOCAL_POD_UID_ANNOTATION not in _annotations(s) for s in shadows0.values())
    assert_one_shadow_per_pod(lv)

    # 2. Liqo's VK -> vkbridge on the same Node.
    assert lv.proc is not None
    sw, t1 = switch_keeping_every_pod(lv, "vkbridge", "vkbridge", before, copies0, node0, lease0)
    fact_vkbridge_adopts_liqo_shadowpods(lv, shadows0)
    fact_vkbridge_marks_and_prunes_liqo_copies(lv)
    fact_vkbridge_keeps_liqo_node_and_event_copies(lv, node0, events0)
    # After a long pause the node lifecycle controller marked the pods not Ready and vkbridge wrote Ready back.
    if not heartbeats_paused(lv, sw):
        fact_local_pods_untouched(lv, rvs0, "vkbridge")
    assert not reflection_events_since(lv, t1), "vkbridge wrote Events about the pods it adopted"
    assert lv.proc is not None and not error_lines(lv.proc, 0), error_lines(lv.proc, 0)

    # 3. Under vkbridge: a new pod is reflected; an old pod (Liqo's ShadowPod and copies) deleted is cleaned
    #    up, its ShadowPod and the copies only it referenced (s-b, cm-b).
    lv.create_pod("new-vk", secret="s-new", configmap="cm-a")
    under_vk = lv.wait_running(6)
    lv.delete_pod("refs-b")
    del under_vk["refs-b"]
    wait_until(lambda: "s-b" not in lv.copies("secrets") and "cm-b" not in lv.copies("configmaps"), 30,
               "vkbridge to delete the copies only refs-b referenced")  # fmt: skip
    copies1, shadows1 = lv.copy_uids(), lv.shadows()
    assert set(copies1["secrets"]) == lv.references()["secrets"]
    fact_one_status_field_manager(lv)
    rvs1 = {n: _meta(p, "resourceVersion") for n, p in lv.local_pods().items()}

    # 4. vkbridge -> Liqo's VK: every pod survives, the one vkbridge created too.
    sw, t2 = switch_keeping_every_pod(lv, "liqo", "Liqo's VK", under_vk, copies1, node0, lease0)
    fact_vkbridge_hands_over_at_once(sw)
    fact_liqo_rewrites_vkbridge_marks(lv, shadows1, t2)
    fact_liqo_copies_every_object(lv)
    fact_local_pods_untouched(lv, rvs1, "Liqo's VK")
    assert lv.proc is not None
    print(f"Liqo's VK error lines after the switch back: {error_lines(lv.proc, 0)[:5]}")

    # 5. Under Liqo's VK: a new pod is reflected; the pod vkbridge created, deleted, is cleaned up.
    lv.create_pod("new-liqo", secret="s-a", configmap="cm-a")
    lv.wait_running(6)
    lv.delete_pod("new-vk")
    fact_one_status_field_manager(lv)
    assert_referenced_copies_kept(lv, copies1)
    assert_one_shadow_per_pod(lv)
    for s in lv.switches:
        print(
            f"{strategy}: {s.old} -> {s.new}: elected {s.elected_s:.1f}s (old released: {s.old_released}), "
            f"node Ready {s.node_ready_s:.1f}s, every pod taken over and Ready {s.pods_ready_s:.1f}s after "
            f"SIGTERM; heartbeat gap {s.heartbeat_gap_s:.1f}s; node Ready was {sorted(set(s.not_ready_seen))}"
        )
