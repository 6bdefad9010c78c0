"""Consumer side: Liqo's controller-manager approves the virtual kubelet's CertificateSigningRequests.

Liqo v1.2 approves every CSR whose requestor is a ServiceAccount of a tenant namespace
(spec.username starts with "system:serviceaccount:liqo-tenant-"), reason LiqoApproval; the consumer's
kube-controller-manager then signs it (e.g. kubernetes.io/kubelet-serving for the VK's serving cert).
"""

from __future__ import annotations

import datetime as dt
import logging

from .context import Env
from .kube import api_path
from .runtime import Controller, OneController

log = logging.getLogger(__name__)

CERTIFICATES = "certificates.k8s.io/v1"
REQUESTOR_PREFIX = "system:serviceaccount:liqo-tenant-"


class CsrApprover(OneController):
    def __init__(self, env: Env) -> None:
        self.env = env
        self.csrs = env.informer(env.consumer, api_path(CERTIFICATES, "certificatesigningrequests"))
        self.ctrl = Controller("csr-approver", self.reconcile).follow(self.csrs)

    async def reconcile(self, key: str) -> float | None:
        csr = self.csrs.get(key)
        if csr is None or (csr.get("status") or {}).get("certificate"):
            return None
        conditions = (csr.get("status") or {}).get("conditions") or []
        if any(c.get("type") in ("Approved", "Denied", "Failed") for c in conditions):
            return None
        if not str((csr.get("spec") or {}).get("username", "")).startswith(REQUESTOR_PREFIX):
            return None
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        approved = {
            "type": "Approved",
            "status": "True",
            "reason": "LiqoApproval",
            "message": "This CSR was approved by Liqo",
            "lastUpdateTime": now,
            "lastTransitionTime": now,
        }
        body = {**csr, "status": {**(csr.get("status") or {}), "conditions": [*conditions, approved]}}
        path = api_path(
            CERTIFICATES, "certificatesigningrequests", name=csr["metadata"]["name"], sub="approval"
        )
        await self.env.consumer.update(path, body)
        log.info("approved CSR %s of %s", key, csr["spec"]["username"])
        return None
