"""The local control planes behave like the clusters vkbridge meets: version, Liqo CRDs, client-cert
authentication, CSR signing by kube-controller-manager, scheduling, restart/compaction and clean stop."""

from __future__ import annotations

import base64
import json
import subprocess
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID

from e2e.binaries import find_binaries
from e2e.controlplane import COMPONENTS, ControlPlane, PlaneError, wait_for
from e2e.fixtures_planes import FreshNs
from e2e.liqo_chart import liqo_crds_dir, load_manifests
from e2e.pki import CertAuthority, new_ec_key
from e2e.planes import Planes

pytestmark = pytest.mark.integration

LIQO_KINDS = {
    "offloading.liqo.io/v1beta1": {
        "VirtualNode",
        "NamespaceOffloading",
        "NamespaceMap",
        "ShadowPod",
        "Quota",
    },
    "authentication.liqo.io/v1beta1": {"ResourceSlice", "Renew", "Identity"},
    "core.liqo.io/v1beta1": {"ForeignCluster"},
}


def _whoami(plane: ControlPlane, kubeconfig: Path) -> subprocess.CompletedProcess[str]:
    argv = [str(plane.bin["kubectl"]), f"--kubeconfig={kubeconfig}", "auth", "whoami", "-o", "json"]
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def _user(plane: ControlPlane, kubeconfig: Path) -> dict[str, Any]:
    res = _whoami(plane, kubeconfig)
    assert res.returncode == 0, res.stderr
    user: dict[str, Any] = json.loads(res.stdout)["status"]["userInfo"]
    return user


def test_find_binaries_lookup_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def exe(path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("#!/bin/sh\n")
        path.chmod(0o755)
        return path

    names = ("etcd", "kube-apiserver", "kube-controller-manager", "kubectl")
    override = exe(tmp_path / "override" / "my-etcd")
    assets = tmp_path / "assets"
    exe(assets / "kube-apiserver")
    for version in ("1.9.0", "1.10.0"):  # numeric, not lexical, order: 1.10.0 is the newest
        for n in names:
            exe(tmp_path / "proj" / "k8s" / f"{version}-linux-amd64" / n)
    exe(tmp_path / "proj" / "k8s" / "1.11.0-linux-amd64" / "kubectl")  # incomplete: skipped
    monkeypatch.setenv("TEST_ASSET_ETCD", str(override))
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(assets))
    monkeypatch.setenv("VKBRIDGE_K8S_BIN", str(tmp_path / "proj"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    found = find_binaries(names, build=False)
    assert found["etcd"] == override
    assert found["kube-apiserver"] == assets / "kube-apiserver"
    newest = tmp_path / "proj" / "k8s" / "1.10.0-linux-amd64"
    assert found["kube-controller-manager"] == newest / "kube-controller-manager"
    assert found["kubectl"] == newest / "kubectl"

    monkeypatch.setenv("VKBRIDGE_K8S_BIN", str(tmp_path / "empty"))
    exe(tmp_path / "xdg" / "kubebuilder-envtest" / "k8s" / "1.2.3-linux-amd64" / "kubectl")
    found = find_binaries(("kubectl",), build=False)
    assert (
        found["kubectl"] == tmp_path / "xdg" / "kubebuilder-envtest" / "k8s" / "1.2.3-linux-amd64" / "kubectl"
    )
    with pytest.raises(RuntimeError, match="kube-scheduler"):
        find_binaries(("kube-scheduler",), build=False)


def test_both_planes_serve_the_built_version(planes: Planes) -> None:
    built = subprocess.run(
        [str(planes.consumer.bin["kube-apiserver"]), "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[-1]
    assert built.startswith("v1.")
    for plane in (planes.consumer, planes.pool):
        status, body = plane.api("GET", "/version", admin=False)
        assert status == 200, body
        assert body["gitVersion"] == built
    assert planes.consumer.url != planes.pool.url


def chart_crd_names() -> set[str]:
    return {
        doc["metadata"]["name"]
        for f in liqo_crds_dir().glob("*.yaml")
        for doc in load_manifests(f)
        if doc.get("kind") == "CustomResourceDefinition"
    }


def test_liqo_crds_are_installed_and_served(planes: Planes) -> None:
    for plane in (planes.consumer, planes.pool):
        for group_version, kinds in LIQO_KINDS.items():
            status, body = plane.api("GET", f"/apis/{group_version}")
            assert status == 200, (plane.name, group_version, body)
            assert kinds <= {r["kind"] for r in body["resources"]}, (plane.name, group_version)
        status, body = plane.api("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
        liqo = [c for c in body["items"] if c["spec"]["group"].endswith("liqo.io")]
        # Every CRD of Liqo's chart, as Liqo's controller-manager needs (28 in v1.2.0, networking's too).
        assert {c["metadata"]["name"] for c in liqo} == chart_crd_names(), plane.name
        for crd in liqo:
            conds = {c["type"]: c["status"] for c in crd["status"]["conditions"]}
            assert conds.get("Established") == "True", crd["metadata"]["name"]


def test_issued_client_cert_authenticates_only_on_its_plane(planes: Planes, tmp_path: Path) -> None:
    consumer, pool = planes.consumer, planes.pool
    cert, key = consumer.issue_client_cert("alice", ["team-a", "team-b"])
    assert key is not None
    kubeconfig = consumer.write_kubeconfig(tmp_path / "alice.kubeconfig", cert, key)
    assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
    user = _user(consumer, kubeconfig)
    assert user["username"] == "alice"
    assert {"team-a", "team-b", "system:authenticated"} <= set(user["groups"])

    # The same certificate pointed at the pool (its own CA) and a stranger's certificate are refused.
    on_pool = pool.write_kubeconfig(tmp_path / "on-pool.kubeconfig", cert, key)  # pool URL and CA
    res = _whoami(pool, on_pool)
    assert res.returncode != 0 and "Unauthorized" in res.stderr, res.stderr
    stranger_cert, stranger_key = CertAuthority.create("stranger").issue("alice", ["system:masters"])
    assert stranger_key is not None
    stranger = consumer.write_kubeconfig(tmp_path / "stranger.kubeconfig", stranger_cert, stranger_key)
    res = _whoami(consumer, stranger)
    assert res.returncode != 0 and "Unauthorized" in res.stderr, res.stderr


def test_csr_is_signed_by_kube_controller_manager_after_approval(planes: Planes, tmp_path: Path) -> None:
    plane = planes.pool
    key = new_ec_key()
    subject = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "team-b"),
            x509.NameAttribute(NameOID.COMMON_NAME, "bob"),
        ]
    )
    csr = x509.CertificateSigningRequestBuilder().subject_name(subject).sign(key, hashes.SHA256())
    name = f"bob-{uuid.uuid4().hex[:8]}"
    body = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "request": base64.b64encode(csr.public_bytes(serialization.Encoding.PEM)).decode(),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "expirationSeconds": 3600,
            "usages": ["client auth", "digital signature"],
        },
    }
    path = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
    status, created = plane.api("POST", path, body)
    assert status == 201, created
    try:
        assert not created.get("status", {}).get("certificate")
        plane.kubectl("certificate", "approve", name)

        def issued() -> str | None:
            status, obj = plane.api("GET", f"{path}/{name}")
            cert: str | None = obj.get("status", {}).get("certificate") if status == 200 else None
            return cert

        cert_pem = base64.b64decode(wait_for(issued, 60, f"csr {name} to be signed"))
        cert = x509.load_pem_x509_certificate(cert_pem)
        assert cert.issuer == plane.ca.cert.subject
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "bob"
        lifetime = cert.not_valid_after_utc - cert.not_valid_before_utc
        assert lifetime.total_seconds() <= 3600 + 600
        key_pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
        kubeconfig = plane.write_kubeconfig(tmp_path / "bob.kubeconfig", cert_pem, key_pem)
        user = _user(plane, kubeconfig)
        assert user["username"] == "bob"
        assert "team-b" in user["groups"]
    finally:
        plane.api("DELETE", f"{path}/{name}")


def test_controller_manager_and_scheduler_are_running(planes: Planes, fresh_ns: FreshNs) -> None:
    plane = planes.consumer
    ns = fresh_ns(plane)  # returns once the KCM's serviceaccount controller made "default"
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "probe"},
        "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:1"}]},
    }
    status, body = plane.api("POST", f"/api/v1/namespaces/{ns}/pods", pod)
    assert status == 201, body

    def unschedulable() -> bool:
        _, obj = plane.api("GET", f"/api/v1/namespaces/{ns}/pods/probe")
        conds = obj.get("status", {}).get("conditions", [])
        return any(c["type"] == "PodScheduled" and c.get("reason") == "Unschedulable" for c in conds)

    wait_for(unschedulable, 60, "the scheduler to report the pod Unschedulable (there are no nodes)")


def _processes_mentioning(text: str) -> list[int]:
    pids = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                pids.append(int(cmdline.parent.name))
        except OSError:
            continue
    return pids


def _etcd_range_at(plane: ControlPlane, revision: int) -> int:
    body = json.dumps({"key": base64.b64encode(b"/").decode(), "revision": str(revision)}).encode()
    req = urllib.request.Request(plane.etcd_url + "/v3/kv/range", data=body, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as e:
        return e.code


def test_restart_compaction_and_clean_stop(tmp_path: Path) -> None:
    plane = ControlPlane("scratch", base_dir=tmp_path, service_cidr="10.120.0.0/24")
    pids: list[int] = []
    try:
        plane.start()
        assert set(plane.pids()) == set(COMPONENTS)
        pids += plane.pids().values()
        status, body = plane.api("GET", "/api/v1/namespaces")
        old_rv = body["metadata"]["resourceVersion"]
        for i in range(3):
            assert plane.api("POST", "/api/v1/namespaces", {"metadata": {"name": f"churn-{i}"}})[0] == 201
        assert _etcd_range_at(plane, int(old_rv)) == 200
        revision = plane.compact_etcd()
        assert revision > int(old_rv)
        assert _etcd_range_at(plane, int(old_rv)) != 200  # "required revision has been compacted"

        plane.restart_apiserver()
        assert plane.pids()["kube-apiserver"] not in pids
        pids.append(plane.pids()["kube-apiserver"])
        status, _ = plane.api("GET", "/readyz", admin=False)
        assert status == 200
        # The restarted watch cache starts after the compaction: an old resourceVersion gets 410 Gone.
        status, text = plane.api(
            "GET", f"/api/v1/namespaces?watch=1&resourceVersion={old_rv}&timeoutSeconds=5"
        )
        raw = text if isinstance(text, str) else json.dumps(text, separators=(",", ":"))
        assert status == 410 or '"code":410' in raw, (status, raw)
        assert (
            plane.kubectl("get", "namespace", "churn-2", "-o", "name").stdout.strip() == "namespace/churn-2"
        )
    finally:
        plane.stop()
    for pid in pids:
        assert not Path(f"/proc/{pid}").exists(), pid
    assert _processes_mentioning(str(plane.base_dir)) == []
    assert not plane.base_dir.exists()
    plane.stop()  # idempotent


def test_failed_start_raises_with_the_component_log(tmp_path: Path) -> None:
    plane = ControlPlane("broken", base_dir=tmp_path, extra_args={"kube-apiserver": ["--no-such-flag=1"]})
    try:
        with pytest.raises(PlaneError, match="no-such-flag") as err:
            plane.start(timeout=60)
        assert "kube-apiserver exited" in str(err.value)
        assert plane.pids() == {}
    finally:
        plane.stop()
    assert not plane.base_dir.exists()
