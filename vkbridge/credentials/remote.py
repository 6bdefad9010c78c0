"""The pool credential: read from the kubeconfig Secret, and hot-swapped when the Secret changes.

A rotated bundle (the customer re-applies it) or a renewed certificate (Liqo rewrites the Secret)
reaches new connections within a second of the Secret update, without a restart: the pool client
swaps its TLS identity and the caches reconnect from their resourceVersion, losing nothing. A rewrite
that would swap back to an older certificate of the same key (a stale source) is ignored.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from reflectors.forge.timefmt import rfc3339
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import KubeClient
from vkbridge.kube.kubeconfig import Credentials, KubeconfigError, cert_info, parse_kubeconfig
from vkbridge.logs import get_logger

log = get_logger("vkbridge.credentials")

KUBECONFIG_KEY = "kubeconfig"
# Warning Event reason on the kubeconfig Secret when its content is refused (vkbridge's own, not Liqo's).
KUBECONFIG_REFUSED_REASON = "KubeconfigRefused"


def credentials_from_secret(secret: Mapping[str, Any] | None, where: str) -> Credentials:
    """Parse `data.kubeconfig` of the Secret; every failure is one clear line, never key material."""
    if secret is None:
        raise KubeconfigError(f"Secret {where} not found: apply the peering bundle (user guide section 3.5)")
    data = secret.get("data") or {}
    raw = data.get(KUBECONFIG_KEY)
    if not raw:
        raise KubeconfigError(f"Secret {where} has no '{KUBECONFIG_KEY}' key")
    try:
        text = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"Secret {where}: '{KUBECONFIG_KEY}' is not valid base64") from None
    return parse_kubeconfig(text, source=f"Secret {where}")


def describe(creds: Credentials) -> dict[str, object]:
    """Safe facts about a credential for the log: serial and validity, never the key."""
    if creds.client_cert_pem is None:
        return {"auth": creds.auth_kind}
    info = cert_info(creds.client_cert_pem)
    return {
        "auth": creds.auth_kind,
        "subject": info.cn,
        "serial": format(info.serial, "x"),
        "not_after": rfc3339(info.not_after),
    }


def changed_fields(new: Credentials, current: Credentials) -> list[str]:
    """Names of the fields ``new`` changes (never their values: keys, tokens, proxy userinfo).

    Every field counts (``tls-server-name`` and ``proxy-url`` as much as the key): the client reads them
    all. Where it was read from (``source``) does not.
    """
    return [
        f.name
        for f in dataclasses.fields(Credentials)
        if f.name != "source" and getattr(new, f.name) != getattr(current, f.name)
    ]


def is_downgrade(new: Credentials, current: Credentials) -> bool:
    """``new`` only swaps the certificate in use for an older one of the same key, subject and server.

    That happens when something rewrites the Secret from a stale source after a renewal (e.g. an
    Identity that still holds the previous certificate); swapping would throw the renewal away.
    """
    if new.client_cert_pem is None or current.client_cert_pem is None:
        return False
    if new.server != current.server or new.ca_pem != current.ca_pem:
        return False
    try:
        a = x509.load_pem_x509_certificate(new.client_cert_pem)
        b = x509.load_pem_x509_certificate(current.client_cert_pem)
    except ValueError:
        return False
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return (
        a.public_key().public_bytes(*spki) == b.public_key().public_bytes(*spki)
        and a.subject == b.subject
        and a.not_valid_after_utc < b.not_valid_after_utc
    )


class RemoteCredentialWatcher:
    """Follows the kubeconfig Secret and swaps the pool client's credential when it changes."""

    def __init__(
        self,
        pool: KubeClient,
        secret_cache: Cache,
        secret_key: str,
        *,
        on_swap: Callable[[Credentials], None] | None = None,
        on_invalid: Callable[[str, Mapping[str, Any] | None], None] | None = None,
    ) -> None:
        """``on_invalid(message, secret)`` is told once per new refusal (an Event on the Secret)."""
        self._pool, self._cache, self._key = pool, secret_cache, secret_key
        self._on_swap, self._on_invalid = on_swap, on_invalid
        self._last_error: str | None = None
        self._last_skip: bytes | None = None
        self.swaps = 0
        self._pending: Credentials | None = None
        self._wake = asyncio.Event()
        secret_cache.subscribe(self._changed)

    def _changed(self, _type: str, _old: Any, new: Any) -> None:
        where = self._key
        try:
            creds = credentials_from_secret(new, where)
        except KubeconfigError as err:
            msg = str(err)
            if msg != self._last_error:
                self._last_error = msg
                log.error("pool credential unusable; keeping the previous one", error=msg)
                if self._on_invalid is not None:
                    self._on_invalid(msg, new)
            return
        self._last_error = None
        current = self._pool.credentials
        if is_downgrade(creds, current):
            if self._last_skip != creds.client_cert_pem:
                self._last_skip = creds.client_cert_pem
                log.info(
                    "kubeconfig Secret holds an older certificate for the key in use; keeping the newer one",
                    secret=where,
                    **describe(current),
                )
            return
        if not changed_fields(creds, current):
            return
        self._pending = creds
        self._wake.set()

    async def run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            if self._pending is not None:
                creds, self._pending = self._pending, None
                changed = ",".join(changed_fields(creds, self._pool.credentials))
                try:
                    await self._pool.swap_credentials(creds)
                except (KubeconfigError, ValueError, OSError) as err:
                    log.error("pool credential rejected; keeping the previous one", error=str(err)[:200])
                else:
                    self.swaps += 1
                    log.info("pool credential swapped", changed=changed, **describe(creds))
                    if self._on_swap is not None:
                        self._on_swap(creds)
