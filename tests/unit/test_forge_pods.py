"""Table tests for reflectors.forge.pods, plus the purity contract of the whole forge package."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

import pytest

import reflectors.forge
from reflectors.forge import constants as c
from reflectors.forge.pods import (
    has_remote_unavailable_label,
    is_daemonset_pod,
    is_terminal,
    is_terminating,
    pod_key,
    service_account_name,
)


def pod(phase: str | None = None, **metadata: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "web-0", "namespace": "team", **metadata},
        "spec": {},
        "status": {} if phase is None else {"phase": phase},
    }


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(pod("Succeeded"), True, id="succeeded-is-terminal"),
        pytest.param(pod("Failed"), True, id="failed-is-terminal"),
        pytest.param(pod("Running"), False, id="running-is-not"),
        pytest.param(pod("Pending"), False, id="pending-is-not"),
        pytest.param(pod("Unknown"), False, id="unknown-is-not"),
        pytest.param(pod(), False, id="no-phase-is-not"),
        pytest.param(None, False, id="missing-pod-is-not"),
    ],
)
def test_is_terminal(obj: dict[str, Any] | None, expected: bool) -> None:
    assert is_terminal(obj) is expected


@pytest.mark.parametrize(
    ("obj", "expected"),
    [
        pytest.param(pod(deletionTimestamp="2026-11-29T10:00:00Z"), True, id="deletion-timestamp-set"),
        pytest.param(pod(deletionTimestamp=None), False, id="deletion-timestamp-null"),
        pytest.param(pod(), False, id="live-pod"),
        pytest.param(None, False, id="missing-pod"),
    ],
)
def test_is_terminating(obj: dict[str, Any] | None, expected: bool) -> None:
    assert is_terminating(obj) is expected


def owner(kind: str, controller: bool | None = True, api_version: str = "apps/v1") -> dict[str, Any]:
    ref: dict[str, Any] = {"apiVersion": api_version, "kind": kind, "name": "o", "uid": "u"}
    if controller is not None:
        ref["controller"] = controller
    return ref


@pytest.mark.parametrize(
    ("owners", "expected"),
    [
        pytest.param([owner("DaemonSet")], True, id="daemonset-controlled"),
        pytest.param([owner("ReplicaSet"), owner("DaemonSet")], True, id="daemonset-among-owners"),
        pytest.param([owner("DaemonSet", controller=False)], False, id="daemonset-not-controller"),
        pytest.param([owner("DaemonSet", controller=None)], False, id="daemonset-controller-unset"),
        pytest.param([owner("DaemonSet", api_version="example.com/v1")], False, id="foreign-daemonset-kind"),
        pytest.param([owner("StatefulSet")], False, id="statefulset"),
        pytest.param(None, False, id="bare-pod"),
    ],
)
def test_is_daemonset_pod(owners: list[dict[str, Any]] | None, expected: bool) -> None:
    assert is_daemonset_pod(pod(ownerReferences=owners)) is expected


def test_pod_key_is_namespace_slash_name() -> None:
    assert pod_key(pod()) == "team/web-0"


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        pytest.param({c.REMOTE_UNAVAILABLE_LABEL: "true"}, True, id="label-true"),
        pytest.param({c.REMOTE_UNAVAILABLE_LABEL: "false"}, False, id="label-false"),
        pytest.param({}, False, id="label-absent"),
    ],
)
def test_has_remote_unavailable_label(labels: dict[str, str], expected: bool) -> None:
    assert has_remote_unavailable_label(pod(labels=labels)) is expected


def test_service_account_name_defaults_to_default() -> None:
    assert service_account_name(pod()) == "default"
    assert service_account_name({"spec": {"serviceAccountName": "builder"}}) == "builder"


FORBIDDEN = {"asyncio", "aiohttp", "kubernetes_asyncio", "socket", "subprocess", "vkbridge", "time", "random"}


@pytest.mark.parametrize(
    "path",
    sorted(Path(reflectors.forge.__file__).parent.glob("*.py")),
    ids=lambda p: p.name,
)
def test_forge_module_is_pure(path: Path) -> None:
    """No I/O, no clients, no clock or randomness: the import-linter contract, and determinism."""
    tree = ast.parse(path.read_text())
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            imported.add(node.module.split(".")[0])
    assert not imported & FORBIDDEN
    calls = {ast.unparse(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert not {"datetime.now", "datetime.utcnow", "print", "open"} & calls
