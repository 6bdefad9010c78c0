"""(f) Renew signing for ResourceSlice identities, in the pool tenant namespace.

The tenant creates a Renew (authentication.liqo.io/v1beta1) with a CSR; the emulator signs it with the
pool CA only when the subject is exactly CN=<identity CN of the referenced ResourceSlice>, O=<consumer
id>, the ResourceSlice exists, and the consumer id is the one this tenant namespace belongs to. Anything
else is refused with a Warning event (RenewDenied) and no certificate.
"""

from __future__ import annotations

import base64
import hashlib
import logging

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519

from . import names as n
from .certs import CsrError, check_subject, load_csr, same_public_key
from .context import Env
from .grant import b64, current_cert
from .kube import Obj, api_path
from .runtime import Controller, OneController

log = logging.getLogger(__name__)


def _public_key_matches(csr: x509.CertificateSigningRequest, given: bytes) -> bool:
    """spec.publicKey, when present, must be the CSR's key (raw Ed25519, DER or PEM SubjectPublicKeyInfo)."""
    pub = csr.public_key()
    candidates = {
        pub.public_bytes(serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    }
    candidates.add(
        pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    if isinstance(pub, ed25519.Ed25519PublicKey):
        candidates.add(pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw))
    return given.rstrip(b"\0") in candidates or given in candidates


class Renewals(OneController):
    def __init__(self, env: Env) -> None:
        self.env = env
        self.renews = env.informer(env.pool, api_path(n.AUTH, n.RENEWS, env.cfg.pool_tenant))
        self.ctrl = Controller("renew", self.reconcile).follow(self.renews)
        self._refused: dict[str, str] = {}  # key -> sha256 of the CSR already refused (one event each)

    async def reconcile(self, key: str) -> float | None:
        renew = self.renews.get(key)
        if renew is None or renew["metadata"].get("deletionTimestamp"):
            self._refused.pop(key, None)
            return None
        spec = renew.get("spec") or {}
        csr_raw = base64.b64decode(spec.get("csr") or "")
        digest = hashlib.sha256(csr_raw).hexdigest()
        if self._refused.get(key) == digest:
            return None
        try:
            csr = await self._validate(spec, csr_raw)
        except CsrError as e:
            self._refused[key] = digest
            log.warning("Renew %s refused: %s", key, e)
            self.env.event(
                self.env.pool,
                {**renew, "apiVersion": n.AUTH, "kind": "Renew"},
                "RenewDenied",
                str(e),
                warning=True,
            )
            return None
        cert = current_cert((renew.get("status") or {}).get("authParams"))
        if cert is not None and same_public_key(cert, csr.public_key()) and cert.subject == csr.subject:
            return None  # already signed for this CSR
        pem = self.env.signer.sign_csr(csr, self.env.cfg.cert_lifetime)
        api_server = self.env.cfg.api_server_url or self.env.pool.creds.server
        status = {
            "authParams": {"ca": b64(self.env.signer.ca_pem), "signedCRT": b64(pem), "apiServer": api_server}
        }
        md = renew["metadata"]
        await self.env.pool.update(
            api_path(n.AUTH, n.RENEWS, md["namespace"], md["name"], "status"),
            {**renew, "apiVersion": n.AUTH, "kind": "Renew", "status": status},
        )
        log.info("Renew %s signed", key)
        self.env.event(
            self.env.pool,
            {**renew, "apiVersion": n.AUTH, "kind": "Renew"},
            "CertificateRenewed",
            "The certificate has been signed",
        )
        return None

    async def _validate(self, spec: Obj, csr_raw: bytes) -> x509.CertificateSigningRequest:
        cfg = self.env.cfg
        if spec.get("identityType") != "ResourceSlice":
            raise CsrError(f"identityType {spec.get('identityType')!r} is not supported (want ResourceSlice)")
        rs_name = (spec.get("resourceSliceRef") or {}).get("name")
        if not rs_name:
            raise CsrError("resourceSliceRef.name is missing")
        if spec.get("consumerClusterID") not in (None, "", cfg.consumer_id):
            raise CsrError(
                f"consumerClusterID {spec.get('consumerClusterID')!r} does not own this tenant namespace"
            )
        rs_path = api_path(n.AUTH, n.RESOURCESLICES, cfg.pool_tenant, rs_name)
        if await self.env.pool.get_or_none(rs_path) is None:
            raise CsrError(f"ResourceSlice {rs_name!r} not found in {cfg.pool_tenant}")
        if not csr_raw:
            raise CsrError("no CSR in spec.csr")
        csr = load_csr(csr_raw)
        check_subject(csr, n.identity_cn(rs_name, cfg.consumer_id), cfg.consumer_id)
        if spec.get("publicKey") and not _public_key_matches(csr, base64.b64decode(spec["publicKey"])):
            raise CsrError("spec.publicKey does not match the CSR's key")
        return csr
