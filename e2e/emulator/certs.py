"""Signing with the pool's client CA, as Liqo's provider does through the kube-apiserver-client signer.

Signing directly (not through a CertificateSigningRequest) lets tests pick lifetimes of minutes; the CA is
the pool API server's client CA, so what we sign really authenticates there.
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificateIssuerPublicKeyTypes,
)
from cryptography.x509.oid import NameOID

from e2e.pki import key_pem, leaf_builder, new_ec_key

# Backdating absorbs second truncation of x509 times; short enough to keep 2/3-of-lifetime tests tight.
_BACKDATE = dt.timedelta(seconds=5)
_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def parse_duration(text: str) -> dt.timedelta:
    """'365d', '3m', '90s', '2h'."""
    m = _DURATION.match(text.strip())
    if not m:
        raise ValueError(f"bad duration {text!r} (want e.g. 365d, 3m, 90s)")
    return dt.timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})


def _hash_for(key: CertificateIssuerPrivateKeyTypes) -> hashes.SHA256 | None:
    return None if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey) else hashes.SHA256()


@dataclass(frozen=True, repr=False)
class Signer:
    """The pool CA (repr hides the key)."""

    cert: x509.Certificate
    key: CertificateIssuerPrivateKeyTypes

    def __repr__(self) -> str:
        return f"Signer({self.cert.subject.rfc4514_string()})"

    @classmethod
    def from_pem(cls, cert_pem: bytes, key_pem: bytes) -> Signer:
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(
            key,
            rsa.RSAPrivateKey
            | ec.EllipticCurvePrivateKey
            | ed25519.Ed25519PrivateKey
            | ed448.Ed448PrivateKey,
        ):
            raise TypeError(f"unsupported CA key type {type(key).__name__}")
        return cls(x509.load_pem_x509_certificate(cert_pem), key)

    @property
    def ca_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    def sign(
        self,
        subject: x509.Name,
        public_key: CertificateIssuerPublicKeyTypes,
        lifetime: dt.timedelta,
        *,
        client: bool = True,
        server: bool = False,
        ips: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
    ) -> bytes:
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        b = leaf_builder(
            subject,
            self.cert.subject,
            public_key,
            now - _BACKDATE,
            now + lifetime,
            server=server,
            client=client,
            ips=ips,
            dns=dns,
        )
        return b.sign(self.key, _hash_for(self.key)).public_bytes(serialization.Encoding.PEM)

    def sign_csr(self, csr: x509.CertificateSigningRequest, lifetime: dt.timedelta) -> bytes:
        """A client certificate with exactly the CSR's subject; only the CSR's key and subject are used."""
        return self.sign(csr.subject, csr.public_key(), lifetime)  # type: ignore[arg-type]

    def serving_cert(self, lifetime: dt.timedelta, ips: tuple[str, ...]) -> tuple[bytes, bytes]:
        """(cert PEM, key PEM) for a local HTTPS server (the quota webhook)."""
        key = new_ec_key()
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "liqo-webhook-emulator")])
        cert = self.sign(name, key.public_key(), lifetime, client=False, server=True, ips=ips)
        return cert, key_pem(key)


class CsrError(ValueError):
    """A CSR that must not be signed; the message says why (safe to show, holds no secret)."""


def load_csr(pem: bytes) -> x509.CertificateSigningRequest:
    try:
        csr = x509.load_pem_x509_csr(pem)
    except ValueError as e:
        raise CsrError(f"invalid CSR: {e}") from None
    if not csr.is_signature_valid:
        raise CsrError("invalid CSR: bad signature")
    return csr


def check_subject(csr: x509.CertificateSigningRequest, cn: str, org: str) -> None:
    """The subject must be exactly CN=<cn>, O=<org>: one of each and nothing else (no extra groups)."""
    attrs = [(a.oid, a.value) for a in csr.subject]
    want = sorted([(NameOID.COMMON_NAME.dotted_string, cn), (NameOID.ORGANIZATION_NAME.dotted_string, org)])
    got = sorted((oid.dotted_string, str(v)) for oid, v in attrs)
    if got != want:
        raise CsrError(f"CSR subject {csr.subject.rfc4514_string()!r} is not exactly CN={cn},O={org}")


def same_public_key(a: x509.Certificate | x509.CertificateSigningRequest, b_pub: Any) -> bool:
    fmt = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    return bool(a.public_key().public_bytes(*fmt) == b_pub.public_bytes(*fmt))


def renewal_due_at(cert: x509.Certificate) -> dt.datetime:
    """Liqo's 2/3 rule: renew once now >= notAfter - (notAfter - notBefore)/3."""
    nb, na = cert.not_valid_before_utc, cert.not_valid_after_utc
    return na - (na - nb) / 3
