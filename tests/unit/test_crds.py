"""Liqo's own CRDs, as the test planes install them, serve every Liqo resource vkbridge talks to.

The repo keeps no copy of Liqo's CRDs: the planes install every CRD of Liqo's chart at the pinned version,
fetched from Liqo's Go module (e2e/liqo_chart.py). These checks pin what vkbridge depends on against those
manifests: the group, version, plural, kind and scope behind each path vkbridge builds, the status
subresource where vkbridge or Liqo writes status, and the top-level fields vkbridge writes (a renamed or
pruned field would make vkbridge's writes vanish on a real Liqo cluster). The chart must also hold the two
CRDs Liqo's own VK waits for and the networking group Liqo's controller-manager's REST mapper asks for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from e2e.liqo_chart import LiqoChartUnavailable, liqo_crds_dir, load_manifests
from vkbridge.kube import resources

Crd = dict[str, Any]

# Every Liqo resource vkbridge's code addresses (vkbridge/kube/resources.py), found by its group.
VKBRIDGE_LIQO_RESOURCES = [
    r for r in vars(resources).values() if isinstance(r, resources.Resource) and r.group.endswith("liqo.io")
]
# Kinds the testbed writes as Liqo would (bundle, Liqo's VK), beyond those vkbridge itself reads or writes.
TESTBED_KINDS = {
    ("offloading.liqo.io", "NamespaceOffloading"),
    ("offloading.liqo.io", "Quota"),
    ("offloading.liqo.io", "VkOptionsTemplate"),
    ("authentication.liqo.io", "Identity"),
    ("authentication.liqo.io", "Tenant"),
    ("core.liqo.io", "ForeignCluster"),
    # Liqo's own VK waits for these two before it reflects a namespace (its EndpointSlice reflector).
    ("ipam.liqo.io", "IP"),
    ("offloading.liqo.io", "ShadowEndpointSlice"),
}
# Top-level fields vkbridge writes or reads, per kind (renaming or pruning any of them breaks vkbridge).
FIELDS = {
    "ShadowPod": {"spec": {"pod"}, "status": {"phase"}},
    "NamespaceMap": {"spec": {"desiredMapping"}, "status": {"currentMapping"}},
    "ResourceSlice": {"spec": {"csr"}, "status": {"resources", "authParams", "conditions"}},
    "VirtualNode": {"spec": {"template", "createNode", "clusterID"}},
    "Renew": {"spec": {"consumerClusterID"}, "status": {"authParams"}},
}


@pytest.fixture(scope="module")
def liqo_crds() -> dict[tuple[str, str], Crd]:
    """(group, kind) -> CRD, for every CRD in Liqo's chart."""
    try:
        directory: Path = liqo_crds_dir()
    except LiqoChartUnavailable as exc:
        if os.environ.get("CI"):
            pytest.fail(f"{exc}: CI must check vkbridge against Liqo's own CRDs")
        pytest.skip(str(exc))
    found: dict[tuple[str, str], Crd] = {}
    for path in sorted(directory.glob("*.yaml")):
        for doc in load_manifests(path):
            if doc.get("kind") != "CustomResourceDefinition":
                continue
            key = (doc["spec"]["group"], doc["spec"]["names"]["kind"])
            assert key not in found, f"{key} declared twice"
            found[key] = doc
    return found


def _version(crd: Crd, name: str) -> dict[str, Any]:
    matches = [v for v in crd["spec"]["versions"] if v["name"] == name]
    assert matches, f"{crd['metadata']['name']} does not declare {name}"
    version: dict[str, Any] = matches[0]
    return version


def test_vkbridge_addresses_some_liqo_resources() -> None:
    """The table below is not empty by accident (a rename in resources.py would empty it)."""
    assert {r.plural for r in VKBRIDGE_LIQO_RESOURCES} >= {"shadowpods", "namespacemaps", "resourceslices"}


@pytest.mark.parametrize("res", VKBRIDGE_LIQO_RESOURCES, ids=lambda r: r.plural)
def test_liqo_serves_the_path_vkbridge_builds(liqo_crds: dict[tuple[str, str], Crd], res: Any) -> None:
    crd = liqo_crds.get((res.group, res.kind))
    assert crd is not None, f"Liqo's chart has no {res.group}/{res.kind}"
    assert crd["spec"]["names"]["plural"] == res.plural
    assert crd["spec"]["scope"] == ("Namespaced" if res.namespaced else "Cluster")
    version = _version(crd, res.version)
    assert version["served"] and version["storage"], f"{res.kind} {res.version} is not served and stored"


@pytest.mark.parametrize("kind", sorted(FIELDS))
def test_fields_vkbridge_uses_are_declared(liqo_crds: dict[tuple[str, str], Crd], kind: str) -> None:
    ((crd,),) = [[c for (_, k), c in liqo_crds.items() if k == kind]]
    version = _version(crd, "v1beta1")
    root = version["schema"]["openAPIV3Schema"]["properties"]
    for top, fields in FIELDS[kind].items():
        assert top in root, f"{kind} has no {top}"
        missing = fields - set(root[top].get("properties", {}))
        assert not missing, f"{kind}.{top} lacks {sorted(missing)}"
        if top == "status":
            assert "status" in (version.get("subresources") or {}), f"{kind} has no status subresource"


def test_the_chart_holds_what_the_testbed_and_liqos_components_need(
    liqo_crds: dict[tuple[str, str], Crd],
) -> None:
    assert set(liqo_crds) >= TESTBED_KINDS, sorted(TESTBED_KINDS - set(liqo_crds))
    # Liqo's controller-manager refuses to start unless networking.liqo.io is served (its REST mapper).
    assert any(group == "networking.liqo.io" for group, _ in liqo_crds)
