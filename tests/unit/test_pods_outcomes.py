"""Issue 35 items 1 and 2 on the shared in-memory API (tests/unit/test_pods.py's world): a ShadowPod create
whose answer is lost keeps its grant share until the pool says whether it stored it, and a pod the pool
already ran to the end is never sent again."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pytest

from e2e.waiting import eventually
from reflectors.forge import constants as c
from reflectors.generic import PoolUnavailable
from tests.support.fakeapi import caught_up
from tests.support.reflection import LOCAL_ID, REMOTE_ID
from tests.support.reflection import local_pod as pod
from tests.unit.test_pods import KEY, NS, REMOTE_NS, Env, env
from vkbridge.kube.client import SHADOWPODS, ApiError, Resource, TransportError
from vkbridge.kube.reachability import PoolState

ONE_CPU = {"cpu": "1", "memory": "1Gi", "pods": "10"}


def lose_answer(e: Env, error: ApiError, *, stored: bool, unseen: bool = False) -> None:
    """The next ShadowPod create fails with ``error`` after the pool stored it (``stored``) or before;
    ``unseen``: stored where no watch has seen it yet (our cache lags)."""
    real = e.pool.create

    async def create(
        resource: Resource, body: dict[str, Any], namespace: str | None = None, **kw: Any
    ) -> Any:
        e.pool.create = real  # type: ignore[method-assign]
        if resource is SHADOWPODS and unseen:
            e.pool.put(
                "shadowpods", {**body, "metadata": {**body["metadata"], "namespace": namespace}}, silent=True
            )
        elif resource is SHADOWPODS and stored:
            await real(resource, body, namespace, **kw)
        raise error

    e.pool.create = create  # type: ignore[method-assign]


async def first_create_unanswered(e: Env, error: ApiError, *, stored: bool, unseen: bool = False) -> None:
    lose_answer(e, error, stored=stored, unseen=unseen)
    with pytest.raises((ApiError, PoolUnavailable)):
        await e.handle(f"{NS}/a")
    e.ctx.reach.set(PoolState.CONNECTED)  # the pinger still reaches the pool: one request was lost


@pytest.mark.parametrize(
    "error",
    [
        TransportError("POST shadowpods: ServerTimeoutError: Timeout on reading data from socket"),
        ApiError(504, "Timeout", "the server was unable to return a response in the time allotted"),
        ApiError(502, "Bad Gateway", "tunnel: upstream connection reset"),
    ],
    ids=["client-timeout", "504", "502"],
)
async def test_a_lost_create_answer_keeps_the_share_so_a_second_pod_does_not_overcommit(
    error: ApiError,
) -> None:
    async with env(ONE_CPU) as e:
        e.home.put("pods", pod("a", cpu="1"))
        await first_create_unanswered(e, error, stored=True)
        assert e.shadow("a") is not None, "the pool stored it"
        e.home.put("pods", pod("b", cpu="1"))
        await e.handle(f"{NS}/b")
        assert e.shadow("b") is None, "b was sent into a's share: two 1-CPU pods on a 1-CPU grant"
        assert list(e.admission.waiters) == [f"{NS}/b"]
        assert e.used()["cpu"] == 1
        # a's retry reads the pool first: stored, so it is not sent again and keeps its one charge
        await e.handle(f"{NS}/a")
        assert [w for w in e.pool.writes("shadowpods") if w[3] == "a"] == [
            ("create", "shadowpods", REMOTE_NS, "a")
        ]
        assert e.used()["cpu"] == 1 and e.used()["pods"] == 1


async def test_a_lost_create_answer_of_an_unstored_shadowpod_is_sent_again_within_its_share() -> None:
    async with env(ONE_CPU) as e:
        e.home.put("pods", pod("a", cpu="1"))
        await first_create_unanswered(e, TransportError("POST shadowpods: connection reset"), stored=False)
        assert e.used()["cpu"] == 1, "no answer: the share is held until the pool tells"
        assert await e.handle(f"{NS}/a") is None  # a read says absent: created now
        assert e.shadow("a") is not None
        assert e.used() == {"cpu": Fraction(1), "memory": Fraction(256 * 2**20), "pods": Fraction(1)}


@pytest.mark.parametrize(
    "error",
    [
        ApiError(
            403, "Forbidden", 'admission webhook "shadowpod.liqo.io" denied the request: quota exceeded'
        ),
        ApiError(422, "Invalid", "spec.pod.containers[0].image: Required value"),
        ApiError(400, "BadRequest", "the request is invalid"),
    ],
    ids=["webhook-denial", "422", "400"],
)
async def test_a_refused_create_frees_the_share_at_once(error: ApiError) -> None:
    async with env(ONE_CPU) as e:
        e.home.put("pods", pod("a", cpu="1"))
        await first_create_unanswered(e, error, stored=False)
        assert e.used() == {} and f"{NS}/a" not in e.refl.charged
        e.home.put("pods", pod("b", cpu="1"))
        await e.handle(f"{NS}/b")
        assert e.shadow("b") is not None


async def test_a_pod_deleted_after_a_lost_create_answer_takes_the_stored_shadowpod_and_its_share() -> None:
    async with env(ONE_CPU) as e:
        e.home.put("pods", pod("a", cpu="1"))
        error = TransportError("POST shadowpods: timeout")
        await first_create_unanswered(e, error, stored=True, unseen=True)  # our cache has not shown it
        shadow = e.shadow("a")
        assert shadow is not None
        e.home.remove("pods", NS, "a")
        await eventually(lambda: caught_up(e.local_pods, e.home), 2.0, "local pods caught up")
        assert await e.refl.handle(f"{NS}/a", e.pair) is None
        assert e.shadow("a") is None, "the ShadowPod of a gone pod is left on the pool"
        assert ("shadowpods", "a", shadow["metadata"]["uid"]) in e.pool.deletes
        assert e.used() == {}


# ------------------------------------------------------------------------------------------ item 1


def remote_pod(local: dict[str, Any], phase: str, *, shadow_uid: str = "gone-shadow-uid") -> dict[str, Any]:
    """The pool's pod for ``local``, as the provider makes it from the ShadowPod (its labels, annotations)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": local["metadata"]["name"],
            "namespace": REMOTE_NS,
            "labels": {c.ORIGIN_LABEL: LOCAL_ID, c.DESTINATION_LABEL: REMOTE_ID, c.NODENAME_LABEL: REMOTE_ID},
            "annotations": {c.LOCAL_POD_UID_ANNOTATION: local["metadata"]["uid"]},
            "ownerReferences": [{"kind": c.SHADOWPOD_KIND, "uid": shadow_uid, "controller": True}],
        },
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": "app", "state": {"terminated": {"exitCode": 0}}}],
        },
    }


async def test_a_finished_pod_whose_shadowpod_vanished_gets_its_status_home_and_never_runs_again() -> None:
    async with env() as e:
        local = pod()
        local["status"] = {"phase": "Running"}
        local = e.home.put("pods", local)
        e.pool.put("pods", remote_pod(local, "Succeeded"))  # the job ran; its ShadowPod is gone
        await e.handle()
        assert e.shadow() is None, "a new ShadowPod: the finished job runs twice"
        assert e.pool.writes("shadowpods") == []
        home = e.home.obj("pods", NS, "web")
        assert home is not None and home["status"]["phase"] == "Succeeded"
        assert KEY not in e.refl.charged
        await e.handle()  # once the cache shows it: terminal, nothing sent
        assert e.pool.writes("shadowpods") == []


async def test_a_finished_remote_pod_of_an_earlier_same_name_pod_is_not_mirrored_onto_its_successor() -> None:
    async with env() as e:
        local = e.home.put("pods", pod())
        earlier = {**local, "metadata": {**local["metadata"], "uid": "earlier-local-uid"}}
        e.pool.put("pods", remote_pod(earlier, "Succeeded"))
        await e.handle()
        home = e.home.obj("pods", NS, "web")
        assert home is not None and home["status"]["phase"] == "Pending"
        assert e.shadow() is not None, "the successor is sent"
