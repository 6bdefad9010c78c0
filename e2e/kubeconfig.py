"""The harness's kubeconfig reader, for the stand-ins that must not run product code (emulator, fake kubelet).

Only what a client needs from the current context; TLS is always verified: a kubeconfig asking to skip
verification, or without a certificate authority, is refused.
"""

from __future__ import annotations

import base64
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.pki import load_cert_chain


@dataclass(frozen=True, repr=False)
class Credentials:
    """What a kubeconfig context amounts to; repr hides the key."""

    server: str
    ca_pem: bytes
    cert_pem: bytes | None = None
    key_pem: bytes | None = None
    token: str | None = None

    def __repr__(self) -> str:
        return f"Credentials(server={self.server!r})"


def _file(name: str, base: Path | None) -> Path:
    """A file a kubeconfig names: relative paths are relative to the kubeconfig's folder."""
    p = Path(name)
    return base / p if base is not None and not p.is_absolute() else p


def _data(entry: Mapping[str, Any], key: str, base: Path | None) -> bytes | None:
    """``<key>-data`` (base64) or the file ``<key>``."""
    if entry.get(f"{key}-data"):
        return base64.b64decode(entry[f"{key}-data"])
    if entry.get(key):
        return _file(entry[key], base).read_bytes()
    return None


def read_kubeconfig(src: Path | str | Mapping[str, Any]) -> Credentials:
    """Credentials of the current context of a kubeconfig given as a path or a parsed dict."""
    base: Path | None = None
    if isinstance(src, Mapping):
        cfg: Mapping[str, Any] = src
    else:
        path = Path(src)
        base = path.parent
        cfg = yaml.safe_load(path.read_text())
    ctx_name = cfg.get("current-context") or cfg["contexts"][0]["name"]
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c["cluster"] for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    user = next((u["user"] for u in cfg.get("users") or [] if u["name"] == ctx.get("user")), None) or {}
    if cluster.get("insecure-skip-tls-verify"):
        raise ValueError("kubeconfig asks for insecure-skip-tls-verify: refused")
    ca = _data(cluster, "certificate-authority", base)
    if ca is None:
        raise ValueError("kubeconfig has no certificate authority: refused")
    token = user.get("token")
    if not token and user.get("tokenFile"):
        token = _file(user["tokenFile"], base).read_text().strip()
    return Credentials(
        server=str(cluster["server"]).rstrip("/"),
        ca_pem=ca,
        cert_pem=_data(user, "client-certificate", base),
        key_pem=_data(user, "client-key", base),
        token=token,
    )


def client_ssl_context(creds: Credentials) -> ssl.SSLContext:
    """A verifying client context, with the client certificate when the credentials have one."""
    ctx = ssl.create_default_context(cadata=creds.ca_pem.decode())
    if creds.cert_pem and creds.key_pem:
        load_cert_chain(ctx, creds.cert_pem, creds.key_pem)
    return ctx
