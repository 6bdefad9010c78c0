"""bench.rate's verdicts and --isolate's core split: pure decisions the figures rest on."""

import pytest

from bench.isolation import split_cores
from bench.load import BENCH_REQUESTS, Creations, shadow_pod
from bench.rate import POOL_PATH, highest_held, rate_modes, step_verdict
from e2e.emulator import names
from e2e.emulator.quantity import parse
from e2e.emulator.quota_webhook import pod_cost


def test_a_step_holds_under_the_slo_at_the_asked_rate() -> None:
    assert step_verdict(4.9, 0, 19.5, 20) == "holds"


def test_a_step_over_the_slo_is_slow() -> None:
    assert step_verdict(5.1, 0, 20.0, 20) == "slow"


def test_any_failed_create_breaks_the_step() -> None:
    assert step_verdict(0.1, 1, 20.0, 20) == "errors"


def test_a_client_that_did_not_reach_the_rate_is_named() -> None:
    assert step_verdict(0.1, 0, 17.9, 20) == "client-limited"
    assert step_verdict(0.1, 0, None, 20) == "client-limited"


def test_highest_held_is_the_last_of_the_unbroken_run() -> None:
    steps = [
        {"rate": 5, "verdict": "holds"},
        {"rate": 10, "verdict": "holds"},
        {"rate": 20, "verdict": "slow"},
    ]
    assert highest_held(steps) == 10
    assert highest_held([{"rate": 5, "verdict": "errors"}]) is None


def test_the_vk_gets_the_highest_core_and_the_rest_the_others() -> None:
    assert split_cores({0, 1}) == ({1}, {0})
    assert split_cores({0, 2, 3}) == ({3}, {0, 2})


def test_isolation_needs_two_cores() -> None:
    with pytest.raises(ValueError, match="at least 2"):
        split_cores({0})


def test_the_started_rate_is_what_the_client_managed_and_the_answered_rate_adds_latency() -> None:
    made = Creations()
    for i in range(11):  # due and started every 0.1 s, each answered 0.5 s later
        made.sent[f"p{i}"] = made.started[f"p{i}"] = i * 0.1
        made.acked[f"p{i}"] = i * 0.1 + 0.5
    assert made.achieved_rate() == 10.0
    assert made.answered_rate() == 7.3  # 11 answers over 1.5 s


def test_no_rate_from_a_single_create() -> None:
    made = Creations(sent={"p": 0.0}, started={"p": 0.0}, acked={"p": 0.2})
    assert made.achieved_rate() is None
    assert made.answered_rate() is None


def test_the_pool_path_runs_last_after_vanilla() -> None:
    assert rate_modes("vanilla", [True], True) == ["vanilla", POOL_PATH]
    assert rate_modes("vanilla", [True], False) == ["vanilla"]
    assert rate_modes("vkbridge", [True, False], False) == ["vanilla", "vkbridge"]


def test_the_pool_path_shadowpod_is_charged_to_the_consumer_as_a_vks_is() -> None:
    """The emulator's quota webhook counts it against the consumer's grant (origin label, the pod's
    requests), so the pool path does the work a VK's ShadowPod causes."""
    sp = shadow_pod("r5-00001", "c-1a2b3c4d")
    assert sp["metadata"]["labels"][names.ORIGIN] == "c-1a2b3c4d"
    assert pod_cost(sp["spec"]["pod"]) == {k: parse(v) for k, v in BENCH_REQUESTS.items()}
    assert "nodeSelector" not in sp["spec"]["pod"]  # as a VK forges it: the pool schedules it
