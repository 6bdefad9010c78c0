"""Running a kubeconfig's ``exec`` credential plugin (client.authentication.k8s.io), for the operator's own
kubeconfig only (``vkbridge doctor``): GKE's, EKS's and AKS's kubeconfigs all use one.

Never for a kubeconfig vkbridge itself runs with, and never for the pool's Secret: a plugin runs a command
of the kubeconfig's choosing, which only the operator's own file may do, as with kubectl. Blocking (a
subprocess): call it from a thread. Bounded by ``EXEC_TIMEOUT``; its output is never logged or shown (it
holds the credential); a failure says the command and its exit status only.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, NamedTuple

__all__ = ["EXEC_API_VERSIONS", "EXEC_TIMEOUT", "ExecCredential", "ExecPluginError", "run_exec_plugin"]

EXEC_API_VERSIONS: Final = ("client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1")
EXEC_TIMEOUT: Final = 60.0
MAX_OUTPUT: Final = 1 << 20


class ExecPluginError(ValueError):
    """The plugin could not give a credential; the message names the command, never its output.

    clientCertificateData is PEM text, unlike the base64 *-data fields of a kubeconfig.
    """


class ExecCredential(NamedTuple):
    token: str | None
    client_cert_pem: bytes | None
    client_key_pem: bytes | None


def run_exec_plugin(cfg: Mapping[str, Any], base: Path | None) -> ExecCredential:
    """Run the ``exec`` section's command once (not interactive) and return what its ExecCredential says."""
    api_version = cfg.get("apiVersion")
    if api_version not in EXEC_API_VERSIONS:
        raise ExecPluginError(
            f"exec plugin apiVersion {api_version!r} is not one of {', '.join(EXEC_API_VERSIONS)}"
        )
    command = cfg.get("command")
    if not isinstance(command, str) or not command:
        raise ExecPluginError("exec plugin without a command")
    if base is not None and os.sep in command and not os.path.isabs(command):
        command = str(
            base / command
        )  # clientcmd: a relative path resolves against the kubeconfig's directory
    args = cfg.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ExecPluginError(f"exec plugin {command}: args is not a list of strings")
    env = dict(os.environ)
    for item in cfg.get("env") or []:
        if isinstance(item, Mapping) and isinstance(item.get("name"), str):
            env[item["name"]] = str(item.get("value") or "")
    env["KUBERNETES_EXEC_INFO"] = json.dumps(
        {"apiVersion": api_version, "kind": "ExecCredential", "spec": {"interactive": False}}
    )
    try:
        # The operator's own kubeconfig names the command, as for kubectl.
        done = subprocess.run(
            [command, *args], env=env, stdin=subprocess.DEVNULL, capture_output=True, timeout=EXEC_TIMEOUT,
            check=False,
        )  # fmt: skip
    except FileNotFoundError:
        hint = cfg.get("installHint")
        raise ExecPluginError(
            f"exec plugin {command} not found" + (f": {str(hint).strip()[:300]}" if hint else "")
        ) from None
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ExecPluginError(f"exec plugin {command} did not run: {type(exc).__name__}") from None
    if done.returncode != 0:
        raise ExecPluginError(f"exec plugin {command} exited with status {done.returncode}")
    return _credential(command, api_version, done.stdout[:MAX_OUTPUT])


def _credential(command: str, api_version: str, out: bytes) -> ExecCredential:
    try:
        doc = json.loads(out)
    except ValueError:
        raise ExecPluginError(f"exec plugin {command} did not print an ExecCredential (not JSON)") from None
    if not isinstance(doc, dict) or doc.get("kind") != "ExecCredential":
        raise ExecPluginError(f"exec plugin {command} did not print an ExecCredential")
    if doc.get("apiVersion") != api_version:
        raise ExecPluginError(
            f"exec plugin {command} answered {doc.get('apiVersion')!r}, asked {api_version!r}"
        )
    status = doc.get("status") or {}
    token = status.get("token") or None
    cert = status.get("clientCertificateData") or None
    key = status.get("clientKeyData") or None
    if (cert is None) != (key is None):
        raise ExecPluginError(
            f"exec plugin {command} gave a client certificate without its key, or a key alone"
        )
    if token is None and cert is None:
        raise ExecPluginError(f"exec plugin {command} gave neither a token nor a client certificate")
    return ExecCredential(
        str(token) if token is not None else None,
        str(cert).encode() if cert is not None else None,
        str(key).encode() if key is not None else None,
    )
