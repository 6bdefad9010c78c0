"""`vkbridge doctor` reports healthy on a working setup and names the problem when it is not."""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.bundle import Bundle, kubeconfig_dict
from e2e.controlplane import ControlPlane
from e2e.pki import CertAuthority
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import REPO, VkbridgeProcess
from tests.fixtures_vkbridge import node_ready
from tests.integration.helpers import RecordingServer, get, must, token_file_kubeconfig, wait_until

pytestmark = pytest.mark.integration
TOKEN_MARKER = "MARKER-TOKEN-from-a-local-file-5c1d"


def doctor(consumer: ControlPlane, bundle: Bundle) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vkbridge", "doctor", f"--home-kubeconfig={consumer.admin_kubeconfig}",
         f"--nodename={bundle.slug}", f"--tenant-namespace={bundle.tenant_ns}",
         f"--foreign-kubeconfig-secret-name={bundle.secret_name}", f"--foreign-cluster-id={bundle.slug}"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip


def set_kubeconfig_data(consumer: ControlPlane, path: str, data: str) -> None:
    must(consumer, "PATCH", path, {"data": {"kubeconfig": data}}, content_type="application/merge-patch+json")


@contextlib.contextmanager
def kubeconfig_in_secret(
    consumer: ControlPlane, bundle: Bundle, kubeconfig: dict[str, Any]
) -> Iterator[None]:
    """The peering Secret carries ``kubeconfig`` inside the block; its original bytes are back after it."""
    path = f"/api/v1/namespaces/{bundle.tenant_ns}/secrets/{bundle.secret_name}"
    original = get(consumer, path)
    assert original is not None
    set_kubeconfig_data(consumer, path, base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode())
    try:
        yield
    finally:
        set_kubeconfig_data(consumer, path, original["data"]["kubeconfig"])


def revoked_kubeconfig(bundle: Bundle) -> dict[str, Any]:
    """Our identity, signed by a CA the pool does not trust: what a revoked credential looks like."""
    stranger = CertAuthority.create("not-the-pool-ca")
    cert, key = stranger.issue(bundle.identity_cn, [bundle.consumer_id], client=True)
    assert key is not None
    server = bundle.kubeconfig["clusters"][0]["cluster"]["server"]
    return kubeconfig_dict(server, bundle.ca_pem, cert, key, "revoked")


def test_doctor_reports_healthy(consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess) -> None:
    res = doctor(consumer, bundle)
    print(res.stdout)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK    virtual node" in res.stdout
    assert "OK    pool reachable" in res.stdout
    assert "grant: cpu used" in res.stdout
    assert res.stdout.strip().splitlines()[-1].startswith("healthy")


def test_doctor_names_a_blackholed_pool(
    consumer: ControlPlane, bundle: Bundle, tunnel: TunnelProxy, vkbridge: VkbridgeProcess
) -> None:
    tunnel.blackhole()
    try:
        res = doctor(consumer, bundle)
    finally:
        tunnel.restore()
    print(res.stdout)
    assert res.returncode == 1
    assert "FAIL  pool reachable" in res.stdout and "does not answer" in res.stdout
    wait_until(lambda: node_ready(consumer, bundle.slug) == "True", 30, "Ready again")


def test_doctor_names_a_revoked_credential(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess
) -> None:
    with kubeconfig_in_secret(consumer, bundle, revoked_kubeconfig(bundle)):
        res = doctor(consumer, bundle)
        print(res.stdout)
        assert res.returncode == 1
        assert "FAIL  pool reachable" in res.stdout and "rejects our credential" in res.stdout
    wait_until(
        lambda: node_ready(consumer, bundle.slug) == "True", 30, "Ready again with the valid credential"
    )


def test_doctor_refuses_a_kubeconfig_secret_naming_a_token_file_and_sends_nothing(
    consumer: ControlPlane, bundle: Bundle, tmp_path: Path
) -> None:
    """Issue 15 item 6: doctor read the Secret's ``tokenFile`` on the operator's machine and sent it."""
    marker = tmp_path / "token"
    marker.write_text(TOKEN_MARKER)
    with RecordingServer(tmp_path) as evil:
        with kubeconfig_in_secret(consumer, bundle, token_file_kubeconfig(evil.url, evil.ca_pem, marker)):
            res = doctor(consumer, bundle)
        print(res.stdout)
        assert not any(TOKEN_MARKER in h for h in evil.seen), "the file's token reached the server"
        assert evil.seen == [], "doctor sent a request to the Secret's server"
        assert res.returncode == 1
        line = next(x for x in res.stdout.splitlines() if x.startswith("FAIL  pool credential"))
        assert "sets tokenFile, a local file path" in line
        assert TOKEN_MARKER not in res.stdout + res.stderr


def test_revoked_credential_means_unauthorized_and_notready_then_recovers_without_restart(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess
) -> None:
    pid = vkbridge.pid
    mark = len(vkbridge.log_text())
    with kubeconfig_in_secret(consumer, bundle, revoked_kubeconfig(bundle)):
        vkbridge.wait_for_log("pool rejects our credential.*Rotate the credentials", 60, start=mark)
        wait_until(
            lambda: node_ready(consumer, bundle.slug) not in ("True", None), 90, "NotReady", interval=0.5
        )
    wait_until(
        lambda: node_ready(consumer, bundle.slug) == "True", 30, "Ready again with the valid credential"
    )
    assert vkbridge.pid == pid and vkbridge.alive(), "recovered without a restart"


def exec_plugin_kubeconfig(consumer: ControlPlane, where: Path) -> Path:
    """The admin's kubeconfig with its client certificate given by an exec credential plugin, as GKE's,
    EKS's and AKS's kubeconfigs give theirs (a script here that prints a client.authentication.k8s.io/v1
    ExecCredential, and fails unless kubectl's KUBERNETES_EXEC_INFO is set)."""
    doc = yaml.safe_load(Path(consumer.admin_kubeconfig).read_text())
    user = doc["users"][0]["user"]
    cert, key = (
        base64.b64decode(user.pop(k)).decode() for k in ("client-certificate-data", "client-key-data")
    )
    credential = {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"clientCertificateData": cert, "clientKeyData": key}}  # fmt: skip
    (where / "credential.json").write_text(json.dumps(credential))
    plugin = where / "cloud-auth-plugin"
    plugin.write_text(
        f'#!/bin/sh\n[ -n "$KUBERNETES_EXEC_INFO" ] || exit 3\nexec cat {where / "credential.json"}\n'
    )
    plugin.chmod(0o755)
    user["exec"] = {"apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                    "interactiveMode": "Never", "provideClusterInfo": False}  # fmt: skip
    path = where / "config"
    path.write_text(yaml.safe_dump(doc))
    return path


def doctor_as_operator(bundle: Bundle, home: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    return subprocess.run(
        [sys.executable, "-m", "vkbridge", "doctor", *flags, f"--nodename={bundle.slug}",
         f"--tenant-namespace={bundle.tenant_ns}", f"--foreign-kubeconfig-secret-name={bundle.secret_name}",
         f"--foreign-cluster-id={bundle.slug}"],
        capture_output=True, text=True, timeout=90, cwd=REPO, env={**env, "HOME": str(home)},
    )  # fmt: skip


def test_doctor_runs_the_exec_plugin_of_the_operators_kubeconfig(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess, tmp_path: Path
) -> None:
    config = exec_plugin_kubeconfig(consumer, tmp_path)
    res = doctor_as_operator(bundle, tmp_path, f"--home-kubeconfig={config}")
    print(res.stdout, res.stderr)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1].startswith("healthy")
    assert "BEGIN" not in res.stdout + res.stderr  # the plugin's credential is never shown


def test_doctor_without_flags_or_cluster_reads_the_operators_kube_config(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess, tmp_path: Path
) -> None:
    (tmp_path / ".kube").mkdir()
    exec_plugin_kubeconfig(consumer, tmp_path / ".kube")
    res = doctor_as_operator(bundle, tmp_path)
    print(res.stdout, res.stderr)
    assert res.returncode == 0, res.stdout + res.stderr
    assert res.stdout.strip().splitlines()[-1].startswith("healthy")


RBAC = "/apis/rbac.authorization.k8s.io/v1"


def rbac_path(doc: dict[str, Any]) -> str:
    plural = {"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings",
              "Role": "roles", "RoleBinding": "rolebindings"}[doc["kind"]]  # fmt: skip
    ns = doc["metadata"].get("namespace")
    return f"{RBAC}/namespaces/{ns}/{plural}" if ns else f"{RBAC}/{plural}"


def rbac_line(res: subprocess.CompletedProcess[str]) -> str:
    return next(x for x in res.stdout.splitlines() if " rbac: " in x)


def doctor_for(consumer: ControlPlane, slug: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vkbridge", "doctor", f"--home-kubeconfig={consumer.admin_kubeconfig}",
         f"--nodename={slug}", f"--tenant-namespace=liqo-tenant-{slug}", f"--foreign-cluster-id={slug}"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip


def test_doctor_checks_what_the_vk_service_account_may_do_and_names_the_fix(consumer: ControlPlane) -> None:
    """Issue 36 point 7: the per-node RBAC, asked of the API server (SubjectAccessReview) for the VK's
    ServiceAccount, against Liqo v1.2's own ClusterRole liqo-virtual-kubelet-local (from its chart) plus
    deploy/rbac-liqo-managed.yaml: without the latter, logs/exec answer 401/500 and vkbridge cannot
    start, and doctor said nothing. A peering of its own (namespace, ServiceAccount `<slug>`), set up as
    Liqo's controller-manager and the docs do, one step at a time."""
    from e2e.liqo_chart import chart_rbac

    slug = "d" + uuid.uuid4().hex[:12]
    tenant = f"liqo-tenant-{slug}"
    made: list[str] = []

    def create(path: str, body: dict[str, Any]) -> None:
        status, out = consumer.api("POST", path, body)
        if status == 201:
            made.append(f"{path}/{body['metadata']['name']}")
        else:
            assert status == 409, f"{path}: {status} {out}"

    try:
        create("/api/v1/namespaces", {"metadata": {"name": tenant}})
        create(f"/api/v1/namespaces/{tenant}/serviceaccounts", {"metadata": {"name": slug}})
        bare = doctor_for(consumer, slug)
        print(bare.stdout)
        assert bare.returncode == 1 and rbac_line(bare).startswith("FAIL"), bare.stdout
        assert "create tokenreviews" in rbac_line(bare) and "liqo-virtual-kubelet-local" in rbac_line(bare)

        # What Liqo's controller-manager binds for every VirtualNode: its ClusterRole, from its chart.
        role = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "liqo-virtual-kubelet-local"},
                "rules": chart_rbac("liqo-virtual-kubelet-local-ClusterRole")["rules"]}  # fmt: skip
        create(rbac_path(role), role)
        binding = {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                   "metadata": {"name": f"liqo-node-{slug}"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                               "name": "liqo-virtual-kubelet-local"},
                   "subjects": [{"kind": "ServiceAccount", "name": slug, "namespace": tenant}]}  # fmt: skip
        create(rbac_path(binding), binding)
        liqo_only = wait_until(
            lambda: (r := doctor_for(consumer, slug)) and "create nodes" not in rbac_line(r) and r, 30,
            "Liqo's ClusterRole to take effect",
        )  # fmt: skip
        print(liqo_only.stdout)
        missing = rbac_line(liqo_only).split(" may not: ", 1)[1].split(": apply", 1)[0].split("; ")
        assert missing == [
            "create tokenreviews",
            "create subjectaccessreviews",
            f"watch resourceslices in {tenant}",
        ], rbac_line(liqo_only)
        assert "apply deploy/rbac-liqo-managed.yaml" in rbac_line(liqo_only)

        # The documented fix: deploy/rbac-liqo-managed.yaml for this node, as the docs say to apply it.
        text = (REPO / "deploy" / "rbac-liqo-managed.yaml").read_text().replace("__SLUG__", slug)
        for doc in (d for d in yaml.safe_load_all(text) if d):
            create(rbac_path(doc), doc)
        fixed = wait_until(
            lambda: (r := doctor_for(consumer, slug)) and rbac_line(r).startswith("OK") and r, 30,
            "deploy/rbac-liqo-managed.yaml to take effect",
        )  # fmt: skip
        print(fixed.stdout)
    finally:
        for path in reversed(made):
            consumer.api("DELETE", path)
