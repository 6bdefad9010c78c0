"""The bench's shared decisions: which runs a script makes and how a run's timeline is read."""

import argparse

import pytest

from bench.harness import parse_vanilla_args, parse_vk_args
from bench.measure import timeline


def _modes(*argv: str) -> list[bool]:
    return parse_vanilla_args(argparse.ArgumentParser(), list(argv))[1]


def test_a_vk_runs_alone_unless_vanilla_is_asked_for_too() -> None:
    assert _modes() == [False]
    assert _modes("--with-vanilla") == [True, False]
    assert _modes("--impl", "vanilla") == [True]


def test_vanilla_cannot_be_isolated() -> None:
    with pytest.raises(SystemExit):
        _modes("--impl", "vanilla", "--isolate")


def test_a_script_that_measures_a_vk_refuses_vanilla() -> None:
    assert parse_vk_args(argparse.ArgumentParser(), ["--impl", "liqo"], "x").impl == "liqo"
    with pytest.raises(SystemExit):
        parse_vk_args(argparse.ArgumentParser(), ["--impl", "vanilla"], "x measures a VK")


def test_the_timeline_counts_from_the_first_create_and_leaves_unreached_shares_empty() -> None:
    seen = [10.5, 11.0, 12.0]  # three of four pods Running, first seen at these times
    assert timeline(seen, 10.0, 4) == {"t50_s": 1.0, "t90_s": None, "t99_s": None, "t100_s": None}
    assert timeline([*seen, 13.25], 10.0, 4) == {"t50_s": 1.0, "t90_s": 3.25, "t99_s": 3.25, "t100_s": 3.25}
