"""vkbridge's consumer identity exactly as deployed: its ServiceAccount, deploy/rbac.yaml, and a token."""

from __future__ import annotations

import base64
from pathlib import Path

import yaml

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane

DEPLOY = Path(__file__).resolve().parent.parent / "deploy"


def service_account_kubeconfig(consumer: ControlPlane, bundle: Bundle, directory: Path) -> Path:
    """vkbridge's consumer identity exactly as deployed: ServiceAccount `<slug>` in the tenant namespace
    with deploy/rbac.yaml (least privilege), and a token for it. Idempotent."""
    for name in ("serviceaccount.yaml", "rbac.yaml"):
        text = (DEPLOY / name).read_text().replace("__SLUG__", bundle.slug)
        consumer.kubectl("apply", "--server-side", "--force-conflicts", "-f", "-", input=text)
    status, body = consumer.api(
        "POST",
        f"/api/v1/namespaces/{bundle.tenant_ns}/serviceaccounts/{bundle.slug}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 86400},
        },
    )
    assert status == 201, body
    kubeconfig = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "vk",
        "clusters": [{"name": "consumer", "cluster": {
            "server": consumer.url, "certificate-authority-data": base64.b64encode(consumer.ca_pem).decode(),
        }}],
        "users": [{"name": "vk", "user": {"token": body["status"]["token"]}}],
        "contexts": [{"name": "vk", "context": {"cluster": "consumer", "user": "vk"}}],
    }  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "vkbridge-sa.kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    path.chmod(0o600)
    return path
