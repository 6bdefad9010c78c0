"""Fixtures of the differential suite: planes that audit every write, and the one implementation switch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.audit import audit_args
from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle
from e2e.liqo_vk import find_liqo_vk
from tests.differential.harness import Audit, ImplSwitch

# Writes only (the suite counts what each implementation writes per object); reads would be most of it.
WRITES_ONLY = [
    {"level": "Metadata", "verbs": ["create", "update", "patch", "delete", "deletecollection"]},
    {"level": "None"},
]
PLANES = ("consumer", "pool")


@pytest.fixture(scope="session")
def audit_logs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("audit")
    return {name: d / f"audit-{name}.log" for name in PLANES}


@pytest.fixture(scope="session")
def plane_extra_args(audit_logs: dict[str, Path]) -> dict[str, dict[str, list[str]]]:
    """Overrides e2e.fixtures_planes': both API servers write an audit log of writes (JSON lines)."""
    return audit_args(next(iter(audit_logs.values())).parent / "policy.yaml", WRITES_ONLY, audit_logs)


@pytest.fixture(scope="session")
def switch(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, emulator: EmulatorHandle,
    vk_home_kubeconfig: Path, audit_logs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[ImplSwitch]:  # fmt: skip
    find_liqo_vk()  # builds it once per machine when missing, before any plane time is spent on it
    sw = ImplSwitch(consumer, bundle, vk_home_kubeconfig, tmp_path_factory.mktemp("differential"))
    sw.audit = Audit(audit_logs)
    yield sw
    sw.stop()
