"""Serving TLS that follows certificate rotation without restarting the listener (technotes §3d).

The listener's context carries an SNI callback that hands every new handshake the provider's current
context (it fires with ``server_name=None`` too, as Go dials kubelets by IP without SNI). Each context
obtained from the provider gets client-certificate verification added once: requested, not required
(token clients have none), verified against the API server's client CA, like a kubelet's
``clientCAFile``, which ``set_client_ca`` replaces for the handshakes that follow (``clientca.py``
follows the ConfigMap it comes from). OpenSSL offers no way to forget a CA it loaded: one removed from
the bundle stays trusted until the serving certificate rotates (a new context) or the process restarts.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable

from vkbridge.logs import get_logger

__all__ = ["ServingTLS"]

log = get_logger("vkbridge.kubeletapi.tls")


class ServingTLS:
    def __init__(self, provider: Callable[[], ssl.SSLContext | None], client_ca_pem: bytes | None) -> None:
        self._provider = provider
        self._client_ca = client_ca_pem.decode("ascii") if client_ca_pem else None
        self._current: ssl.SSLContext | None = None
        self.rotations = 0
        self.client_ca_reloads = 0

    @property
    def client_ca(self) -> str | None:
        return self._client_ca

    def set_client_ca(self, pem: bytes) -> bool:
        """Trust ``pem`` (a PEM bundle) for client certificates from the next handshake on.

        False, keeping the CA in use, when it is the same or unusable (the reason is logged).
        """
        try:
            text = pem.decode("ascii")
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_verify_locations(cadata=text)  # parse it first
        except (UnicodeDecodeError, ssl.SSLError) as exc:
            log.error("kubelet client CA unusable; keeping the one in use", error=f"{type(exc).__name__}")
            return False
        if text == self._client_ca:
            return False
        before = set(_pem_blocks(self._client_ca or ""))
        self._client_ca = text
        self.client_ca_reloads += 1
        if self._current is not None:
            self._prepare(self._current)  # adds the new CA to the context in use
        now = set(_pem_blocks(text))
        log.info("kubelet client CA reloaded", certificates=len(now), reloads=self.client_ca_reloads)
        if not before <= now:
            log.warning(
                "a CA removed from the kubelet client CA bundle stays trusted until the serving "
                "certificate rotates or vkbridge restarts (a TLS context cannot forget a CA)"
            )
        return True

    def current(self) -> ssl.SSLContext | None:
        """The provider's context (prepared); the last good one if the provider fails or has none."""
        try:
            ctx = self._provider()
        except Exception as exc:  # a provider bug must not break every handshake
            log.warning("serving certificate provider failed; keeping the previous one", error=str(exc))
            ctx = None
        if ctx is None or ctx is self._current:
            return self._current
        self._prepare(ctx)
        if self._current is not None:
            self.rotations += 1
            log.info("serving certificate rotated", rotations=self.rotations)
        self._current = ctx
        return ctx

    def _prepare(self, ctx: ssl.SSLContext) -> None:
        if ctx.minimum_version < ssl.TLSVersion.TLSv1_2:
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        if self._client_ca is not None:
            ctx.load_verify_locations(cadata=self._client_ca)
            ctx.verify_mode = ssl.CERT_OPTIONAL

    def listener_context(self) -> ssl.SSLContext:
        """The context to listen with; raises if no certificate is available yet."""
        ctx = self.current()
        if ctx is None:
            raise RuntimeError("no serving certificate available")
        ctx.sni_callback = self._sni
        return ctx

    def _sni(self, obj: ssl.SSLObject, server_name: str | None, base: ssl.SSLContext) -> None:
        ctx = self.current()
        if ctx is not None and ctx is not obj.context:
            obj.context = ctx


def _pem_blocks(bundle: str) -> list[str]:
    """The base64 bodies of a PEM bundle's certificates (to compare bundles, not to parse them)."""
    parts = bundle.split("-----BEGIN CERTIFICATE-----")[1:]
    return ["".join(p.split("-----END CERTIFICATE-----")[0].split()) for p in parts]
