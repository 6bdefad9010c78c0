"""Pure parts of the real-worker testbed (e2e/workers): images, configs, address picking."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import tarfile
import tomllib
from pathlib import Path

from pytest import MonkeyPatch

from e2e.workers import host
from e2e.workers.containerd import CniNetwork, cni_conflist, config_toml
from e2e.workers.images import ImageSpec, docker_archive, rootfs_layer
from e2e.workers.kubelet import KubeletSpec, kubelet_config


def test_docker_archive_is_one_layer_tagged_for_linux_amd64(tmp_path: Path) -> None:
    fake = tmp_path / "busybox"
    fake.write_bytes(b"\x7fELF not really")
    layer = rootfs_layer(fake, ["sh", "echo"])

    def member(tar: tarfile.TarFile, name: str) -> bytes:
        f = tar.extractfile(name)
        assert f is not None
        return f.read()

    with tarfile.open(
        fileobj=io.BytesIO(docker_archive(ImageSpec("busybox:1.36", ["sh"]), layer))
    ) as archive:
        manifest = json.loads(member(archive, "manifest.json"))
        config = json.loads(member(archive, manifest[0]["Config"]))
        layer_read = member(archive, manifest[0]["Layers"][0])
    assert manifest[0]["RepoTags"] == ["busybox:1.36"]
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["rootfs"]["diff_ids"] == ["sha256:" + hashlib.sha256(layer_read).hexdigest()]
    with tarfile.open(fileobj=io.BytesIO(layer_read)) as tar:
        members = {m.name: m for m in tar}
    assert members["bin/sh"].issym() and members["bin/sh"].linkname == "busybox"
    assert members["bin/busybox"].mode == 0o755


def test_containerd_config_keeps_everything_under_its_base_and_sets_what_runc_needs_here() -> None:
    base = Path("/tmp/vkbw-x/n0/containerd")
    net = CniNetwork("vkbw-x-0", "vkbwxb0", "198.19.1.0/24")
    cfg = tomllib.loads(config_toml(base, net))
    cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
    assert cfg["root"].startswith(str(base)) and cfg["state"].startswith(str(base))
    assert cfg["grpc"]["address"] == str(base / "containerd.sock")
    assert cri["restrict_oom_score_adj"] is True and cri["disable_apparmor"] is True
    assert cri["netns_mounts_under_state_dir"] is True
    assert cri["containerd"]["snapshotter"] == "native"
    assert cri["sandbox_image"] == "registry.k8s.io/pause:3.10"
    assert cri["cni"]["conf_dir"] == str(base / "net.d")
    bridge = cni_conflist(base, net)["plugins"][0]  # type: ignore[index]
    assert bridge["ipMasq"] is False and bridge["ipam"]["dataDir"].startswith(str(base))


def test_kubelet_config_has_the_settings_this_machine_needs() -> None:
    cfg = kubelet_config(KubeletSpec("n", "198.18.0.2", port=1, healthz_port=2), Path("/b"), "unix:///s")
    assert cfg["failCgroupV1"] is False and cfg["cgroupsPerQOS"] is False
    assert cfg["cgroupDriver"] == "cgroupfs" and cfg["enforceNodeAllocatable"] == []
    assert cfg["failSwapOn"] is False and cfg["readOnlyPort"] == 0
    assert cfg["authentication"]["anonymous"]["enabled"] is False
    assert cfg["authentication"]["webhook"]["enabled"] is True
    assert cfg["authorization"]["mode"] == "Webhook"
    assert cfg["address"] == "198.18.0.2" and cfg["evictionHard"] == {}


def test_picked_testbed_addresses_avoid_what_the_host_uses() -> None:
    used = {ipaddress.IPv4Network("198.18.1.0/24"), ipaddress.IPv4Network("198.18.0.3/32")}
    picked = host.pick_free(host.NODE_IP_RANGE, 32, 3, used)
    assert [str(n) for n in picked] == ["198.18.0.1/32", "198.18.0.2/32", "198.18.0.4/32"]
    subnets = host.pick_free(host.POD_NET_RANGE, 24, 1, {ipaddress.IPv4Network("198.19.1.7/32")})
    assert [str(n) for n in subnets] == ["198.19.2.0/24"]
    assert all(n.subnet_of(ipaddress.IPv4Network("198.18.0.0/15")) for n in picked + subnets)


def test_address_claims_of_two_sessions_never_overlap(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    # CI runs pytest sessions side by side; a pod subnet is on no interface until its first pod runs.
    monkeypatch.setattr(host, "CLAIMS_DIR", tmp_path)
    monkeypatch.setattr(host, "used_ipv4", set)
    first, second = host.AddressClaim("vkbwaaaa"), host.AddressClaim("vkbwbbbb")
    a = first.pick(host.POD_NET_RANGE, 24, 2) + first.pick(host.NODE_IP_RANGE, 32, 1)
    b = second.pick(host.POD_NET_RANGE, 24, 2) + second.pick(host.NODE_IP_RANGE, 32, 1)
    assert not any(x.overlaps(y) for x in a for y in b)
    first.release()
    assert not (tmp_path / "vkbwaaaa.claim").exists()
    assert host.AddressClaim("vkbwcccc").pick(host.POD_NET_RANGE, 24, 1) == a[:1]  # released: free again


def test_address_claim_of_a_dead_process_is_dropped(tmp_path: Path, monkeypatch: MonkeyPatch) -> None:
    monkeypatch.setattr(host, "CLAIMS_DIR", tmp_path)
    monkeypatch.setattr(host, "used_ipv4", set)
    stale = tmp_path / "vkbwdead.claim"
    stale.write_text(f"{2**22 + 1}\n198.19.1.0/24\n")  # above pid_max's default: no such process
    assert host.AddressClaim("vkbwlive").pick(host.POD_NET_RANGE, 24, 1)[0] == ipaddress.IPv4Network(
        "198.19.1.0/24"
    )
    assert not stale.exists()
