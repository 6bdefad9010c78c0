"""What the certificate renewer reads and writes, as pure functions of the objects.

The ``Renew`` it asks the pool with (name, body, whose it is, whether it still fits the key), the
``signedCRT`` an answer or a ResourceSlice carries, and how the kubeconfig Secret compares with the
certificate in use. No I/O: `vkbridge.credentials.renewal.CertificateRenewer` reads, writes and waits.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from cryptography import x509

from vkbridge.credentials.certs import (
    CertificateRejected,
    SigningKey,
    b64,
    build_csr,
    decode_pem_field,
    dump_kubeconfig,
    kubeconfig_client_certificate,
    kubeconfig_client_key,
    kubeconfig_with_certificate,
    load_kubeconfig_doc,
    load_private_key,
    public_key_matches,
    renew_public_key,
    same_key,
)
from vkbridge.credentials.remote import KUBECONFIG_KEY
from vkbridge.kube.client import RENEWS
from vkbridge.kube.kubeconfig import CertInfo, KubeconfigError, cert_info

__all__ = [
    "MANAGED_BY",
    "MANAGED_BY_LABEL",
    "RESOURCESLICE_LABEL",
    "RenewScope",
    "SecretState",
    "digest",
    "renew_matches",
    "secret_state",
    "secret_with_certificate",
    "serial",
    "signed_crt",
]

MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
MANAGED_BY: Final = "vkbridge"
RESOURCESLICE_LABEL: Final = "liqo.io/resourceslice-name"

SecretState = Literal["current", "older", "other-key", "unreadable"]


def serial(info: CertInfo) -> str:
    return format(info.serial, "x")


def digest(data: bytes) -> str:
    """A certificate's identity for memos and log-once keys (never logged itself)."""
    return hashlib.sha256(data.strip()).hexdigest()


def signed_crt(obj: Mapping[str, Any]) -> Any:
    """``status.authParams.signedCRT`` of a ResourceSlice or a Renew (None when absent)."""
    return ((obj.get("status") or {}).get("authParams") or {}).get("signedCRT")


@dataclass(frozen=True)
class RenewScope:
    """The Renews of one peering: in the pool's tenant namespace, for one ResourceSlice and consumer."""

    namespace: str
    resource_slice: str
    consumer_id: str

    def name(self, current: CertInfo) -> str:
        """One Renew per certificate being replaced: retries and restarts reuse it, nothing piles up."""
        return f"{self.resource_slice}-renew-{serial(current)[-10:]}"

    @property
    def selector(self) -> str:
        return f"{MANAGED_BY_LABEL}={MANAGED_BY},{RESOURCESLICE_LABEL}={self.resource_slice}"

    def body(self, name: str, key: SigningKey, current: CertInfo) -> dict[str, Any]:
        """A Renew for exactly the current subject, signed by the key in use."""
        csr = build_csr(key, current.cn or "", current.orgs)
        return {
            "apiVersion": RENEWS.api_version,
            "kind": RENEWS.kind,
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "labels": {MANAGED_BY_LABEL: MANAGED_BY, RESOURCESLICE_LABEL: self.resource_slice},
            },
            "spec": {
                "consumerClusterID": self.consumer_id,
                "publicKey": b64(renew_public_key(key)),
                "csr": b64(csr),
                "identityType": "ResourceSlice",
                "resourceSliceRef": {"name": self.resource_slice},
            },
        }

    def is_ours(self, renew: Mapping[str, Any]) -> bool:
        """A Renew this renewer created: our labels and spec, and no owner (Liqo's own Renews are owned
        by their Identity). Anything else with our name is someone else's and never deleted."""
        meta = renew.get("metadata") or {}
        labels = meta.get("labels") or {}
        spec = renew.get("spec") or {}
        return (
            labels.get(MANAGED_BY_LABEL) == MANAGED_BY
            and labels.get(RESOURCESLICE_LABEL) == self.resource_slice
            and not meta.get("ownerReferences")
            and spec.get("identityType") == "ResourceSlice"
            and spec.get("consumerClusterID") == self.consumer_id
            and (spec.get("resourceSliceRef") or {}).get("name") == self.resource_slice
        )


def renew_matches(renew: Mapping[str, Any], key: SigningKey, current: CertInfo) -> bool:
    """The Renew's CSR asks for the current subject with ``key`` (a leftover for another key does not)."""
    try:
        csr = x509.load_pem_x509_csr(decode_pem_field((renew.get("spec") or {}).get("csr"), "csr"))
    except (CertificateRejected, ValueError):
        return False
    wanted = x509.load_pem_x509_csr(build_csr(key, current.cn or "", current.orgs))
    return csr.subject == wanted.subject and public_key_matches(csr, key)


def secret_state(secret: Mapping[str, Any], key: SigningKey, info: CertInfo) -> SecretState:
    """How the Secret's kubeconfig compares with certificate ``info`` for ``key``."""
    try:
        raw = base64.b64decode((secret.get("data") or {}).get(KUBECONFIG_KEY) or "", validate=True)
        doc = load_kubeconfig_doc(raw)
        cert_pem, key_pem = kubeconfig_client_certificate(doc), kubeconfig_client_key(doc)
    except (KubeconfigError, binascii.Error, ValueError):
        return "unreadable"
    if key_pem is None:
        return "other-key"
    try:
        if not same_key(load_private_key(key_pem), key):
            return "other-key"
    except CertificateRejected:
        return "unreadable"
    if cert_pem is None:
        return "older"
    try:
        theirs = cert_info(cert_pem)
    except ValueError:
        return "older"
    return "current" if theirs.not_after >= info.not_after else "older"


def secret_with_certificate(secret: Mapping[str, Any], pem: bytes) -> dict[str, Any]:
    """The Secret to write back: its kubeconfig with ``pem`` as the client certificate, all else kept."""
    doc = load_kubeconfig_doc(base64.b64decode(secret["data"][KUBECONFIG_KEY]))
    return {
        **secret,
        "data": {
            **secret["data"],
            KUBECONFIG_KEY: b64(dump_kubeconfig(kubeconfig_with_certificate(doc, pem))),
        },
    }
