"""Starting Liqo's VK without its two extra CRDs is one clear error, not a differential suite timing out."""

from __future__ import annotations

from pathlib import Path

import pytest

from e2e.liqo_vk import LiqoUnavailable, LiqoVkProcess
from e2e.vkbridge_proc import VkbridgeOptions


def test_liqo_vk_refuses_to_start_without_the_extra_crds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VKBRIDGE_LIQO_EXTRA_CRDS", str(tmp_path / "absent"))
    opts = VkbridgeOptions(tmp_path / "kubeconfig", "c0123456789ab", "c-1", "kubeconfig-x", "liqo-tenant-x")
    vk = LiqoVkProcess(opts, tmp_path / "liqo.log", binary=Path("/bin/true"))
    with pytest.raises(LiqoUnavailable, match=r"ips\.ipam\.liqo\.io .* VKBRIDGE_LIQO_EXTRA_CRDS"):
        vk.start()
    assert vk.proc is None and not (tmp_path / "liqo.log").exists()
