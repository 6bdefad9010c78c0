"""The operator's exec credential plugin, run for ``vkbridge doctor`` only (issue 36 point 7).

Small scripts stand in for gke-gcloud-auth-plugin and friends; no Kubernetes API.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.certs import self_signed
from vkbridge.kube.execplugin import ExecPluginError, run_exec_plugin
from vkbridge.kube.kubeconfig import KubeconfigError, parse_kubeconfig

V1 = "client.authentication.k8s.io/v1"
SECRET_TOKEN = "ya29.secret-token-never-shown"


def plugin(tmp_path: Path, body: str) -> dict[str, Any]:
    script = tmp_path / "plugin"
    script.write_text("#!/bin/sh\n" + body + "\n")
    script.chmod(0o755)
    return {"apiVersion": V1, "command": str(script)}


def credential(**status: str) -> str:
    return json.dumps({"apiVersion": V1, "kind": "ExecCredential", "status": status})


def test_a_token_from_the_plugin_and_the_exec_info_it_was_given(tmp_path: Path) -> None:
    seen = tmp_path / "info.json"
    cfg = plugin(
        tmp_path, f"echo \"$KUBERNETES_EXEC_INFO\" > {seen}\necho '{credential(token=SECRET_TOKEN)}'"
    )
    assert run_exec_plugin(cfg, None).token == SECRET_TOKEN
    info = json.loads(seen.read_text())
    assert info["kind"] == "ExecCredential" and info["spec"]["interactive"] is False


def test_a_failing_plugin_is_named_with_its_status_never_its_output(tmp_path: Path) -> None:
    cfg = plugin(tmp_path, f"echo '{SECRET_TOKEN}'; echo '{SECRET_TOKEN}' >&2; exit 7")
    with pytest.raises(ExecPluginError) as err:
        run_exec_plugin(cfg, None)
    assert "exited with status 7" in str(err.value) and SECRET_TOKEN not in str(err.value)


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ("not json", "not JSON"),
        (
            json.dumps({"apiVersion": "client.authentication.k8s.io/v1beta1", "kind": "ExecCredential"}),
            "asked",
        ),
        (credential(clientCertificateData="-----BEGIN CERTIFICATE-----"), "without its key"),
        (credential(), "neither a token nor a client certificate"),
    ],
)
def test_an_answer_that_is_no_credential_is_refused_clearly(tmp_path: Path, out: str, says: str) -> None:
    (tmp_path / "out").write_text(out)
    with pytest.raises(ExecPluginError, match=says):
        run_exec_plugin(plugin(tmp_path, f"cat {tmp_path / 'out'}"), None)


def test_a_missing_plugin_says_its_install_hint(tmp_path: Path) -> None:
    cfg = {
        "apiVersion": V1,
        "command": str(tmp_path / "absent"),
        "installHint": "install gke-gcloud-auth-plugin",
    }
    with pytest.raises(ExecPluginError, match="not found: install gke-gcloud-auth-plugin"):
        run_exec_plugin(cfg, None)


def ca_data() -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "test-ca")])
    cert = self_signed(key, name, not_before=now, not_after=now + dt.timedelta(hours=1))
    return base64.b64encode(cert.public_bytes(serialization.Encoding.PEM)).decode()


def test_a_kubeconfig_from_a_secret_never_runs_a_plugin(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    cfg = plugin(tmp_path, f"touch {marker}; echo '{credential(token='t')}'")
    doc = {
        "current-context": "c",
        "contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}],
        "clusters": [
            {
                "name": "k",
                "cluster": {"server": "https://198.18.0.9", "certificate-authority-data": ca_data()},
            }
        ],
        "users": [{"name": "u", "user": {"exec": cfg}}],
    }
    with pytest.raises(KubeconfigError, match="exec credential plugins are not supported"):
        parse_kubeconfig(doc, allow_exec=True)  # no allow_files: a Secret's kubeconfig
    assert not marker.exists()
