"""vkbridge.grant: pod requests as Kubernetes computes them, and an admission ledger that never over-admits.

`pod_requests` was also checked against k8s.io/component-helpers v0.36.3 `resource.PodRequests` on 6,000
random pods (containers, sidecar and plain init containers, overhead, pod-level resources): no difference.
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

from vkbridge.grant import (
    Admission,
    DecisionKind,
    Grant,
    add_resources,
    max_resources,
    parse_resource_list,
    pod_requests,
    shared_charge,
    sort_resources,
)
from vkbridge.quantity import QuantityError, parse_quantity

F = Fraction
GI = 2**30
MI = 2**20
DEFAULT_GRANT = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}


def container(requests: dict[str, str] | None = None, *, sidecar: bool = False) -> dict[str, Any]:
    c: dict[str, Any] = {"name": "c", "image": "busybox"}
    if requests is not None:
        c["resources"] = {"requests": requests}
    if sidecar:
        c["restartPolicy"] = "Always"
    return c


def pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {"spec": {"containers": containers, "initContainers": init or [], **spec}}


# ---- pod_requests: table -----------------------------------------------------------------------------------

POD_CASES: list[tuple[str, dict[str, Any], dict[str, Fraction]]] = [
    (
        "no requests: zero cpu and memory, one pod",
        pod([container()]),
        {"cpu": F(0), "memory": F(0), "pods": F(1)},
    ),
    ("empty pod", {}, {"cpu": F(0), "memory": F(0), "pods": F(1)}),
    (
        "containers are summed",
        pod([container({"cpu": "500m", "memory": "256Mi"}), container({"cpu": "1500m", "memory": "1Gi"})]),
        {"cpu": F(2), "memory": F(GI + 256 * MI), "pods": F(1)},
    ),
    (
        "an init container larger than the containers wins per resource",
        pod([container({"cpu": "1", "memory": "1Gi"})], [container({"cpu": "3", "memory": "10Mi"})]),
        {"cpu": F(3), "memory": F(GI), "pods": F(1)},
    ),
    (
        "init containers are max'd with each other, not summed",
        pod([container({"cpu": "100m"})], [container({"cpu": "1"}), container({"cpu": "2"})]),
        {"cpu": F(2), "memory": F(0), "pods": F(1)},
    ),
    (
        "a sidecar adds to the containers",
        pod([container({"cpu": "1"})], [container({"cpu": "500m"}, sidecar=True)]),
        {"cpu": F(3, 2), "memory": F(0), "pods": F(1)},
    ),
    (
        # KEP-753: init i needs its own requests plus every earlier sidecar's.
        "a plain init container after a sidecar needs both",
        pod([container({"cpu": "1"})], [container({"cpu": "1"}, sidecar=True), container({"cpu": "3"})]),
        {"cpu": F(4), "memory": F(0), "pods": F(1)},
    ),
    (
        "a plain init container before a sidecar does not add the sidecar",
        pod([container({"cpu": "1"})], [container({"cpu": "3"}), container({"cpu": "1"}, sidecar=True)]),
        {"cpu": F(3), "memory": F(0), "pods": F(1)},
    ),
    (
        "restartPolicy other than Always is a plain init container",
        pod([container({"cpu": "1"})], [{**container({"cpu": "500m"}), "restartPolicy": "OnFailure"}]),
        {"cpu": F(1), "memory": F(0), "pods": F(1)},
    ),
    (
        "overhead is added",
        pod([container({"cpu": "1", "memory": "1Gi"})], overhead={"cpu": "250m", "memory": "120Mi"}),
        {"cpu": F(5, 4), "memory": F(GI + 120 * MI), "pods": F(1)},
    ),
    (
        "pod-level requests replace cpu and memory, not other resources",
        pod(
            [container({"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"})],
            resources={"requests": {"cpu": "3", "memory": "2Gi", "nvidia.com/gpu": "5"}},
        ),
        {"cpu": F(3), "memory": F(2 * GI), "nvidia.com/gpu": F(1), "pods": F(1)},
    ),
    (
        "pod-level hugepages are supported too",
        pod([container({"hugepages-2Mi": "2Mi"})], resources={"requests": {"hugepages-2Mi": "8Mi"}}),
        {"cpu": F(0), "memory": F(0), "hugepages-2Mi": F(8 * MI), "pods": F(1)},
    ),
    (
        "extended resources are summed like any other",
        pod([container({"nvidia.com/gpu": "1"}), container({"nvidia.com/gpu": "2"})]),
        {"cpu": F(0), "memory": F(0), "nvidia.com/gpu": F(3), "pods": F(1)},
    ),
    (
        "limits are not requests (the API server defaults requests from limits before we see the pod)",
        pod([{"name": "c", "resources": {"limits": {"cpu": "2"}}}]),
        {"cpu": F(0), "memory": F(0), "pods": F(1)},
    ),
]


@pytest.mark.parametrize(("title", "the_pod", "expected"), POD_CASES, ids=[c[0] for c in POD_CASES])
def test_pod_requests(title: str, the_pod: dict[str, Any], expected: dict[str, Fraction]) -> None:
    assert pod_requests(the_pod) == expected


def test_pod_requests_accepts_numbers_from_handmade_yaml() -> None:
    assert pod_requests(pod([container({"cpu": 2, "memory": 0.5})]))["cpu"] == 2  # type: ignore[dict-item]


@pytest.mark.parametrize("bad", ["lots", "1x", True, None, [1]])
def test_malformed_quantity_names_the_field(bad: object) -> None:
    with pytest.raises(QuantityError, match=r"spec\.containers\[0\]\.resources\.requests\.cpu"):
        pod_requests(pod([container({"cpu": bad})]))  # type: ignore[dict-item]


# ---- decisions and messages --------------------------------------------------------------------------------


def requests(**kv: str) -> dict[str, Fraction]:
    return {name.replace("_", "-"): parse_quantity(v) for name, v in kv.items()}


def test_messages_exactly() -> None:
    ledger = Admission(Grant.from_resource_list({"cpu": "2500m", "memory": "1536Mi", "pods": "10"}))
    assert ledger.admit("ns/a", requests(cpu="2", memory="1Gi", pods="1")).ok
    missing = ledger.admit("ns/gpu", requests(cpu="100m", nvidia_com_gpu="1"))
    assert missing.kind is DecisionKind.MISSING_RESOURCE
    assert missing.message == "the pool grant has no nvidia-com-gpu"
    gpu = ledger.admit("ns/gpu", {"cpu": F(1, 10), "nvidia.com/gpu": F(1), "pods": F(1)})
    assert gpu.message == "the pool grant has no nvidia.com/gpu"
    both = ledger.check({"hugepages-2Mi": F(2 * MI), "nvidia.com/gpu": F(1), "ephemeral-storage": F(1)})
    assert both.message == "the pool grant has no ephemeral-storage, hugepages-2Mi, nvidia.com/gpu"
    big = ledger.admit("ns/big", requests(cpu="2", memory="1Gi", pods="1"))
    assert big.kind is DecisionKind.INSUFFICIENT
    assert (
        big.message
        == "does not fit in the pool grant: cpu requested 2 free 500m; memory requested 1Gi free 512Mi"
    )
    assert [s.resource for s in big.shortfalls] == ["cpu", "memory"]
    assert not ledger.is_admitted("ns/big")


def test_missing_wins_over_insufficient_and_zero_requests_are_not_checked() -> None:
    ledger = Admission(Grant.from_resource_list({"cpu": "1", "pods": "1"}))
    decision = ledger.check({"cpu": F(5), "nvidia.com/gpu": F(1)})
    assert decision.kind is DecisionKind.MISSING_RESOURCE
    # nvidia.com/gpu: 0 and memory: 0 are not requests of anything
    assert ledger.check({"cpu": F(1), "memory": F(0), "nvidia.com/gpu": F(0), "pods": F(1)}).ok


def test_empty_grant_admits_nothing() -> None:
    ledger = Admission()
    decision = ledger.admit("ns/p", pod_requests(pod([container()])))
    assert decision.kind is DecisionKind.MISSING_RESOURCE
    assert decision.message == "the pool grant has no pods"


def test_pods_count_is_enforced() -> None:
    ledger = Admission(Grant.from_resource_list({"cpu": "4", "memory": "1Gi", "pods": "2"}))
    assert ledger.admit("a", pod_requests(pod([container()]))).ok
    assert ledger.admit("b", pod_requests(pod([container()]))).ok
    third = ledger.admit("c", pod_requests(pod([container()])))
    assert third.message == "does not fit in the pool grant: pods requested 1 free 0"


def test_admit_is_idempotent_and_keeps_the_first_charge() -> None:
    ledger = Admission(Grant.from_resource_list(DEFAULT_GRANT))
    first = requests(cpu="1", pods="1")
    assert ledger.admit("ns/p", first).ok
    used = ledger.used()
    assert ledger.admit("ns/p", first).ok
    assert ledger.admit("ns/p", requests(cpu="3", pods="1")).ok  # in-place resize: the ShadowPod is frozen
    assert ledger.used() == used
    assert ledger.charge("ns/p") == first
    assert len(ledger) == 1


def test_pods_of_one_template_share_one_read_only_charge() -> None:
    ledger = Admission(Grant.from_resource_list(DEFAULT_GRANT))
    for i in range(3):
        assert ledger.admit(f"ns/p{i}", requests(cpu="100m", memory="64Mi", pods="1")).ok
    ledger.force_charge("ns/q", requests(pods="1", memory="64Mi", cpu="100m"))  # same charge, other order
    assert shared_charge(requests(cpu="100m", memory="64Mi", pods="1")) is shared_charge(
        requests(pods="1", cpu="100m", memory="64Mi")
    )
    with pytest.raises(TypeError):
        shared_charge(requests(pods="1"))["pods"] = Fraction(2)  # type: ignore[index]
    copy = ledger.charge("ns/p0")
    assert copy == requests(cpu="100m", memory="64Mi", pods="1")
    assert copy is not None
    copy["cpu"] = Fraction(99)  # the caller's own dict: nobody else's charge moves
    assert ledger.charge("ns/p1") == requests(cpu="100m", memory="64Mi", pods="1")
    assert ledger.used() == requests(cpu="400m", memory="256Mi", pods="4")
    assert ledger.release("ns/p0") and ledger.used() == requests(cpu="300m", memory="192Mi", pods="3")


def test_release() -> None:
    ledger = Admission(Grant.from_resource_list(DEFAULT_GRANT))
    before = ledger.free()
    assert ledger.admit("ns/p", requests(cpu="1", memory="1Gi", pods="1")).ok
    assert ledger.release("ns/p") is True
    assert ledger.release("ns/p") is False
    assert ledger.free() == before
    assert ledger.used() == {}


def test_smaller_grant_never_evicts_and_new_pods_wait() -> None:
    ledger = Admission(Grant.from_resource_list(DEFAULT_GRANT))
    assert ledger.admit("ns/a", requests(cpu="3", memory="6Gi", pods="1")).ok
    ledger.set_grant(Grant.from_resource_list({"cpu": "2", "memory": "4Gi", "pods": "110"}))
    assert ledger.is_admitted("ns/a")
    assert ledger.free() == {"cpu": F(-1), "memory": F(-2 * GI), "pods": F(109)}
    waiting = ledger.admit("ns/b", requests(cpu="100m", pods="1"))
    assert waiting.message == "does not fit in the pool grant: cpu requested 100m free -1"
    # a pod that asks for nothing over-used still fits, as on a real node
    assert ledger.admit("ns/c", requests(memory="0", pods="1")).ok
    # a resource dropped from the grant shows as negative free while still used
    ledger.set_grant(Grant.from_resource_list({"cpu": "8", "pods": "110"}))
    assert ledger.free()["memory"] == F(-6 * GI)
    ledger.release("ns/a")
    assert "memory" not in ledger.free()


def test_negative_requests_are_refused() -> None:
    with pytest.raises(ValueError, match="negative"):
        Admission(Grant.from_resource_list(DEFAULT_GRANT)).admit("x", {"cpu": F(-1)})


def test_grant_parsing() -> None:
    grant = Grant.from_resource_list(DEFAULT_GRANT)
    assert grant.get("memory") == 8 * GI
    assert "cpu" in grant and "nvidia.com/gpu" not in grant
    assert sorted(grant) == sorted(DEFAULT_GRANT)
    assert Grant.from_resource_list(None) == Grant()
    with pytest.raises(QuantityError, match=r"status\.resources\.cpu"):
        Grant.from_resource_list({"cpu": "four"})
    with pytest.raises(TypeError):
        grant.resources["cpu"] = F(1)  # type: ignore[index]


def test_sort_resources_puts_the_base_set_first() -> None:
    assert sort_resources(["nvidia.com/gpu", "pods", "a", "memory", "cpu", "ephemeral-storage"]) == [
        "cpu",
        "memory",
        "ephemeral-storage",
        "pods",
        "a",
        "nvidia.com/gpu",
    ]


# ---- laws --------------------------------------------------------------------------------------------------

NAMES = ["cpu", "memory", "pods", "ephemeral-storage", "nvidia.com/gpu"]
amounts = st.integers(min_value=0, max_value=10**6).map(lambda n: Fraction(n, 1000))
resource_lists = st.dictionaries(st.sampled_from(NAMES), amounts, max_size=5)


@given(resource_lists, resource_lists, resource_lists)
def test_add_and_max_laws(a: dict[str, Fraction], b: dict[str, Fraction], c: dict[str, Fraction]) -> None:
    assert add_resources(a, b) == add_resources(b, a)
    assert add_resources(add_resources(a, b), c) == add_resources(a, add_resources(b, c))
    assert add_resources(a, {}) == a
    assert max_resources(a, b) == max_resources(b, a)
    assert max_resources(max_resources(a, b), c) == max_resources(a, max_resources(b, c))
    assert max_resources(a, a) == a
    m = max_resources(a, b)
    for name in set(a) | set(b):
        assert m[name] == max(a.get(name, m[name]), b.get(name, m[name]))
        assert m[name] >= a.get(name, F(0)) and m[name] >= b.get(name, F(0))


def _as_strings(rl: dict[str, Fraction]) -> dict[str, str]:
    return {k: f"{v.numerator * (1000 // v.denominator)}m" for k, v in rl.items()}


container_lists = st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]), amounts, max_size=3)
containers_st = st.lists(container_lists, max_size=4)
init_st = st.lists(st.tuples(container_lists, st.booleans()), max_size=4)


@settings(max_examples=60)
@given(containers_st, init_st, st.data())
def test_pod_requests_laws(
    regular: list[dict[str, Fraction]], inits: list[tuple[dict[str, Fraction], bool]], data: st.DataObject
) -> None:
    spec_containers = [container(_as_strings(r)) for r in regular]
    spec_inits = [container(_as_strings(r), sidecar=s) for r, s in inits]
    got = pod_requests(pod(spec_containers, spec_inits))
    assert got["pods"] == 1
    total: dict[str, Fraction] = {}
    for r in regular:
        total = add_resources(total, r)
    for r, sidecar in inits:
        if sidecar:
            total = add_resources(total, r)
    for name, value in total.items():
        assert got[name] >= value  # at least every long-running container
    for r, _ in inits:
        for name, value in r.items():
            assert got[name] >= value  # at least any single init container
    shuffled = data.draw(st.permutations(spec_containers))
    assert pod_requests(pod(shuffled, spec_inits)) == got  # regular containers' order does not matter
    if not inits:
        assert got == {"cpu": F(0), "memory": F(0), **total, "pods": F(1)}


def test_parse_resource_list() -> None:
    assert parse_resource_list({"cpu": "1", "memory": "1Mi"}) == {"cpu": F(1), "memory": F(MI)}
    assert parse_resource_list(None) == {}


class LedgerMachine(RuleBasedStateMachine):
    """Random admits, releases and re-admits: used is the sum of admitted charges, never over the grant."""

    keys = Bundle("keys")

    def __init__(self) -> None:
        super().__init__()
        self.grant = Grant({"cpu": F(4), "memory": F(8 * GI), "pods": F(5), "ephemeral-storage": F(20 * GI)})
        self.ledger = Admission(self.grant)
        self.model: dict[str, dict[str, Fraction]] = {}

    @rule(
        target=keys,
        key=st.text(alphabet="abcdef", min_size=1, max_size=3),
        cpu=st.integers(0, 3000),
        mem=st.integers(0, 4096),
        gpu=st.integers(0, 1),
    )
    def admit(self, key: str, cpu: int, mem: int, gpu: int) -> str:
        req = {"cpu": F(cpu, 1000), "memory": F(mem * MI), "pods": F(1), "nvidia.com/gpu": F(gpu)}
        free_before = self.ledger.free()
        decision = self.ledger.admit(key, req)
        if key in self.model:
            assert decision.ok and self.ledger.free() == free_before
        elif decision.ok:
            self.model[key] = req
            assert gpu == 0
        else:
            assert self.ledger.free() == free_before
            fits = all(v <= free_before.get(n, F(0)) for n, v in req.items() if v > 0 and n in self.grant)
            assert (gpu == 1) or not fits
            assert decision.kind is (DecisionKind.MISSING_RESOURCE if gpu else DecisionKind.INSUFFICIENT)
        return key

    @rule(key=keys)
    def release(self, key: str) -> None:
        assert self.ledger.release(key) == (key in self.model)
        self.model.pop(key, None)

    @rule(key=keys)
    def admit_release_round_trip(self, key: str) -> None:
        if key in self.model:
            return
        before = (self.ledger.free(), self.ledger.used())
        if self.ledger.admit(key, {"cpu": F(1, 1000), "pods": F(1)}).ok:
            self.ledger.release(key)
        assert (self.ledger.free(), self.ledger.used()) == before

    @invariant()
    def books_balance(self) -> None:
        total: dict[str, Fraction] = {}
        for charge in self.model.values():
            total = add_resources(total, charge)
        assert self.ledger.used() == {k: v for k, v in total.items() if v}
        assert sorted(self.ledger.admitted()) == sorted(self.model)
        for name, granted in self.grant.resources.items():
            assert self.ledger.used().get(name, F(0)) <= granted  # never over-admit
            assert self.ledger.free()[name] == granted - total.get(name, F(0))


TestLedger = LedgerMachine.TestCase
TestLedger.settings = settings(max_examples=40, stateful_step_count=30, deadline=None)


# ---- the pod reflector's ledger bookkeeping (issue 15 items 1-5, 8): pure, no API ---------------------------


def local_pod(name: str, uid: str, spec: dict[str, Any], phase: str = "Running") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "team",
            "uid": uid,
            "creationTimestamp": "2026-12-01T10:00:00Z",
        },
        "spec": {"nodeName": "pool", **spec},
        "status": {"phase": phase},
    }


def cpu_pod(name: str, cpu: str, uid: str | None = None, phase: str = "Running") -> dict[str, Any]:
    return local_pod(name, uid or f"uid-{name}", {"containers": [container({"cpu": cpu})]}, phase)


def shadow_of(local: dict[str, Any], *, phase: str = "Running", annotate: bool = True) -> dict[str, Any]:
    """The ShadowPod as vkbridge forges it, seen through the pair cache's view (what a restart finds)."""
    from reflectors.forge import constants as c
    from reflectors.forge.shadowpod import forge_shadowpod
    from reflectors.pairs import shadowpod_view

    shadow = forge_shadowpod(
        local,
        remote_namespace="team-remote",
        local_cluster_id="c-local",
        remote_cluster_id="c-pool",
        node_name="pool",
        apiserver_support="disabled",
        offloading_patch=None,
        existing=None,
    )
    annotations = shadow["metadata"].setdefault("annotations", {})
    if annotate:
        annotations[c.LOCAL_POD_UID_ANNOTATION] = local["metadata"]["uid"]
    else:
        annotations.pop(c.LOCAL_POD_UID_ANNOTATION, None)  # made by Liqo's VK or an older vkbridge
    shadow["metadata"]["uid"] = "shadow-" + local["metadata"]["uid"]
    shadow["status"] = {"phase": phase}
    return shadowpod_view(shadow)


def remote_of(phase: str) -> dict[str, Any]:
    return {"metadata": {"name": "x", "uid": "remote"}, "status": {"phase": phase}}


class Books:
    """The pod reflector's charges over a real ledger (no context, no I/O)."""

    def __init__(self, grant: dict[str, str] | None = None) -> None:
        from reflectors.charges import PodCharges

        self.admission = Admission(Grant.from_resource_list(grant or DEFAULT_GRANT))
        self.freed = 0  # times the ledger told its waiters a charge was freed
        self.admission.on_freed(self._on_freed)
        self.pods = PodCharges(self.admission)

    def _on_freed(self) -> None:
        self.freed += 1

    def admit(self, local: dict[str, Any]) -> bool:
        key = f"team/{local['metadata']['name']}"
        return self.pods.admit(key, local, pod_requests(local)).ok

    def restart_finds(self, local: dict[str, Any] | None, shadow: dict[str, Any], remote: Any = None) -> None:
        self.pods.account(f"team/{shadow['metadata']['name']}", local, shadow, remote)

    def used(self, name: str) -> Fraction:
        return self.admission.used().get(name, F(0))


RESTART_PODS = [
    pytest.param({"containers": [container({"cpu": "1500m", "memory": "1Gi"})]}, id="containers"),
    pytest.param(
        {
            "containers": [container({"cpu": "1"})],
            "initContainers": [container({"cpu": "500m"}, sidecar=True), container({"cpu": "3"})],
        },
        id="sidecar-and-init-containers",
    ),
    pytest.param(
        {
            "containers": [container({"cpu": "100m", "memory": "64Mi"})],
            "resources": {"requests": {"cpu": "3", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
        },
        id="pod-level-resources",
    ),
    pytest.param(
        {"containers": [container({"cpu": "1"})], "runtimeClassName": "kata", "overhead": {"cpu": "250m"}},
        id="runtime-class-overhead",
    ),
]


@pytest.mark.parametrize("spec", RESTART_PODS)
def test_charge_after_restart_equals_charge_at_admission(spec: dict[str, Any]) -> None:
    local = local_pod("web", "uid-web", spec)
    before = Books()
    assert before.admit(local)
    after = Books()  # a new process: the ledger is rebuilt from the ShadowPod the pool has
    after.restart_finds(local, shadow_of(local))
    assert after.admission.charge("uid-web") == before.admission.charge("uid-web") == pod_requests(local)
    assert after.pods.charged == before.pods.charged == {"team/web": "uid-web"}


def test_pod_level_resources_travel_to_the_shadowpod() -> None:
    spec = {
        "containers": [container({"cpu": "100m"})],
        "resources": {"requests": {"cpu": "3", "memory": "2Gi"}, "limits": {"memory": "2Gi"}},
    }
    local = local_pod("web", "uid-web", spec)
    assert shadow_of(local)["spec"]["pod"]["resources"] == local["spec"]["resources"]


def test_full_grant_found_at_restart_makes_a_new_pod_wait() -> None:
    books = Books()
    for i in range(4):
        pod_i = cpu_pod(f"p{i}", "1")
        books.restart_finds(pod_i, shadow_of(pod_i))
    assert books.used("cpu") == 4
    assert not books.admit(cpu_pod("new", "1"))
    assert books.admission.check(pod_requests(cpu_pod("new", "1"))).message == (
        "does not fit in the pool grant: cpu requested 1 free 0"
    )


def test_restart_keys_charges_by_recorded_uid_else_by_the_local_pod_uid() -> None:
    books = Books()
    web = cpu_pod("web", "1", uid="uid-now")
    books.restart_finds(web, shadow_of(cpu_pod("web", "1", uid="uid-before")))  # a stale ShadowPod
    assert books.pods.charged == {"team/web": "uid-before"}
    job = cpu_pod("job", "1", uid="uid-job")
    books.restart_finds(job, shadow_of(job, annotate=False))
    assert books.pods.charged["team/job"] == "uid-job"
    assert books.used("cpu") == 2


def test_same_name_replacement_does_not_inherit_its_predecessors_charge() -> None:
    books = Books({**DEFAULT_GRANT, "cpu": "2"})
    assert books.admit(cpu_pod("web-0", "1", uid="uid-a"))
    assert books.admit(cpu_pod("web-0", "1", uid="uid-a"))  # the same pod again: still one charge
    assert books.used("cpu") == 1
    bigger = cpu_pod("web-0", "2", uid="uid-b")  # force-deleted and re-created: its ShadowPod is gone
    assert books.admit(bigger)
    assert books.admission.admitted() == ["uid-b"] and books.used("cpu") == 2


def test_grant_that_starts_limiting_pods_counts_every_admitted_pod() -> None:
    no_pod_count = {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "20Gi"}
    books = Books(no_pod_count)
    for i in range(18):
        assert books.admit(cpu_pod(f"p{i}", "10m")), f"p{i} waits: an unlisted pod count is no limit"
    assert books.used("pods") == 18
    assert "pods" not in books.admission.free()
    books.admission.set_grant(Grant.from_resource_list({**no_pod_count, "pods": "10"}))
    assert not books.admit(cpu_pod("p18", "10m"))
    assert books.admission.check(pod_requests(cpu_pod("p18", "10m"))).message == (
        "does not fit in the pool grant: pods requested 1 free -8"
    )
    assert books.admission.free()["pods"] == -8


def test_empty_grant_still_admits_nothing_even_without_a_pod_count() -> None:
    assert (
        Admission().check({"cpu": F(0), "memory": F(0), "pods": F(1)}).message == "the pool grant has no pods"
    )


FINISHED = [
    pytest.param("Succeeded", "Running", None, id="local-pod-succeeded"),
    pytest.param("Running", "Failed", None, id="shadowpod-failed"),
    pytest.param("Running", "Running", "Succeeded", id="remote-pod-succeeded"),
    pytest.param("Running", "Running", "Failed", id="remote-pod-failed"),
]


@pytest.mark.parametrize(("local_phase", "shadow_phase", "remote_phase"), FINISHED)
def test_finished_pod_holds_no_share_at_restart_or_after(
    local_phase: str, shadow_phase: str, remote_phase: str | None
) -> None:
    live = cpu_pod("job", "1")
    finished = cpu_pod("job", "1", phase=local_phase)
    shadow = shadow_of(live, phase=shadow_phase)
    remote = remote_of(remote_phase) if remote_phase else None
    at_restart = Books()
    at_restart.restart_finds(finished, shadow, remote)
    assert at_restart.admission.used() == {} and at_restart.pods.charged == {}
    running = Books()
    running.restart_finds(live, shadow_of(live))
    assert running.used("cpu") == 1
    running.restart_finds(finished, shadow, remote)  # the pod finishes while we run
    assert running.admission.used() == {} and running.pods.charged == {}


def test_shadowpod_being_deleted_or_gone_holds_no_share() -> None:
    from reflectors.charges import holds_share

    pod_ = cpu_pod("web", "1")
    shadow = shadow_of(pod_)
    assert holds_share(pod_, shadow, remote_of("Running"))
    deleting = {**shadow, "metadata": {**shadow["metadata"], "deletionTimestamp": "2026-12-01T10:00:00Z"}}
    assert not holds_share(pod_, deleting, None)
    books = Books()
    books.restart_finds(pod_, shadow)
    books.pods.release_gone("team/web", shadow)
    assert books.admission.used() == {}


def test_shadowpod_whose_local_pod_is_gone_holds_its_share_until_deleted() -> None:
    gone = cpu_pod("web", "1", uid="uid-gone")
    books = Books()
    books.restart_finds(None, shadow_of(gone))  # the pool counts it until we delete it
    books.restart_finds(None, shadow_of(cpu_pod("old", "1"), annotate=False))
    assert books.pods.charged == {"team/web": "uid-gone", "team/old": "team/old"}
    assert books.used("cpu") == 2
    deleting = shadow_of(gone)
    deleting["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    books.restart_finds(None, deleting)
    assert books.pods.charged == {"team/old": "team/old"} and books.used("cpu") == 1


def test_unpaired_namespace_releases_its_pods_charges() -> None:
    books = Books()
    for i in range(4):
        assert books.admit(cpu_pod(f"p{i}", "1"))
    other = cpu_pod("elsewhere", "1")
    books.pods.charged["other/elsewhere"] = "uid-elsewhere"  # another namespace's pod keeps its share
    books.admission.force_charge("uid-elsewhere", pod_requests(other))
    books.pods.release_namespace("team")
    assert books.pods.charged == {"other/elsewhere": "uid-elsewhere"}
    assert books.used("cpu") == 1


def test_released_pod_leaves_the_wait_list_and_wakes_the_others() -> None:
    books = Books({**DEFAULT_GRANT, "cpu": "1"})
    assert books.admit(cpu_pod("a", "1"))
    assert not books.admit(cpu_pod("b", "1")) and not books.admit(cpu_pod("c", "1"))
    assert set(books.admission.waiters) == {"team/b", "team/c"} and books.freed == 0
    books.pods.release("team/a")
    assert books.freed == 1  # the waiters are told, and b and c still wait for their turn
    assert set(books.admission.waiters) == {"team/b", "team/c"}
    books.pods.release("team/b")  # a waiting pod deleted: leaves the list, frees nothing
    assert set(books.admission.waiters) == {"team/c"} and books.freed == 1
    assert books.admit(cpu_pod("c", "1")) and dict(books.admission.waiters) == {}  # admitted: waits no more


def test_waiters_get_their_chance_oldest_first_and_leave_with_their_namespace() -> None:
    ledger = Admission(Grant.from_resource_list(DEFAULT_GRANT))
    ledger.wait("team/young", "2026-12-01T10:00:02Z")
    ledger.wait("team/old", "2026-12-01T10:00:01Z")
    ledger.wait("other/old", "2026-12-01T10:00:01Z")
    assert ledger.waiting_oldest_first() == ["other/old", "team/old", "team/young"]
    ledger.stop_waiting_under("team/")
    assert ledger.waiting_oldest_first() == ["other/old"]


def remote_pod_for(phase: str, owner: str | None) -> dict[str, Any]:
    """The remote pod of ``team/web`` as the pair cache keeps it, controlled by the ShadowPod ``owner``."""
    refs = [{"kind": "ShadowPod", "name": "web", "uid": owner, "controller": True}] if owner else []
    meta = {"name": "web", "namespace": "team-remote", "uid": "remote-web", "ownerReferences": refs}
    return {"metadata": meta, "status": {"phase": phase}}


@pytest.mark.parametrize("charged_before", [False, True], ids=["new", "charged"])
@pytest.mark.parametrize(
    "remote_state",
    [None, ("Running", "own"), ("Succeeded", "own"), ("Failed", None), ("Succeeded", "earlier")],
)
@pytest.mark.parametrize("shadow_state", ["annotated", "unannotated", "failed", "deleting"])
@pytest.mark.parametrize("local_phase", [None, "Running", "Succeeded", "Failed"])
def test_a_shadowpod_event_charges_what_reading_both_pods_would(
    local_phase: str | None,
    shadow_state: str,
    remote_state: tuple[str, str | None] | None,
    charged_before: bool,
) -> None:
    """On a ShadowPod event the engine knows whether its pods finished from their feeds (`FinishedPods`)
    and reads the local pod only to key or make a charge: the ledger ends as `account` with both pods
    read leaves it, and a charged pod whose ShadowPod changed is not read at all."""
    from reflectors.charges import FinishedPods
    from reflectors.forge.shadowpod import remote_pod_of

    live = cpu_pod("web", "1")
    local = None if local_phase is None else cpu_pod("web", "1", phase=local_phase)
    shadow = shadow_of(live, phase="Failed" if shadow_state == "failed" else "Running",
                       annotate=shadow_state != "unannotated")  # fmt: skip
    if shadow_state == "deleting":
        shadow["metadata"]["deletionTimestamp"] = "2026-12-01T10:00:00Z"
    remote = None
    if remote_state is not None:
        phase, whose = remote_state
        remote = remote_pod_for(
            phase, {"own": shadow["metadata"]["uid"], "earlier": "shadow-earlier"}.get(whose or "")
        )
    by_reading, by_feeds = Books(), Books()
    if charged_before:
        for books in (by_reading, by_feeds):
            books.restart_finds(live, shadow_of(live))
    by_reading.pods.account("team/web", local, shadow, remote_pod_of(shadow, remote))

    local_done, remote_done = FinishedPods(), FinishedPods()
    for feed, obj in ((local_done, local), (remote_done, remote)):
        if obj is not None:
            feed.track("ADDED", None, obj)
    reads: list[None] = []

    def read_local() -> dict[str, Any] | None:
        reads.append(None)
        return local

    finished = local_done.finished("team/web") or remote_done.finished_for("team-remote/web", shadow)
    by_feeds.pods.account_seen("team/web", shadow, finished=finished, read_local=read_local)
    assert by_feeds.pods.charged == by_reading.pods.charged
    assert by_feeds.admission.used() == by_reading.admission.used()
    assert by_feeds.admission.admitted() == by_reading.admission.admitted()
    assert len(reads) <= 1
    if charged_before and shadow_state == "annotated":
        assert reads == []


def test_finished_pods_follow_their_feed() -> None:
    from reflectors.charges import FinishedPods

    feed = FinishedPods()
    running, done = remote_pod_for("Running", "shadow-1"), remote_pod_for("Succeeded", "shadow-1")
    feed.track("ADDED", None, running)
    assert not feed.finished("team-remote/web")
    feed.track("MODIFIED", running, done)
    assert feed.finished("team-remote/web")
    assert feed.finished_for("team-remote/web", {"metadata": {"uid": "shadow-1"}})
    assert not feed.finished_for("team-remote/web", {"metadata": {"uid": "shadow-2"}})  # an earlier pod's
    feed.track("MODIFIED", done, running)
    assert not feed.finished("team-remote/web")
    feed.track("MODIFIED", running, done)
    feed.track("DELETED", done, None)
    assert not feed.finished("team-remote/web")
    unowned = remote_pod_for("Failed", None)
    feed.track("ADDED", None, unowned)
    assert feed.finished_for("team-remote/web", {"metadata": {"uid": "any"}})
