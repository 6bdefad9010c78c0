"""Serving TLS that follows certificate rotation and client CA changes without restarting the listener.

The listener's context carries an SNI callback that hands every new handshake the current context (it
fires with ``server_name=None`` too, as Go dials kubelets by IP without SNI); OpenSSL then verifies the
client certificate against that context's store. Client certificates are requested, not required (token
clients have none), and verified against the API server's client CA, like a kubelet's ``clientCAFile``,
which ``set_client_ca`` replaces (``clientca.py`` follows the ConfigMap it comes from).

A context cannot forget a CA it loaded, so every change (a rotated serving certificate or a new client
CA bundle) builds a fresh context from the serving certificate and key holding exactly the current
bundle: a CA removed from it is refused from the next handshake on, as a kubelet does. Contexts in use
are never changed, except the listener's verify mode (OpenSSL copies it into each connection when it
accepts one, and the SNI swap does not replace it).

A resumed session skips verification, so it would carry a removed CA's client into a new connection:
session tickets and renegotiation are off, and once the bundle has changed under a listener, a client
resuming a TLS 1.2 session ID (whose server cache Python cannot turn off) is refused; its next, full
handshake is verified. Go clients resume TLS 1.2 only by ticket, so they are never refused.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from typing import Protocol

from vkbridge.logs import get_logger

__all__ = ["ServingCertificate", "ServingTLS"]

log = get_logger("vkbridge.kubeletapi.tls")


class ServingCertificate(Protocol):
    """One serving certificate with its key; the provider returns a new object when it rotates."""

    def new_context(self) -> ssl.SSLContext:
        """A fresh server context holding the certificate and key, and no CA."""
        ...


class ServingTLS:
    """The contexts of the kubelet API listener: ``provider`` is asked on every handshake."""

    def __init__(
        self, provider: Callable[[], ServingCertificate | None], client_ca_pem: bytes | None
    ) -> None:
        self._provider = provider
        self._client_ca = client_ca_pem.decode("ascii") if client_ca_pem else None
        self._served: ServingCertificate | None = None  # what _current holds, trusting _served_ca
        self._served_ca: str | None = None
        self._current: ssl.SSLContext | None = None
        self._listener: ssl.SSLContext | None = None
        self._failed: tuple[ServingCertificate, str | None] | None = None  # logged once, not retried
        self._ca_changed = False  # under the listener: a cached session may predate the bundle
        self.rotations = 0
        self.client_ca_reloads = 0
        self.refused_resumptions = 0

    @property
    def client_ca(self) -> str | None:
        return self._client_ca

    def set_client_ca(self, pem: bytes) -> bool:
        """Trust ``pem`` (a PEM bundle), and no other CA, for client certificates from the next handshake on.

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
        self._client_ca = text
        self.client_ca_reloads += 1
        if self._listener is not None:
            self._ca_changed = True
            if self._listener.verify_mode == ssl.CERT_NONE:  # listening without a CA: ask for certificates
                self._listener.verify_mode = ssl.CERT_OPTIONAL
        self.current()  # build the new context now rather than in the next handshake
        log.info("kubelet client CA reloaded", certificates=_count(text), reloads=self.client_ca_reloads)
        return True

    def current(self) -> ssl.SSLContext | None:
        """The context for the next handshake; the last good certificate if the provider fails or has none."""
        try:
            served = self._provider()
        except Exception as exc:  # a provider bug must not break every handshake
            log.warning("serving certificate provider failed; keeping the previous one", error=str(exc))
            served = None
        if served is None:
            served = self._served
        if served is None or (served is self._served and self._client_ca == self._served_ca):
            return self._current
        return self._rebuild(served)

    def _rebuild(self, served: ServingCertificate) -> ssl.SSLContext | None:
        if self._failed is not None and self._failed[0] is served and self._failed[1] == self._client_ca:
            return self._current
        try:
            ctx = self._build(served)
        except Exception as exc:  # e.g. ServingCertificateError: keep serving the last good context
            self._failed = (served, self._client_ca)
            log.error("cannot build the serving TLS context; keeping the one in use", error=str(exc))
            return self._current
        if self._served is not None and served is not self._served:
            self.rotations += 1
            log.info("serving certificate rotated", rotations=self.rotations)
        self._served, self._served_ca, self._current, self._failed = served, self._client_ca, ctx, None
        return ctx

    def _build(self, served: ServingCertificate) -> ssl.SSLContext:
        ctx = served.new_context()
        if ctx.minimum_version < ssl.TLSVersion.TLSv1_2:
            ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.options |= ssl.OP_NO_TICKET | ssl.OP_NO_RENEGOTIATION  # both would skip verification
        ctx.num_tickets = 0
        if self._client_ca is not None:
            ctx.load_verify_locations(cadata=self._client_ca)
            ctx.verify_mode = ssl.CERT_OPTIONAL
        return ctx

    def listener_context(self) -> ssl.SSLContext:
        """The context to listen with; raises if no certificate is available yet."""
        ctx = self.current()
        if ctx is None:
            raise RuntimeError("no serving certificate available")
        ctx.sni_callback = self._sni
        self._listener = ctx
        return ctx

    def _sni(self, obj: ssl.SSLObject, server_name: str | None, base: ssl.SSLContext) -> int | None:
        if obj.session_reused and self._ca_changed:  # OpenSSL already chose to resume: refuse, not verified
            self.refused_resumptions += 1
            if self.refused_resumptions == 1:
                log.info("refusing to resume a TLS session that may predate the client CA bundle")
            return ssl.ALERT_DESCRIPTION_HANDSHAKE_FAILURE
        ctx = self.current()
        if ctx is not None and ctx is not obj.context:
            obj.context = ctx
        return None


def _count(bundle: str) -> int:
    """How many certificates a PEM bundle holds (for the log line)."""
    return bundle.count("-----BEGIN CERTIFICATE-----")
