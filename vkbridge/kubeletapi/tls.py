"""Serving TLS that follows certificate rotation without restarting the listener (technotes §3d).

The listener's context carries an SNI callback that hands every new handshake the provider's current
context (it fires with ``server_name=None`` too, as Go dials kubelets by IP without SNI). Each context
obtained from the provider gets client-certificate verification added once: requested, not required
(token clients have none), verified against the API server's client CA, like a kubelet's
``clientCAFile``.
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
