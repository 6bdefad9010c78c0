"""``observedGeneration`` in the local pod's terms, as a 1.34+ kubelet reports it (issue 36 point 5).

Before, the pool pod's status was copied with its own ``observedGeneration``: after a local spec update
(generation 2) the local pod kept saying 1, so anything waiting for the kubelet to observe the update
(``kubectl rollout status``-like tools, controllers comparing the two) waited for ever.
"""

from __future__ import annotations

from typing import Any

from reflectors.forge.status import forge_local_status


def cond(kind: str, gen: int | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "status": "True"}
    if gen is not None:
        out["observedGeneration"] = gen
    return out


def remote(gen: int, seen: int | None) -> dict[str, Any]:
    status: dict[str, Any] = {
        "phase": "Running",
        "conditions": [cond("Ready", seen), cond("PodScheduled", seen)],
    }
    if seen is not None:
        status["observedGeneration"] = seen
    return {"metadata": {"generation": gen}, "status": status}


def local(gen: int | None, status: dict[str, Any] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "web", "uid": "u1"}
    if gen is not None:
        meta["generation"] = gen
    return {"metadata": meta, "spec": {}, "status": status or {}}


def forged(local_pod: dict[str, Any], remote_pod: dict[str, Any]) -> dict[str, Any]:
    return forge_local_status(
        local_pod,
        remote_pod,
        restarts=0,
        vk_pod_ip="10.1.1.1",
        disable_ip_reflection=False,
        remote_unavailable=False,
    )


def test_a_local_spec_update_is_observed_in_the_local_generation_once_the_pool_caught_up() -> None:
    status = forged(local(3), remote(gen=1, seen=1))
    assert status["observedGeneration"] == 3
    assert {c["type"]: c["observedGeneration"] for c in status["conditions"]} == {
        "Ready": 3,
        "PodScheduled": 3,
    }


def test_while_the_pool_kubelet_has_not_caught_up_the_local_pod_keeps_what_it_said() -> None:
    before = {"observedGeneration": 2, "conditions": [cond("Ready", 2)]}
    status = forged(local(3, before), remote(gen=4, seen=3))
    assert status["observedGeneration"] == 2
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["observedGeneration"] == 2
    assert "observedGeneration" not in next(c for c in status["conditions"] if c["type"] == "PodScheduled")


def test_an_older_pool_kubelet_that_reports_no_generation_gets_none_made_up() -> None:
    status = forged(local(2), remote(gen=1, seen=None))
    assert "observedGeneration" not in status
    assert all("observedGeneration" not in c for c in status["conditions"])


def test_conditions_the_pool_reports_without_a_generation_stay_without_one() -> None:
    """What Liqo's VK writes too: a condition with a made-up generation made Liqo's VK rewrite every pod's
    status after a switch back (the server then kept the old value: a write that changed nothing)."""
    pool = remote(gen=1, seen=1)
    for c in pool["status"]["conditions"]:
        del c["observedGeneration"]
    status = forged(local(1), pool)
    assert status["observedGeneration"] == 1
    assert all("observedGeneration" not in c for c in status["conditions"])


def test_a_local_pod_without_a_generation_gets_none_of_the_pools() -> None:
    status = forged(local(None), remote(gen=5, seen=5))
    assert "observedGeneration" not in status
    assert all("observedGeneration" not in c for c in status["conditions"])
