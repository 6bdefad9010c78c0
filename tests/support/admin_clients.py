"""Fixtures (a pytest plugin): vkbridge's own KubeClient as each plane's admin, for integration tests."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from e2e.controlplane import ControlPlane
from vkbridge.kube.client import KubeClient
from vkbridge.kube.kubeconfig import load_kubeconfig_file


@pytest.fixture
async def home(consumer: ControlPlane) -> AsyncIterator[KubeClient]:
    """The consumer (home) cluster as its admin."""
    async with KubeClient(load_kubeconfig_file(consumer.admin_kubeconfig), name="consumer") as client:
        yield client


@pytest.fixture
async def pool_admin(pool: ControlPlane) -> AsyncIterator[KubeClient]:
    """The pool cluster as its admin (not the tenant identity of a bundle)."""
    async with KubeClient(load_kubeconfig_file(pool.admin_kubeconfig), name="pool-admin") as client:
        yield client
