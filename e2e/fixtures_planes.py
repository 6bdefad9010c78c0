"""pytest plugin: the session's two control planes and per-test namespaces on them.

Registered from tests/conftest.py (``pytest_plugins``). VKBRIDGE_KEEP_PLANES=1 leaves the planes
running after the session (their kubeconfigs are printed) so a failure can be inspected with kubectl.
"""

from __future__ import annotations

import os
import re
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping

import pytest

from e2e.controlplane import ControlPlane, PlaneError, wait_for
from e2e.planes import Planes, start_planes

FreshNs = Callable[..., str]


@pytest.fixture(scope="session")
def plane_extra_args() -> dict[str, dict[str, list[str]]]:
    """Per plane, per component, extra arguments; a conftest overrides it (the differential suite's audit)."""
    return {}


@pytest.fixture(scope="session")
def planes(plane_extra_args: dict[str, dict[str, list[str]]]) -> Iterator[Planes]:
    started = start_planes(extra_args=plane_extra_args)
    yield started
    if os.environ.get("VKBRIDGE_KEEP_PLANES") == "1":
        started.keep()
        for p in (started.consumer, started.pool):
            sys.stderr.write(f"\nkept plane {p.name}: KUBECONFIG={p.admin_kubeconfig} (pids {p.pids()})\n")
    else:
        started.stop()


@pytest.fixture(scope="session")
def consumer(planes: Planes) -> ControlPlane:
    return planes.consumer


@pytest.fixture(scope="session")
def pool(planes: Planes) -> ControlPlane:
    return planes.pool


def _slug(text: str, limit: int) -> str:
    text = re.sub(r"^test_", "", text.lower())
    return re.sub(r"[^a-z0-9]+", "-", text)[:limit].strip("-") or "ns"


@pytest.fixture
def fresh_ns(request: pytest.FixtureRequest) -> Iterator[FreshNs]:
    """Factory: ``fresh_ns(plane, prefix=None, labels=None, wait_sa=True) -> name``.

    Names are short (at most 28 chars) so that derived remote names (``<ns>-<consumer id>``) stay valid
    labels. With ``wait_sa`` it returns once the "default" ServiceAccount exists, because pod creation
    is rejected before that. Namespaces are deleted after the test without waiting for them to go.
    """
    created: list[tuple[ControlPlane, str]] = []

    def make(
        plane: ControlPlane,
        prefix: str | None = None,
        labels: Mapping[str, str] | None = None,
        wait_sa: bool = True,
    ) -> str:
        name = f"{_slug(prefix or request.node.name, 20)}-{uuid.uuid4().hex[:7]}"
        meta: dict[str, object] = {"name": name, "labels": dict(labels or {})}
        status, body = plane.api("POST", "/api/v1/namespaces", {"metadata": meta})
        if status != 201:
            raise PlaneError(f"{plane.name}: creating namespace {name}: {status} {body}")
        created.append((plane, name))
        if wait_sa:
            path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
            wait_for(lambda: plane.api("GET", path)[0] == 200, 30, f"serviceaccount {name}/default")
        return name

    yield make
    for plane, name in created:
        try:
            plane.api("DELETE", f"/api/v1/namespaces/{name}")
        except OSError as e:  # the plane may be down after a resilience test; nothing to clean then
            sys.stderr.write(f"fresh_ns: could not delete {plane.name}/{name}: {e}\n")
