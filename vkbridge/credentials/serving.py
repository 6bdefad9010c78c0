"""The kubelet serving certificate: what the consumer's kube-apiserver sees when it dials our kubelet API.

``kubelet``/``aws`` ask the home cluster for it with a CertificateSigningRequest (as client-go's
certificate manager does for Liqo's VK), ``self-signed`` makes one locally. The key lives in memory
only. ``current_keypair()`` feeds the kubelet API listener's SNI callback (kubeletapi.tls.ServingTLS),
so rotation never restarts it. While a CSR waits for approval we say so every minute with the command
that unblocks it: LIQO issue #241 was a node stuck silently on an unapproved CSR. As client-go's
certificate manager, a CSR not issued within 15 minutes is given up and a new one asked for (with a
new key, after the round's capped backoff): a request that was lost or garbage-collected never blocks
the node for good.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import datetime as dt
import ipaddress
import os
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from cryptography import x509

from reflectors.forge.timefmt import rfc3339
from vkbridge.credentials.certs import (
    KUBELET_SERVING_USAGES,
    CertificateRejected,
    SigningKey,
    b64,
    new_serving_key,
    private_key_pem,
    renew_point,
    self_signed_serving_certificate,
    serving_csr,
    serving_subject,
    verify_certificate,
)
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.client import CERTIFICATESIGNINGREQUESTS, ApiError, KubeClient, WatchExpired
from vkbridge.kube.kubeconfig import CertInfo
from vkbridge.kube.waiting import wait_event
from vkbridge.logs import get_logger

__all__ = [
    "SIGNERS",
    "CertificateType",
    "ServingCertificateError",
    "ServingCertificateManager",
    "ServingKeyPair",
]

log = get_logger("vkbridge.serving")

CertificateType = Literal["kubelet", "aws", "self-signed"]
SIGNERS: Final[dict[str, str]] = {
    "kubelet": "kubernetes.io/kubelet-serving",
    "aws": "beta.eks.amazonaws.com/app-serving",
}
SELF_SIGNED_LIFETIME: Final = dt.timedelta(days=365)
SELF_SIGNED_MIN_LEFT: Final = dt.timedelta(days=1)
MAX_SLEEP_S: Final = 600.0  # re-read the wall clock at least this often
MIN_ROTATE_AFTER: Final = dt.timedelta(seconds=60)
MANAGED_BY_LABEL: Final = "app.kubernetes.io/managed-by"
CSR_WAIT_TIMEOUT: Final = 15 * 60.0  # client-go's certificateWaitTimeout


class ServingCertificateError(Exception):
    """A CSR round that gave no usable certificate; the message is one clear reason."""


# What one round may raise without ending the manager: the old certificate stays in use and the round
# is retried with a capped backoff. ValueError covers cryptography's refusals (e.g. a malformed name).
ROUND_ERRORS: Final = (
    ApiError,
    ServingCertificateError,
    CertificateRejected,
    ssl.SSLError,
    ValueError,
    x509.DuplicateExtension,
)


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _server_context(chain_pem: bytes, key_pem: bytes) -> ssl.SSLContext:
    """A TLS server context loaded from memory (a memfd): the key never touches the disk."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    fd = os.memfd_create("vkbridge-serving", os.MFD_CLOEXEC)
    try:
        view = memoryview(chain_pem.rstrip(b"\n") + b"\n" + key_pem)
        while view:
            view = view[os.write(fd, view) :]
        ctx.load_cert_chain(f"/proc/self/fd/{fd}")
    except ssl.SSLError as exc:  # e.g. a chain whose later blocks OpenSSL cannot parse
        raise ServingCertificateError(
            f"the certificate chain cannot be loaded: {exc.reason or exc}"
        ) from None
    finally:
        os.close(fd)
    return ctx


@dataclass(frozen=True, eq=False)
class ServingKeyPair:
    """One serving certificate chain and its key. The kubelet API builds a fresh context from it each
    time the client CA changes (a context cannot forget a CA), hence the key kept, in memory only."""

    chain_pem: bytes
    key_pem: bytes = field(repr=False)

    def new_context(self) -> ssl.SSLContext:
        """A server context holding the chain and key; ServingCertificateError if OpenSSL refuses them."""
        return _server_context(self.chain_pem, self.key_pem)


class ServingCertificateManager:
    """Obtains, holds and rotates the kubelet serving certificate."""

    def __init__(
        self,
        home: KubeClient,
        *,
        node_name: str,
        node_ip: str,
        certificate_type: CertificateType = "kubelet",
        rotate_fraction: float = 0.8,
        expiration_seconds: int | None = None,
        wait_log_interval: float = 60.0,
        retry_base: float = 5.0,
        retry_cap: float = 300.0,
        approval_timeout: float | None = None,
        clock: Callable[[], dt.datetime] = _utcnow,
    ) -> None:
        if certificate_type not in ("kubelet", "aws", "self-signed"):
            raise ValueError(f"unknown certificate type {certificate_type!r} (kubelet, aws or self-signed)")
        if not 0.0 < rotate_fraction < 1.0:
            raise ValueError(f"rotate_fraction must be in (0, 1), got {rotate_fraction!r}")
        self._home = home
        self.node_name, self.node_ip = node_name, node_ip
        self.certificate_type: CertificateType = certificate_type
        self._rotate_fraction = rotate_fraction
        self._expiration_seconds = expiration_seconds
        self._wait_log_interval = wait_log_interval
        self._retry_base, self._retry_cap = retry_base, retry_cap
        self._approval_timeout = CSR_WAIT_TIMEOUT if approval_timeout is None else approval_timeout
        self._clock = clock
        self._pair: ServingKeyPair | None = None
        self._cert_pem: bytes | None = None
        self._info: CertInfo | None = None
        self._ready = asyncio.Event()
        self.issued = 0
        self.last_csr: str | None = None

    # -- what the kubelet API server uses

    def current_keypair(self) -> ServingKeyPair | None:
        """The current certificate and key: None until the first is issued, a new object at each rotation."""
        return self._pair

    @property
    def certificate_pem(self) -> bytes | None:
        return self._cert_pem

    @property
    def certificate_info(self) -> CertInfo | None:
        return self._info

    async def wait_ready(self, timeout: float | None = None) -> bool:
        """True once a certificate is installed; False if ``timeout`` passed first."""
        return await wait_event(self._ready, timeout)

    def _install(self, chain_pem: bytes, key: SigningKey, info: CertInfo) -> None:
        pair = ServingKeyPair(chain_pem, private_key_pem(key))
        pair.new_context()  # a chain OpenSSL cannot load is refused here, not in a handshake
        self._pair = pair
        self._cert_pem, self._info = chain_pem, info
        self.issued += 1
        self._ready.set()

    # -- the loop

    async def run(self) -> None:
        """Run until cancelled; failures are logged and retried with capped backoff."""
        if self.certificate_type == "self-signed":
            await self._run_self_signed()
        else:
            await self._run_csr()

    async def _sleep_until(self, when: dt.datetime) -> None:
        """Sleep on the wall clock, re-reading it at least every MAX_SLEEP_S (suspend, clock steps)."""
        while True:
            left = (when - self._clock()).total_seconds()
            if left <= 0:
                return
            await asyncio.sleep(min(left, MAX_SLEEP_S))

    def _self_signed(self) -> CertInfo:
        cn, _ = serving_subject(self.node_name)
        key = new_serving_key()
        pem = self_signed_serving_certificate(
            key, self.node_name, self.node_ip, now=self._clock(), lifetime=SELF_SIGNED_LIFETIME
        )
        info = verify_certificate(pem, key=key, cn=cn, orgs=("liqo.io",), now=self._clock(), ca_pem=pem)
        self._install(pem, key, info)
        return info

    async def _run_self_signed(self) -> None:
        cn, _ = serving_subject(self.node_name)
        retry = Backoff(self._retry_base, self._retry_cap)
        while True:
            try:
                info = self._self_signed()
            except ROUND_ERRORS as err:
                delay = retry.next()
                log.warning(
                    "self-signed kubelet serving certificate could not be made; retrying",
                    error=str(err)[:300] or type(err).__name__,
                    retry_in=f"{delay:.0f}s",
                )
                await asyncio.sleep(delay)
                continue
            retry.reset()
            log.info(
                "self-signed kubelet serving certificate generated",
                subject=cn,
                serial=format(info.serial, "x"),
                not_after=rfc3339(info.not_after),
            )
            await self._sleep_until(info.not_after - SELF_SIGNED_MIN_LEFT)

    async def _run_csr(self) -> None:
        retry = Backoff(self._retry_base, self._retry_cap)
        while True:
            try:
                chain, key, info = await self._request_certificate()
                self._install(chain, key, info)
            except ROUND_ERRORS as err:
                delay = retry.next()
                log.warning(
                    "kubelet serving certificate request failed; retrying",
                    csr=self.last_csr or "-",
                    error=str(err)[:300] or type(err).__name__,
                    retry_in=f"{delay:.0f}s",
                    serving="the previous certificate" if self._pair is not None else "nothing yet",
                )
                await asyncio.sleep(delay)
                continue
            retry.reset()
            now = self._clock()
            # A signer that backdates a short certificate can put the rotation point in the past: never
            # ask again at once, or an auto-approving cluster would be flooded with CSRs.
            floor = now + min(MIN_ROTATE_AFTER, (info.not_after - now) / 2)
            rotate_at = max(renew_point(info.not_before, info.not_after, self._rotate_fraction), floor)
            log.info(
                "kubelet serving certificate issued",
                csr=self.last_csr or "-",
                serial=format(info.serial, "x"),
                not_after=rfc3339(info.not_after),
                rotate_at=rfc3339(rotate_at),
            )
            await self._sleep_until(rotate_at)

    # -- one CSR round

    def _csr_body(self, key: SigningKey) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "request": b64(serving_csr(key, self.node_name, self.node_ip)),
            "signerName": SIGNERS[self.certificate_type],
            "usages": list(KUBELET_SERVING_USAGES),
        }
        if self._expiration_seconds is not None:
            spec["expirationSeconds"] = self._expiration_seconds
        return {
            "apiVersion": CERTIFICATESIGNINGREQUESTS.api_version,
            "kind": CERTIFICATESIGNINGREQUESTS.kind,
            "metadata": {
                "generateName": f"vkbridge-{self.node_name}-",
                "labels": {MANAGED_BY_LABEL: "vkbridge"},
            },
            "spec": spec,
        }

    async def _request_certificate(self) -> tuple[bytes, SigningKey, CertInfo]:
        key = new_serving_key()
        created = await self._home.create(CERTIFICATESIGNINGREQUESTS, self._csr_body(key))
        name = str(created["metadata"]["name"])
        self.last_csr = name
        log.info("kubelet serving CSR created", csr=name, signer=SIGNERS[self.certificate_type])
        chain = await self._await_certificate(name, created)
        cn, orgs = serving_subject(self.node_name)
        ips = [self.node_ip] if _is_ip(self.node_ip) else []
        info = verify_certificate(chain, key=key, cn=cn, orgs=orgs, now=self._clock(), ips=ips)
        return chain, key, info

    @staticmethod
    def _issued(csr: dict[str, Any], name: str) -> bytes | None:
        """The issued chain, None while pending; raises when the CSR was denied or failed."""
        status = csr.get("status") or {}
        for cond in status.get("conditions") or []:
            if cond.get("type") in ("Denied", "Failed") and cond.get("status", "True") == "True":
                detail = cond.get("message") or cond.get("reason") or ""
                raise ServingCertificateError(f"CSR {name} was {cond['type'].lower()}: {detail}".rstrip(": "))
        raw = status.get("certificate")
        if not raw:
            return None
        try:
            return base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise ServingCertificateError(f"CSR {name}: status.certificate is not valid base64") from None

    def _log_waiting(self, name: str, csr: dict[str, Any]) -> None:
        approved = any(
            c.get("type") == "Approved" for c in ((csr.get("status") or {}).get("conditions") or [])
        )
        if approved:
            log.warning(
                f"kubelet serving CSR {name} is approved but not signed yet: check the signer", csr=name
            )
        else:
            log.warning(
                f"waiting for approval of kubelet serving CSR {name}: approve it "
                f"(kubectl certificate approve {name}) or check Liqo's controller-manager",
                csr=name,
            )

    async def _await_certificate(self, name: str, csr: dict[str, Any]) -> bytes:
        """Watch the CSR until it is issued (or denied); one reminder per ``wait_log_interval``. Given up
        (``ServingCertificateError``) after ``approval_timeout``, so the next round asks anew."""
        rv = str(csr["metadata"].get("resourceVersion") or "")
        next_log = time.monotonic() + self._wait_log_interval
        give_up = time.monotonic() + self._approval_timeout
        retry = Backoff(0.5, 10.0)
        while True:
            chain = self._issued(csr, name)
            if chain is not None:
                return chain
            if time.monotonic() >= give_up:
                raise ServingCertificateError(
                    f"CSR {name} was not issued within {self._approval_timeout:.0f}s; asking anew"
                )
            if time.monotonic() >= next_log:
                self._log_waiting(name, csr)
                next_log = time.monotonic() + self._wait_log_interval
            try:
                async with asyncio.timeout(max(0.05, min(next_log, give_up) - time.monotonic())):
                    got = await self._next_change(name, rv)
                if got is not None:
                    csr, rv = got, str(got["metadata"].get("resourceVersion") or rv)
                retry.reset()
            except TimeoutError:
                pass
            except ApiError as err:
                if err.not_found:
                    raise ServingCertificateError(f"CSR {name} was deleted before it was issued") from None
                if not isinstance(err, WatchExpired):
                    await asyncio.sleep(retry.next())
                csr = await self._home.get(CERTIFICATESIGNINGREQUESTS, name)
                rv = str(csr["metadata"].get("resourceVersion") or "")

    async def _next_change(self, name: str, rv: str) -> dict[str, Any] | None:
        """The CSR after its next change (None if the watch ended quietly)."""
        events = self._home.watch(
            CERTIFICATESIGNINGREQUESTS,
            resource_version=rv,
            field_selector=f"metadata.name={name}",
            timeout_seconds=max(1, int(self._wait_log_interval) + 1),
        )
        async with contextlib.aclosing(events) as stream:
            async for ev in stream:
                kind = ev.get("type")
                if kind in ("ADDED", "MODIFIED"):
                    obj: dict[str, Any] = ev["object"]
                    return obj
                if kind == "DELETED":
                    raise ServingCertificateError(f"CSR {name} was deleted before it was issued")
        return None
