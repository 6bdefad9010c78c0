"""Fixtures shared by the integration tests (the planes, the pool and vkbridge come from tests/conftest.py)."""

from __future__ import annotations

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from tests.support.offload import Offload


@pytest.fixture
def offload(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str],
) -> Offload:  # fmt: skip
    """A fresh namespace offloaded through the session's vkbridge, with the planes it lives on."""
    return Offload(consumer, pool, bundle, vkbridge, *offloaded_ns)
