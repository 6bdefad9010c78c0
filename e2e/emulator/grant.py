"""(e) Provider resourceslice controller: grant, conditions, certificate signing and re-signing.

Grant = provider defaults overlaid by every requested key (no capacity check, as Liqo). The CSR in
spec.csr is signed with the pool CA when there is no certificate for it yet, and signed again (same CSR)
once now >= notAfter - lifetime/3, Liqo's 2/3 rule; the next look is at 1.1 x the time to that point.
Unless disabled, the fresh certificate is written into the consumer's kubeconfig Secret, as Liqo's
consumer identity controllers do after the status is replicated back.
"""

from __future__ import annotations

import base64
import datetime as dt
import logging
from typing import Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from . import names as n
from .certs import CsrError, check_subject, load_csr, renewal_due_at, same_public_key
from .context import Env
from .kube import Obj, api_path
from .runtime import Controller, OneController

log = logging.getLogger(__name__)

_PROPAGATE_RETRY_S = 2.0


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def granted(spec_resources: dict[str, Any] | None) -> dict[str, str]:
    return {**n.DEFAULT_GRANT, **{k: str(v) for k, v in (spec_resources or {}).items()}}


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def conditions(old: list[Obj], want: list[tuple[str, str, str, str]]) -> list[Obj]:
    """Conditions keeping lastTransitionTime when the status did not change."""
    prev = {c.get("type"): c for c in old}
    out = []
    for typ, status, reason, message in want:
        p = prev.get(typ) or {}
        ltt = p.get("lastTransitionTime") if p.get("status") == status else _stamp(_now())
        out.append(
            {"type": typ, "status": status, "reason": reason, "message": message, "lastTransitionTime": ltt}
        )
    return out


def current_cert(auth_params: Obj | None) -> x509.Certificate | None:
    raw = (auth_params or {}).get("signedCRT")
    if not raw:
        return None
    try:
        return x509.load_pem_x509_certificate(base64.b64decode(raw))
    except ValueError:
        return None


class Grant(OneController):
    def __init__(self, env: Env) -> None:
        self.env = env
        self.slices = env.replicated(n.AUTH, n.RESOURCESLICES)
        self.ctrl = Controller("resourceslice", self.reconcile).follow(self.slices)

    def api_server(self) -> str:
        return self.env.cfg.api_server_url or self.env.pool.creds.server

    async def reconcile(self, key: str) -> float | None:
        rs = self.slices.get(key)
        if rs is None or rs["metadata"].get("deletionTimestamp"):
            return None
        cfg, signer = self.env.cfg, self.env.signer
        name = rs["metadata"]["name"]
        spec = rs.get("spec") or {}
        old = rs.get("status") or {}
        status: Obj = {**old, "resources": granted(spec.get("resources"))}
        auth = ("Accepted", "CertificateSigned", "The certificate has been signed")
        cert = current_cert(old.get("authParams"))
        renewed = False
        try:
            if not spec.get("csr"):
                raise CsrError("no CSR in spec.csr")
            csr = load_csr(base64.b64decode(spec["csr"]))
            check_subject(csr, n.identity_cn(name, cfg.consumer_id), cfg.consumer_id)
            stale = cert is None or not same_public_key(cert, csr.public_key()) or cert.subject != csr.subject
            if stale or _now() >= renewal_due_at(cert):  # type: ignore[arg-type]
                pem = signer.sign_csr(csr, cfg.cert_lifetime)
                renewed = cert is not None
                cert = x509.load_pem_x509_certificate(pem)
                status["authParams"] = {
                    **(old.get("authParams") or {}),
                    "ca": b64(signer.ca_pem),
                    "signedCRT": b64(pem),
                    "apiServer": self.api_server(),
                }
        except CsrError as e:
            auth = ("Denied", "CSRInvalid", str(e))
            cert = None
        status["conditions"] = conditions(
            old.get("conditions") or [],
            [
                ("Authentication", *auth),
                ("Resources", "Accepted", "ResourcesAccepted", "The resources have been accepted"),
            ],
        )
        if status != old:
            await self.env.pool.update(
                api_path(n.AUTH, n.RESOURCESLICES, cfg.pool_tenant, name, "status"), {**rs, "status": status}
            )
            if renewed:
                log.info("ResourceSlice %s: certificate renewed", key)
                self.env.event(
                    self.env.pool, rs, "CertificateRenewed", "The ResourceSlice certificate was renewed"
                )
        if cert is None:
            return None
        again = max(1.0, 1.1 * (renewal_due_at(cert) - _now()).total_seconds())
        if cfg.propagate_kubeconfig and not await self._propagate(name, cert):
            again = min(again, _PROPAGATE_RETRY_S)
        return again

    async def _propagate(self, rs_name: str, cert: x509.Certificate) -> bool:
        """Write cert into the consumer kubeconfig Secret if it is newer; True when nothing is left to do."""
        cfg = self.env.cfg
        if rs_name != cfg.slug:
            return True
        path = api_path("v1", "secrets", cfg.consumer_tenant, n.kubeconfig_secret(cfg.slug))
        secret = await self.env.consumer.get_or_none(path)
        if secret is None or "kubeconfig" not in (secret.get("data") or {}):
            return False
        kcfg = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
        ctx_name = kcfg.get("current-context") or kcfg["contexts"][0]["name"]
        user_name = next(c["context"]["user"] for c in kcfg["contexts"] if c["name"] == ctx_name)
        user = next(u["user"] for u in kcfg["users"] if u["name"] == user_name)
        key_pem = base64.b64decode(user.get("client-key-data") or "")
        have = user.get("client-certificate-data")
        if have:
            try:
                have_cert = x509.load_pem_x509_certificate(base64.b64decode(have))
                if have_cert.not_valid_after_utc >= cert.not_valid_after_utc:
                    return True  # already this one, or newer (e.g. from a Renew)
            except ValueError:
                pass
        try:
            key = serialization.load_pem_private_key(key_pem, password=None)
        except (ValueError, TypeError):
            log.warning("kubeconfig Secret of %s holds no usable key; not propagating", cfg.slug)
            return True
        if not same_public_key(cert, key.public_key()):
            log.warning("kubeconfig Secret of %s holds another key; not propagating", cfg.slug)
            return True
        user["client-certificate-data"] = b64(cert.public_bytes(serialization.Encoding.PEM))
        data = {**secret["data"], "kubeconfig": b64(yaml.safe_dump(kcfg).encode())}
        await self.env.consumer.update(path, {**secret, "data": data})  # resourceVersion: conflicts retry
        log.info(
            "propagated the renewed certificate into %s/%s",
            cfg.consumer_tenant,
            n.kubeconfig_secret(cfg.slug),
        )
        return True
