"""What both emulated admission webhooks share: HTTPS on 127.0.0.1, the registration, and its removal.

The serving certificate is signed by the CA of the cluster that calls the webhook; the registration is
removed only while it still points here, so a restarted emulator never loses its successor's.
"""

from __future__ import annotations

import asyncio
import base64
import datetime as dt
import logging
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from e2e.pki import load_cert_chain

from . import names as n
from .certs import Signer
from .kube import Kube, Obj, api_path
from .rbac import apply

log = logging.getLogger(__name__)

# One AdmissionReview request -> its response without the uid; it must answer, never raise.
Answer = Callable[[Obj], Obj]


@dataclass
class WebhookServer:
    """One webhook: ``kind`` is MutatingWebhookConfiguration or ValidatingWebhookConfiguration."""

    kube: Kube
    kind: str
    name: str
    path: str
    signer: Signer
    port: int = 0
    _runner: web.AppRunner | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}{self.path}"

    @property
    def collection(self) -> str:
        return api_path(n.ADMISSIONREG, f"{self.kind.lower()}s")

    async def serve(self, answer: Answer, lifetime: dt.timedelta, port: int = 0) -> None:
        """Listen on 127.0.0.1:port (0: any free port, then in ``self.port``)."""
        cert_pem, key_pem = self.signer.serving_cert(lifetime, ("127.0.0.1",))
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        load_cert_chain(ctx, cert_pem, key_pem)

        async def handle(request: web.Request) -> web.Response:
            review: dict[str, Any] = await request.json()
            req = review.get("request") or {}
            return web.json_response(
                {
                    "apiVersion": review.get("apiVersion") or "admission.k8s.io/v1",
                    "kind": "AdmissionReview",
                    "response": {"uid": req.get("uid", ""), **answer(req)},
                }
            )

        app = web.Application()
        app.router.add_post(self.path, handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port, ssl_context=ctx)
        await site.start()
        server: Any = site._server
        self.port = int(server.sockets[0].getsockname()[1])

    def configuration(self, labels: dict[str, str], webhook: Obj) -> Obj:
        """The registration of this server; ``webhook`` holds its name, rules, selectors, failurePolicy."""
        return {
            "apiVersion": n.ADMISSIONREG,
            "kind": self.kind,
            "metadata": {"name": self.name, "labels": labels},
            "webhooks": [
                {
                    **webhook,
                    "clientConfig": {
                        "url": self.url,
                        "caBundle": base64.b64encode(self.signer.ca_pem).decode(),
                    },
                    "sideEffects": "None",
                    "admissionReviewVersions": ["v1"],
                    "timeoutSeconds": 10,
                }
            ],
        }

    async def register(self, labels: dict[str, str], webhook: Obj) -> None:
        await apply(self.kube, self.collection, self.configuration(labels, webhook))

    async def stop(self) -> None:
        """Unregister (only if the registration is still ours), then stop serving."""
        try:
            async with asyncio.timeout(5):
                path = f"{self.collection}/{self.name}"
                cur = await self.kube.get_or_none(path)
                if cur and cur.get("webhooks", [{}])[0].get("clientConfig", {}).get("url") == self.url:
                    await self.kube.delete(path, uid=cur["metadata"]["uid"])
        except Exception as e:
            log.warning("%s %s: could not unregister: %s", self.kind, self.name, e)
        if self._runner is not None:
            await self._runner.cleanup()
