"""Resilience scenarios: every test here is `integration` and `resilience` (run alone with -m resilience).

Fixtures:
- ``own_vkbridge``: the node gets exactly one owner at a time. It stops the session's vkbridge (SIGTERM),
  hands the test a factory for its own processes (special flags, kills, restarts), stops them after the
  test and starts the session's vkbridge again, waiting until the node is Ready.
- ``clean_tunnel`` (autouse): whatever a scenario did to the tunnel is undone afterwards.
- ``figures``: named figures printed at teardown, also when an assertion failed.
- ``pods``: the test's offloaded namespace (``offloaded_ns``) on both planes, with its pod helpers.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeProcess
from tests.fixtures_vkbridge import node_ready, vkbridge_options, wait_until
from tests.resilience.kit import Figures, OwnVkbridge, TinyPods

HERE = Path(__file__).resolve().parent
# Extra environment for the scenarios' own vkbridge processes, "K=V,K2=V2" (e.g. to try a fix).
EXTRA_ENV = dict(
    kv.split("=", 1) for kv in os.environ.get("VKB_RESILIENCE_VK_ENV", "").split(",") if "=" in kv
)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark before `-m` deselects, so `-m resilience` and `-m "not resilience"` both see the markers."""
    for item in items:
        if Path(str(item.path)).resolve().is_relative_to(HERE):
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.resilience)


@pytest.fixture(autouse=True)
def clean_tunnel(request: pytest.FixtureRequest) -> Iterator[None]:
    yield
    if "tunnel" not in request.fixturenames:
        return
    tunnel: TunnelProxy = request.getfixturevalue("tunnel")
    tunnel.set_latency(0)
    tunnel.cut_every(None)
    tunnel.restore()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    figs = Figures(request.node.name)
    yield figs
    print(figs.render())


@pytest.fixture
def pods(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, offloaded_ns: tuple[str, str]
) -> TinyPods:
    ns, remote = offloaded_ns
    return TinyPods(consumer, pool, bundle.slug, ns, remote)


@pytest.fixture
def own_vkbridge(
    vkbridge: VkbridgeProcess, consumer: ControlPlane, bundle: Bundle, tunnel: TunnelProxy,
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest,
) -> Iterator[OwnVkbridge]:  # fmt: skip
    """Factory ``start(tag, **VkbridgeOptions fields) -> VkbridgeProcess`` while the session's one is stopped."""
    vkbridge.stop()
    logs = tmp_path_factory.mktemp("own-vkbridge")
    started: list[VkbridgeProcess] = []

    def start(tag: str = "own", **kw: Any) -> VkbridgeProcess:
        opts = vkbridge_options(consumer, bundle, **kw)
        opts.env = {**EXTRA_ENV, **opts.env}
        proc = VkbridgeProcess(opts, logs / f"{tag}.log")
        started.append(proc)
        return proc.start()

    try:
        yield start
    finally:
        for proc in started:
            proc.stop()
        for proc in started:
            print(f"\nown vkbridge log: {proc.log_path} (exit {proc.exit_code})")
        tunnel.set_latency(0)
        tunnel.cut_every(None)
        tunnel.restore()
        t0 = time.monotonic()
        mark = len(vkbridge.log_text())
        vkbridge.start()
        try:
            vkbridge.wait_for_log("vkbridge running", 90, start=mark)
            wait_until(
                lambda: node_ready(consumer, bundle.slug) == "True", 90, "the session vkbridge's node Ready"
            )
        except (TimeoutError, RuntimeError):
            print(vkbridge.tail(60))
            raise
        print(f"\nsession vkbridge back, node Ready in {time.monotonic() - t0:.1f}s")
