"""Reference counting of referenced Secrets/ConfigMaps (GUIDE §8, DESIGN §1 and §3 invariants 2, 3, 7).

Two parts: the pure index (reflectors.refcount), then the ConfigurationReflector driven end to end
against a small in-memory API (a fake client at the seam; the real Kubernetes API is exercised by
tests/integration/test_configuration.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import dataclasses
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from e2e.waiting import eventually
from reflectors.configuration import FOREIGN, ConfigurationReflector, ConfigurationWriteError
from reflectors.forge import constants as c
from reflectors.forge.configuration import missing_message
from reflectors.forge.references import Reference
from reflectors.generic import PoolUnavailable
from reflectors.refcount import SHARED_SETS, ObjectRef, RefIndex, _shared
from tests.support.fakeapi import FakeApi, FakeRecorder
from tests.support.reflection import LOCAL_ID, REMOTE_ID, reflection_context
from vkbridge.kube.client import ApiError
from vkbridge.kube.reachability import PoolState, Reachability
from vkbridge.logs import JsonFormatter, TextFormatter

S1 = ObjectRef("Secret", "team", "db")
S2 = ObjectRef("Secret", "team", "pull")
C1 = ObjectRef("ConfigMap", "team", "cfg")
OTHER_NS = ObjectRef("Secret", "other", "db")


# ================================================================================== the pure index


def test_object_ref_key_round_trip() -> None:
    assert S1.key() == "Secret|team|db"
    assert ObjectRef.from_key(S1.key()) == S1
    assert str(C1) == "ConfigMap team/cfg"


def test_set_pod_then_drop_releases_only_unshared_objects() -> None:
    idx = RefIndex()
    assert idx.set_pod("team/a", [S1, C1]) == frozenset()
    assert idx.set_pod("team/b", [S1]) == frozenset()
    assert idx.referenced(S1) and idx.referenced(C1)
    assert idx.pods_referencing(S1) == {"team/a", "team/b"}
    assert idx.drop_pod("team/a") == {C1}
    assert idx.referenced(S1) and not idx.referenced(C1)
    assert idx.drop_pod("team/b") == {S1}
    assert not idx.referenced(S1)
    assert len(idx) == 0


def test_pods_with_equal_references_share_one_set_and_keep_their_own_bookkeeping() -> None:
    idx = RefIndex()
    idx.set_pod("team/a", [ObjectRef("Secret", "team", "db"), C1])
    idx.set_pod("team/b", [C1, ObjectRef("Secret", "team", "db")])
    assert idx.refs_of("team/a") is idx.refs_of("team/b")  # one set for both
    assert idx.drop_pod("team/a") == frozenset()  # b still references both
    assert idx.refs_of("team/b") == {S1, C1}
    assert idx.drop_pod("team/b") == {S1, C1}


def test_reference_sets_kept_for_sharing_are_bounded() -> None:
    idx = RefIndex()
    for i in range(SHARED_SETS + 10):
        idx.set_pod(f"team/p{i}", [ObjectRef("ConfigMap", "team", f"cfg-{i}")])
    assert _shared.cache_info().currsize == SHARED_SETS
    assert all(
        idx.refs_of(f"team/p{i}") == {ObjectRef("ConfigMap", "team", f"cfg-{i}")}
        for i in range(SHARED_SETS + 10)
    )


def test_drop_unknown_pod_and_double_drop_release_nothing() -> None:
    idx = RefIndex()
    assert idx.drop_pod("team/ghost") == frozenset()
    idx.set_pod("team/a", [S1])
    assert idx.drop_pod("team/a") == {S1}
    assert idx.drop_pod("team/a") == frozenset()


def test_set_pod_again_returns_objects_it_no_longer_references() -> None:
    idx = RefIndex()
    idx.set_pod("team/a", [S1, S2])
    idx.set_pod("team/b", [S2])
    assert idx.set_pod("team/a", [C1]) == {S1}  # S2 still used by b
    assert idx.refs_of("team/a") == {C1}
    assert idx.set_pod("team/a", []) == {C1}
    assert not idx.tracks("team/a")


def test_waiting_is_replaced_and_cleared_by_drop() -> None:
    idx = RefIndex()
    idx.set_pod("team/a", [S1, C1])
    idx.set_waiting("team/a", [S1, C1])
    idx.set_pod("team/b", [S1])
    idx.set_waiting("team/b", [S1])
    assert idx.pods_waiting_for(S1) == {"team/a", "team/b"}
    idx.set_waiting("team/a", [C1])
    assert idx.pods_waiting_for(S1) == {"team/b"} and idx.pods_waiting_for(C1) == {"team/a"}
    idx.drop_pod("team/b")
    assert not idx.waited_for(S1)
    idx.set_waiting("team/a", [])
    assert not idx.waited_for(C1)


def test_take_waiting_hands_out_each_waiting_pod_once() -> None:
    idx = RefIndex()
    idx.set_waiting("team/a", [S1, C1])
    idx.set_waiting("team/b", [S1])
    assert idx.take_waiting(S1) == {"team/a", "team/b"}
    assert idx.take_waiting(S1) == frozenset()
    assert idx.pods_waiting_for(C1) == {"team/a"}
    assert idx.take_waiting(C1) == {"team/a"}
    assert not idx.waited_for(C1)


def test_drop_namespace_forgets_only_that_namespace_and_releases_nothing() -> None:
    idx = RefIndex()
    idx.set_pod("team/a", [S1])
    idx.set_waiting("team/a", [S1])
    idx.set_pod("other/a", [OTHER_NS])
    idx.drop_namespace("team")
    assert not idx.referenced(S1) and not idx.waited_for(S1)
    assert idx.referenced(OTHER_NS)
    assert idx.objects() == {OTHER_NS} and idx.objects("team") == frozenset()


OBJS = [ObjectRef(k, "ns", n) for k in ("Secret", "ConfigMap") for n in ("a", "b", "c")]
PODS = ["ns/p1", "ns/p2", "ns/p3"]
ops = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from(PODS), st.frozensets(st.sampled_from(OBJS))),
        st.tuples(st.just("drop"), st.sampled_from(PODS), st.just(frozenset())),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(ops)
def test_index_matches_a_naive_model(sequence: list[tuple[str, str, frozenset[ObjectRef]]]) -> None:
    """referenced == used by some pod; released == exactly the objects that just lost their last pod."""
    idx = RefIndex()
    model: dict[str, frozenset[ObjectRef]] = {}
    for op, pod, refs in sequence:
        before = frozenset().union(*model.values()) if model else frozenset()
        if op == "set":
            model[pod] = refs
            released = idx.set_pod(pod, refs)
        else:
            model.pop(pod, None)
            released = idx.drop_pod(pod)
        after = frozenset().union(*model.values()) if model else frozenset()
        assert released == before - after
        for obj in OBJS:
            assert idx.referenced(obj) == (obj in after)
            assert idx.pods_referencing(obj) == {p for p, r in model.items() if obj in r}


# ================================================================================== the reflector

NS, REMOTE_NS = "team", f"team-{LOCAL_ID}"
ROOT_CA_REMOTE = "kube-root-ca.crt.c-1a2"
OURS = {c.ORIGIN_LABEL: LOCAL_ID, c.DESTINATION_LABEL: REMOTE_ID}
MARK = f"{c.CONFIG_USER_LABEL_PREFIX}{REMOTE_ID}"  # the Env's node is named like the pool
SECRET_VALUE = "s3cr3t-" + uuid.uuid4().hex  # must never reach a log line
SECRET_B64 = base64.b64encode(SECRET_VALUE.encode()).decode()


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def secret(name: str, data: dict[str, str] | None = None, *, type_: str = "Opaque",
           annotations: dict[str, str] | None = None, labels: dict[str, str] | None = None,
           ns: str = NS) -> dict[str, Any]:  # fmt: skip
    return {
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}, "annotations": annotations or {}},
        "type": type_,
        "data": {k: b64(v) for k, v in (data or {"k": name}).items()},
    }


def configmap(name: str, data: dict[str, str] | None = None, *, ns: str = NS,
              labels: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    return {"metadata": {"name": name, "namespace": ns, "labels": labels or {}}, "data": data or {"k": name}}


def pod(name: str, *, env_secret: str | None = None, volume_cm: str | None = None,
        pull_secret: str | None = None, root_ca: bool = False, optional_secret: str | None = None,
        phase: str = "Running", ns: str = NS) -> dict[str, Any]:  # fmt: skip
    env: list[dict[str, Any]] = []
    volumes: list[dict[str, Any]] = []
    if env_secret:
        env.append({"name": "A", "valueFrom": {"secretKeyRef": {"name": env_secret, "key": "k"}}})
    if optional_secret:
        env.append({"name": "B", "valueFrom": {"secretKeyRef": {"name": optional_secret, "key": "k",
                                                                 "optional": True}}})  # fmt: skip
    if volume_cm:
        volumes.append({"name": "cfg", "configMap": {"name": volume_cm}})
    if root_ca:
        volumes.append({"name": "kube-api-access-x", "projected": {"sources": [
            {"serviceAccountToken": {"path": "token"}},
            {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
        ]}})  # fmt: skip
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "busybox", "env": env}], "volumes": volumes}
    if pull_secret:
        spec["imagePullSecrets"] = [{"name": pull_secret}]
    return {"metadata": {"name": name, "namespace": ns, "uid": str(uuid.uuid4())}, "spec": spec,
            "status": {"phase": phase}}  # fmt: skip


class FakePods:
    def __init__(self) -> None:
        self.pods: list[dict[str, Any]] = []

    def list(self, namespace: str | None = None) -> list[dict[str, Any]]:
        return [p for p in self.pods if namespace is None or p["metadata"]["namespace"] == namespace]


class Env:
    def __init__(self) -> None:
        self.home = FakeApi("consumer")
        self.pool = FakeApi("pool")
        self.reach = Reachability()
        self.reach.set(PoolState.CONNECTED)
        self.recorder = FakeRecorder()
        self.pods = FakePods()
        self.ready: list[str] = []
        self.ctx = reflection_context(self.home, self.pool, recorder=self.recorder, reach=self.reach)
        self.refl = ConfigurationReflector(
            self.ctx, 2, local_pods=self.pods, on_object_ready=self.ready.extend
        )

    def remote_names(self) -> set[tuple[str, str]]:
        return {("Secret", n) for n in self.pool.names("secrets", REMOTE_NS)} | {
            ("ConfigMap", n) for n in self.pool.names("configmaps", REMOTE_NS)
        }

    def put_remote_copy(self, plural: str, name: str, data: dict[str, str], **kw: Any) -> dict[str, Any]:
        body = (secret if plural == "secrets" else configmap)(
            name, data, ns=REMOTE_NS, labels=dict(OURS), **kw
        )
        return self.pool.put(plural, body)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[ConfigurationReflector]:
        async with asyncio.TaskGroup() as tg:
            self.refl.start_pair(NS, REMOTE_NS, tg.create_task)
            workers = tg.create_task(self.refl.run())
            await asyncio.wait_for(self.refl.wait_synced(NS), 2)
            try:
                yield self.refl
            finally:
                self.refl.stop()
                self.refl.stop_pair(NS)
                await workers


async def settled(env: Env) -> None:
    """Let queued keys run: the queue empty and nothing in flight, twice in a row."""
    for _ in range(2):
        await eventually(
            lambda: len(env.refl.queue) == 0 and env.refl.queue.in_flight == 0, 2.0, "an idle queue"
        )
        await asyncio.sleep(0.05)


async def remote_password_becomes(env: Env, password: str, what: str) -> None:
    """Wait until the pool's copy of Secret ``db`` holds exactly ``password`` (base64 on the wire)."""
    await eventually(
        lambda: env.pool.obj("secrets", REMOTE_NS, "db")["data"] == {"password": b64(password)},  # type: ignore[index]
        2.0,
        what,
    )


async def test_ensure_applies_exactly_the_referenced_objects() -> None:
    env = Env()
    env.home.put("secrets", secret("db", {"password": SECRET_VALUE}))
    env.home.put(
        "secrets", secret("pull", {".dockerconfigjson": "{}"}, type_="kubernetes.io/dockerconfigjson")
    )
    env.home.put("secrets", secret("unrelated"))
    env.home.put("configmaps", configmap("cfg"))
    env.home.put("configmaps", configmap("unused"))
    env.home.put("configmaps", configmap("kube-root-ca.crt", {"ca.crt": "PEM"}))
    async with env.running() as refl:
        missing = await refl.ensure_for_pod(NS, pod("web", env_secret="db", volume_cm="cfg", pull_secret="pull",
                                                    root_ca=True))  # fmt: skip
        assert missing == []
        assert env.remote_names() == {("Secret", "db"), ("Secret", "pull"), ("ConfigMap", "cfg"),
                                      ("ConfigMap", ROOT_CA_REMOTE)}  # fmt: skip
        copy_ = env.pool.obj("secrets", REMOTE_NS, "db")
        assert copy_ is not None
        assert copy_["data"] == {"password": SECRET_B64}
        assert copy_["type"] == "Opaque"
        assert copy_["metadata"]["labels"] == {**OURS, MARK: "true"}
        pull = env.pool.obj("secrets", REMOTE_NS, "pull")
        assert pull is not None and pull["type"] == "kubernetes.io/dockerconfigjson"
        ca = env.pool.obj("configmaps", REMOTE_NS, ROOT_CA_REMOTE)
        assert ca is not None and ca["data"] == {"ca.crt": "PEM"}
        await settled(env)
        writes = len(env.pool.writes())
        # Same references again (a second pod, or a re-handle): nothing more is written.
        assert await refl.ensure_for_pod(NS, pod("web2", env_secret="db", root_ca=True)) == []
        await settled(env)
        assert len(env.pool.writes()) == writes


async def test_concurrent_pods_sharing_objects_write_each_object_once() -> None:
    env = Env()
    env.home.put("secrets", secret("db"))
    env.home.put("configmaps", configmap("kube-root-ca.crt"))
    async with env.running() as refl:
        results = await asyncio.gather(
            *(refl.ensure_for_pod(NS, pod(f"p{i}", env_secret="db", root_ca=True)) for i in range(20))
        )
        assert all(r == [] for r in results)
        await settled(env)
        applies = [call for call in env.pool.writes() if call[0] == "apply"]
        assert sorted(name for *_, name in applies) == sorted(["db", ROOT_CA_REMOTE])


async def test_missing_object_blocks_until_it_appears_then_pods_are_requeued() -> None:
    env = Env()
    async with env.running() as refl:
        missing = await refl.ensure_for_pod(NS, pod("web", env_secret="db", optional_secret="maybe"))
        assert missing == ['Secret "db" (not found)']  # the optional one never blocks
        message = missing_message(missing)
        assert 'Secret "db"' in message and "maybe" not in message
        assert env.remote_names() == set()
        env.home.put("secrets", secret("db"))
        await eventually(lambda: env.ready == ["team/web"], 2.0, "the waiting pod to be re-queued")
        assert ("Secret", "db") in env.remote_names()
        assert await refl.ensure_for_pod(NS, pod("web", env_secret="db", optional_secret="maybe")) == []
        # The optional one, once it exists, is reflected too (the pool pod may use it).
        env.home.put("secrets", secret("maybe"))
        await eventually(
            lambda: ("Secret", "maybe") in env.remote_names(), 2.0, "the optional Secret reflected"
        )


async def test_references_found_missing_are_remembered_per_pod_for_the_upstream_events() -> None:
    env = Env()
    async with env.running() as refl:
        await refl.ensure_for_pod(NS, pod("web", env_secret="db", optional_secret="maybe"))
        assert refl.absent_references("team/web") == (
            Reference("Secret", "db"),
            Reference("Secret", "maybe", optional=True),
        )
        env.home.put("secrets", secret("db"))
        await eventually(lambda: env.ready == ["team/web"], 2.0, "the waiting pod to be re-queued")
        await refl.ensure_for_pod(NS, pod("web", env_secret="db", optional_secret="maybe"))
        assert refl.absent_references("team/web") == (Reference("Secret", "maybe", optional=True),)
        refl.release_pod("team/web")
        assert refl.absent_references("team/web") == ()


async def test_object_created_with_the_pod_is_found_despite_a_lagging_cache() -> None:
    env = Env()
    async with env.running() as refl:
        env.home.put("secrets", secret("db"), silent=True)  # the watch has not delivered it yet
        assert await refl.ensure_for_pod(NS, pod("web", env_secret="db")) == []
        assert ("Secret", "db") in env.remote_names()


async def test_policy_skips_are_reported_and_never_copied() -> None:
    env = Env()
    env.home.put("secrets", secret("tok", type_=c.SERVICE_ACCOUNT_TOKEN_SECRET_TYPE))
    env.home.put("secrets", secret("denied", annotations={c.SKIP_REFLECTION_ANNOTATION: "true"}))
    env.home.put("configmaps", configmap("cfg"))
    async with env.running() as refl:
        p = pod("web", env_secret="tok", volume_cm="cfg")
        p["spec"]["imagePullSecrets"] = [{"name": "denied"}]
        missing = await refl.ensure_for_pod(NS, p)
        assert len(missing) == 2
        assert any(m.startswith('Secret "tok" (') and "service account" in m for m in missing)
        assert any(m.startswith('Secret "denied" (') and c.SKIP_REFLECTION_ANNOTATION in m for m in missing)
        assert env.remote_names() == {("ConfigMap", "cfg")}
        # Switching to skip later deletes the existing copy.
        env.home.put("configmaps", {**configmap("cfg"), "metadata": {
            "name": "cfg", "namespace": NS, "annotations": {c.SKIP_REFLECTION_ANNOTATION: "true"}}})  # fmt: skip
        await eventually(lambda: env.remote_names() == set(), 2.0, "the skipped copy deleted")
        assert any(e[3] == c.EVENT_REFLECTION_DISABLED for e in env.recorder.events)


async def test_shared_secret_lives_until_the_last_pod_releases_it() -> None:
    env = Env()
    env.home.put("secrets", secret("db"))
    async with env.running() as refl:
        assert await refl.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        assert await refl.ensure_for_pod(NS, pod("b", env_secret="db")) == []
        uid = env.pool.obj("secrets", REMOTE_NS, "db")["metadata"]["uid"]  # type: ignore[index]
        refl.release_pod("team/a")
        await settled(env)
        assert ("Secret", "db") in env.remote_names()
        refl.release_pod("team/b")
        await eventually(lambda: ("Secret", "db") not in env.remote_names(), 2.0, "the Secret deleted")
        assert ("secrets", "db", uid) in env.pool.deletes  # UID precondition
        assert env.home.obj("secrets", NS, "db") is not None  # the local one is never touched


async def test_local_update_is_reapplied_and_remote_drift_reverted() -> None:
    env = Env()
    env.home.put("secrets", secret("db", {"password": "one"}))
    async with env.running() as refl:
        assert await refl.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        env.home.put("secrets", secret("db", {"password": "two"}))
        await remote_password_becomes(env, "two", "the update reflected")
        env.put_remote_copy("secrets", "db", {"password": "tampered"})
        await remote_password_becomes(env, "two", "drift reverted")
        drifted = env.pool.obj("secrets", REMOTE_NS, "db")
        assert drifted is not None
        drifted = copy.deepcopy(drifted)
        drifted["data"]["extra"] = b64("added on the pool")
        drifted["_foreign_keys"] = ["extra"]
        env.pool.put("secrets", drifted)
        await eventually(
            lambda: "extra" not in env.pool.obj("secrets", REMOTE_NS, "db")["data"],
            2.0,
            "a key added on the pool removed",
        )
        env.pool.remove("secrets", REMOTE_NS, "db")
        await eventually(lambda: ("Secret", "db") in env.remote_names(), 2.0, "the deleted copy re-created")


async def test_type_change_recreates_the_copy() -> None:
    env = Env()
    env.home.put("secrets", secret("db"))
    async with env.running() as refl:
        assert await refl.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        old_uid = env.pool.obj("secrets", REMOTE_NS, "db")["metadata"]["uid"]  # type: ignore[index]
        env.home.remove("secrets", NS, "db")
        env.home.put("secrets", secret("db", {"tls.crt": "c", "tls.key": "k"}, type_="kubernetes.io/tls"))

        def recreated() -> bool:
            obj = env.pool.obj("secrets", REMOTE_NS, "db")
            return (
                obj is not None and obj["type"] == "kubernetes.io/tls" and obj["metadata"]["uid"] != old_uid
            )

        await eventually(recreated, 2.0, "the copy re-created with the new type")


async def test_local_delete_removes_the_copy_and_the_pod_waits_again() -> None:
    env = Env()
    env.home.put("secrets", secret("db"))
    async with env.running() as refl:
        assert await refl.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        env.home.remove("secrets", NS, "db")
        await eventually(lambda: env.remote_names() == set(), 2.0, "the copy deleted with its local object")
        assert await refl.ensure_for_pod(NS, pod("a", env_secret="db")) == ['Secret "db" (not found)']


async def test_foreign_object_of_the_same_name_is_never_touched() -> None:
    env = Env()
    env.home.put("secrets", secret("db"))
    foreign = env.pool.put("secrets", secret("db", {"theirs": "x"}, ns=REMOTE_NS))
    async with env.running() as refl:
        missing = await refl.ensure_for_pod(NS, pod("a", env_secret="db"))
        assert missing == [f'Secret "db" ({FOREIGN})']
        refl.release_pod("team/a")
        await settled(env)
        assert env.pool.obj("secrets", REMOTE_NS, "db") == foreign
        assert not env.pool.writes()
        assert [(e[0], e[3]) for e in env.recorder.events] == [("Secret", c.EVENT_FAILED_REFLECTION)]


async def test_pool_away_parks_writes_and_resumes_when_it_returns() -> None:
    env = Env()
    env.home.put("secrets", secret("db"))
    env.home.put("secrets", secret("later"))
    async with env.running() as refl:
        assert await refl.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        env.reach.set(PoolState.LOST)
        with pytest.raises(PoolUnavailable):
            await refl.ensure_for_pod(NS, pod("b", env_secret="later"))
        refl.release_pod("team/a")
        await settled(env)
        assert ("Secret", "db") in env.remote_names()  # nothing written while away
        assert refl.parked
        env.reach.set(PoolState.CONNECTED)
        await eventually(lambda: ("Secret", "db") not in env.remote_names(), 2.0, "the parked delete done")
        assert await refl.ensure_for_pod(NS, pod("b", env_secret="later")) == []


async def test_sweep_at_start_deletes_only_unreferenced_copies_of_ours() -> None:
    env = Env()
    env.home.put("secrets", secret("used"))
    env.put_remote_copy("secrets", "used", {"k": "used"})
    env.put_remote_copy("secrets", "leftover", {"k": "x"})
    env.put_remote_copy("configmaps", ROOT_CA_REMOTE, {"ca.crt": "PEM"})
    token = secret("p-token", ns=REMOTE_NS, labels=dict(OURS), annotations={
        c.SA_SECRET_FOR_POD_NAME_KEY: "p", c.SA_SECRET_FOR_SERVICE_ACCOUNT_KEY: "default"})  # fmt: skip
    env.pool.put("secrets", token)
    env.pool.put("secrets", secret("foreign", ns=REMOTE_NS))
    env.pods.pods = [pod("alive", env_secret="used"), pod("done", root_ca=True, phase="Succeeded")]
    async with env.running() as refl:
        await eventually(
            lambda: env.remote_names() == {("Secret", "used"), ("Secret", "p-token"), ("Secret", "foreign")},
            2.0,
            "the sweep",
        )
        # The live pod is tracked again by the pod reflector; when it ends, its Secret goes.
        refl.track_pod(NS, env.pods.pods[0])
        await settled(env)
        refl.release_pod("team/alive")
        await eventually(
            lambda: ("Secret", "used") not in env.remote_names(), 2.0, "the tracked Secret released"
        )


async def test_secret_values_never_reach_logs_or_errors(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    env = Env()
    env.home.put("secrets", secret("db", {"password": SECRET_VALUE}))
    async with env.running() as refl:
        assert await refl.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        env.home.put("secrets", secret("db", {"password": SECRET_VALUE + "-2"}))
        await remote_password_becomes(env, SECRET_VALUE + "-2", "update")
        env.home.put("secrets", secret("bad", {"password": SECRET_VALUE}))
        env.pool.fail["apply"] = [
            ApiError(422, "Invalid", f'data[password]: Invalid value: "{SECRET_VALUE}" / {SECRET_B64}')
        ]
        with pytest.raises(ConfigurationWriteError) as info:
            await refl.ensure_for_pod(NS, pod("b", env_secret="bad"))
        assert "422" in str(info.value) and "bad" in str(info.value)
        assert env.pool.fail["apply"] == [], "refused once"
        refl.release_pod("team/a")
        await eventually(lambda: ("Secret", "db") not in env.remote_names(), 2.0, "release")
    lines = "\n".join(f.format(r) for r in caplog.records for f in (TextFormatter(), JsonFormatter()))
    text = lines + str(info.value) + repr(env.recorder.events)
    assert SECRET_VALUE not in text
    assert SECRET_B64 not in text
    assert "object=team/db" in lines  # names are logged


async def test_ensure_before_the_pair_synced_raises_not_ready() -> None:
    from reflectors.configuration import ConfigurationNotReady

    env = Env()
    with pytest.raises(ConfigurationNotReady):
        await env.refl.ensure_for_pod(NS, pod("a", env_secret="db"))
    assert not env.refl.synced(NS)
    assert await env.refl.wait_synced(NS) is False


async def test_stop_pair_forgets_the_namespace_and_leaves_copies_alone() -> None:
    env = Env()
    env.home.put("secrets", secret("db"))
    async with env.running() as refl:
        assert await refl.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        refl.stop_pair(NS)
        assert not refl.index.referenced(S1)
        refl.release_pod("team/a")
        await asyncio.sleep(0.1)
        assert ("Secret", "db") in env.remote_names()


# ============================================= copies shared by two virtual nodes (issue 15 item 13)

MARK_B = f"{c.CONFIG_USER_LABEL_PREFIX}node-b"


def second_node(env: Env, node_name: str = "node-b") -> ConfigurationReflector:
    """Another virtual node of the same consumer mapping the same remote namespace (same ids, same pool)."""
    return ConfigurationReflector(dataclasses.replace(env.ctx, node_name=node_name), 2, local_pods=FakePods())


@contextlib.asynccontextmanager
async def running_node(refl: ConfigurationReflector) -> AsyncIterator[ConfigurationReflector]:
    async with asyncio.TaskGroup() as tg:
        refl.start_pair(NS, REMOTE_NS, tg.create_task)
        workers = tg.create_task(refl.run())
        await asyncio.wait_for(refl.wait_synced(NS), 2)
        try:
            yield refl
        finally:
            refl.stop()
            refl.stop_pair(NS)
            await workers


def remote_labels(env: Env, name: str = "db") -> dict[str, str]:
    obj = env.pool.obj("secrets", REMOTE_NS, name)
    return {} if obj is None else dict(obj["metadata"].get("labels") or {})


async def test_two_nodes_share_a_copy_and_releasing_one_node_keeps_it_for_the_other() -> None:
    env = Env()
    env.home.put("secrets", secret("db"))
    async with env.running() as node_a, running_node(second_node(env)) as node_b:
        assert await node_a.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        assert await node_b.ensure_for_pod(NS, pod("b", env_secret="db")) == []
        await eventually(lambda: {MARK, MARK_B} <= remote_labels(env).keys(), 2.0, "both nodes' marks")
        uid = env.pool.obj("secrets", REMOTE_NS, "db")["metadata"]["uid"]  # type: ignore[index]

        node_a.release_pod("team/a")
        await eventually(lambda: MARK not in remote_labels(env), 2.0, "node A's mark removed")
        await settled(env)
        await asyncio.sleep(0.1)
        copy_ = env.pool.obj("secrets", REMOTE_NS, "db")
        assert copy_ is not None and copy_["metadata"]["uid"] == uid, "node A deleted node B's copy"
        assert remote_labels(env)[MARK_B] == "true"

        node_b.release_pod("team/b")
        await eventually(
            lambda: env.pool.obj("secrets", REMOTE_NS, "db") is None, 2.0, "deleted by the last user"
        )


async def test_release_racing_another_nodes_mark_never_deletes_the_copy() -> None:
    """Node B marks the copy after node A's cache last saw it: A's conditional delete conflicts, A decides
    again from the newer view and only removes its own mark."""
    env = Env()
    env.home.put("secrets", secret("db"))
    async with env.running() as node_a:
        assert await node_a.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        await settled(env)
        marked = copy.deepcopy(env.pool.obj("secrets", REMOTE_NS, "db"))
        assert marked is not None
        marked["metadata"]["labels"][MARK_B] = "true"
        env.pool.put("secrets", marked, silent=True)  # node A's watch has not delivered it yet
        node_a.release_pod("team/a")
        await asyncio.sleep(0.3)
        still = env.pool.obj("secrets", REMOTE_NS, "db")
        assert still is not None, "deleted although node B marked it"
        env.pool.put("secrets", still)  # the watch catches up
        await eventually(lambda: MARK not in remote_labels(env), 2.0, "node A's mark removed")
        assert remote_labels(env)[MARK_B] == "true"


async def test_sweep_at_start_leaves_copies_other_nodes_mark() -> None:
    env = Env()
    env.put_remote_copy("secrets", "theirs", {"k": "x"})
    env.put_remote_copy("secrets", "shared", {"k": "x"})
    env.put_remote_copy("secrets", "unmarked", {"k": "x"})
    for name, marks in (("theirs", {MARK_B: "true"}), ("shared", {MARK: "true", MARK_B: "true"})):
        obj = copy.deepcopy(env.pool.obj("secrets", REMOTE_NS, name))
        assert obj is not None
        obj["metadata"]["labels"].update(marks)
        env.pool.put("secrets", obj)
    async with env.running():
        await eventually(
            lambda: ("Secret", "unmarked") not in env.remote_names(), 2.0, "the unmarked leftover swept"
        )
        await eventually(
            lambda: MARK not in remote_labels(env, "shared"), 2.0, "our mark removed from the shared one"
        )
        await settled(env)
        assert {("Secret", "theirs"), ("Secret", "shared")} <= env.remote_names()
        assert remote_labels(env, "theirs")[MARK_B] == remote_labels(env, "shared")[MARK_B] == "true"


async def test_update_by_one_node_keeps_the_other_nodes_mark() -> None:
    env = Env()
    env.home.put("secrets", secret("db", {"password": "one"}))
    async with env.running() as node_a, running_node(second_node(env)) as node_b:
        assert await node_a.ensure_for_pod(NS, pod("a", env_secret="db")) == []
        assert await node_b.ensure_for_pod(NS, pod("b", env_secret="db")) == []
        env.home.put("secrets", secret("db", {"password": "two"}))
        await remote_password_becomes(env, "two", "the update reflected")
        await settled(env)
        assert {MARK, MARK_B} <= remote_labels(env).keys()


# ============================== a local ConfigMap named like the renamed root CA (issue 15 item 14)


async def test_local_configmap_named_like_the_renamed_root_ca_never_overwrites_it() -> None:
    env = Env()
    env.home.put("configmaps", configmap("kube-root-ca.crt", {"ca.crt": "PEM"}))
    env.home.put("configmaps", configmap(ROOT_CA_REMOTE, {"ca.crt": "NOT THE CA"}))
    async with env.running() as refl:
        assert await refl.ensure_for_pod(NS, pod("ca", root_ca=True)) == []
        missing = await refl.ensure_for_pod(NS, pod("clash", volume_cm=ROOT_CA_REMOTE))
        assert len(missing) == 1 and missing[0].startswith(f'ConfigMap "{ROOT_CA_REMOTE}" (')
        assert "reserved" in missing[0]
        optional = pod("optional")
        optional["spec"]["volumes"] = [{"name": "v", "configMap": {"name": ROOT_CA_REMOTE, "optional": True}}]
        assert len(await refl.ensure_for_pod(NS, optional)) == 1  # on the pool that name holds the CA
        await settled(env)
        ca = env.pool.obj("configmaps", REMOTE_NS, ROOT_CA_REMOTE)
        assert ca is not None and ca["data"] == {"ca.crt": "PEM"}
        assert [(e[0], e[1], e[2], e[3]) for e in env.recorder.events] == [
            ("ConfigMap", ROOT_CA_REMOTE, "Warning", c.EVENT_FAILED_REFLECTION)
        ]
        refl.release_pod("team/clash")
        refl.release_pod("team/optional")
        await settled(env)
        assert env.pool.obj("configmaps", REMOTE_NS, ROOT_CA_REMOTE) is not None  # still the CA pod's
        refl.release_pod("team/ca")
        await eventually(lambda: env.remote_names() == set(), 2.0, "the CA copy released")
        assert env.home.obj("configmaps", NS, ROOT_CA_REMOTE) is not None


# ============================== what only ephemeral containers reference stays home (issue 15 item 15)


async def test_secret_referenced_only_by_an_ephemeral_container_is_not_copied() -> None:
    env = Env()
    env.home.put("secrets", secret("db"))
    env.home.put("secrets", secret("debug-token"))
    p = pod("web", env_secret="db")
    p["spec"]["ephemeralContainers"] = [{"name": "debugger", "image": "busybox", "envFrom": [
        {"secretRef": {"name": "debug-token"}}, {"secretRef": {"name": "absent"}}]}]  # fmt: skip
    async with env.running() as refl:
        assert await refl.ensure_for_pod(NS, p) == []  # "absent" does not hold the pod back either
        await settled(env)
        assert env.remote_names() == {("Secret", "db")}
