"""A tiny certificate authority for test control planes, fake kubelets and pool credentials.

Keys are ECDSA P-256 (fast to generate, accepted by every Kubernetes component); the service-account
signing key is RSA 2048 because that is what real clusters use and what tokens are checked against.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
import ssl
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificateIssuerPublicKeyTypes,
)
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_LIFETIME = dt.timedelta(days=365)
CA_LIFETIME = dt.timedelta(days=3650)
_SKEW = dt.timedelta(minutes=1)


class Issued(NamedTuple):
    """A certificate and, when the CA generated the key pair, its private key (both PEM)."""

    cert_pem: bytes
    key_pem: bytes | None


def _name(cn: str, orgs: Sequence[str] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def key_pem(key: CertificateIssuerPrivateKeyTypes) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_ec_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def rsa_key_pair(bits: int = 2048) -> tuple[bytes, bytes]:
    """(private PKCS#8 PEM, public SubjectPublicKeyInfo PEM), e.g. for service-account token signing."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=bits)
    pub = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return key_pem(key), pub


def write_pem(path: Path, data: bytes, mode: int = 0o600) -> Path:
    """Write PEM data with restrictive permissions from the first byte (keys must never be world-readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.chmod(path, mode)
    return path


def leaf_builder(
    subject: x509.Name,
    issuer: x509.Name,
    public_key: CertificateIssuerPublicKeyTypes,
    not_before: dt.datetime,
    not_after: dt.datetime,
    *,
    server: bool = False,
    client: bool = False,
    ips: Sequence[str] = (),
    dns: Sequence[str] = (),
) -> x509.CertificateBuilder:
    """The leaf certificate every issuer here makes (the test CAs, the pool emulator's signer).

    Not a CA; digital signature (plus key encipherment for an RSA key); the asked-for extended usages and
    subject alternative names. The caller adds what its issuer adds (e.g. an authority key identifier).
    """
    usages = [ExtendedKeyUsageOID.SERVER_AUTH] * server + [ExtendedKeyUsageOID.CLIENT_AUTH] * client
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=isinstance(public_key, rsa.RSAPublicKey),
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=False,
                crl_sign=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    )
    sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    sans += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    return builder.add_extension(x509.SubjectAlternativeName(sans), critical=False) if sans else builder


def load_cert_chain(ctx: ssl.SSLContext, cert_pem: bytes, key_pem: bytes) -> None:
    """ssl loads a chain only from files: through a private temp directory, removed at once."""
    with tempfile.TemporaryDirectory(prefix="tls-") as d:
        ctx.load_cert_chain(write_pem(Path(d) / "tls.crt", cert_pem), write_pem(Path(d) / "tls.key", key_pem))


@dataclass
class CertAuthority:
    """A self-signed CA that issues leaf certificates; one per control plane."""

    key: CertificateIssuerPrivateKeyTypes
    cert: x509.Certificate

    @classmethod
    def create(cls, cn: str, lifetime: dt.timedelta = CA_LIFETIME) -> CertAuthority:
        key = new_ec_key()
        now = dt.datetime.now(dt.UTC)
        ski = x509.SubjectKeyIdentifier.from_public_key(key.public_key())
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(cn))
            .issuer_name(_name(cn))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _SKEW)
            .not_valid_after(now + lifetime)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(ski, critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(key=key, cert=cert)

    @classmethod
    def load(cls, cert_pem: bytes, key_pem_data: bytes) -> CertAuthority:
        key = serialization.load_pem_private_key(key_pem_data, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise TypeError(f"unsupported CA key type {type(key).__name__}")
        return cls(key=key, cert=x509.load_pem_x509_certificate(cert_pem))

    @property
    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return key_pem(self.key)

    def write(self, directory: Path, stem: str = "ca") -> tuple[Path, Path]:
        """Write <stem>.crt and <stem>.key into directory; returns both paths."""
        return (
            write_pem(directory / f"{stem}.crt", self.cert_pem, 0o644),
            write_pem(directory / f"{stem}.key", self.key_pem),
        )

    def issue(
        self,
        cn: str,
        orgs: Sequence[str] = (),
        *,
        server: bool = False,
        client: bool = False,
        ips: Sequence[str] = (),
        dns: Sequence[str] = (),
        not_after: dt.datetime | None = None,
        lifetime: dt.timedelta | None = None,
        public_key: CertificateIssuerPublicKeyTypes | None = None,
    ) -> Issued:
        """Issue a leaf certificate (client auth when neither server nor client is asked for).

        With ``public_key`` (e.g. from a CSR) no key is generated and ``key_pem`` is None. ``not_after``
        wins over ``lifetime``; a past ``not_after`` gives an already expired certificate for tests.
        """
        if not server and not client:
            client = True
        key = None
        if public_key is None:
            key = new_ec_key()
            public_key = key.public_key()
        now = dt.datetime.now(dt.UTC)
        end = not_after if not_after is not None else now + (lifetime or DEFAULT_LIFETIME)
        start = now - _SKEW if end > now - _SKEW else end - dt.timedelta(hours=1)
        builder = leaf_builder(
            _name(cn, orgs),
            self.cert.subject,
            public_key,
            start,
            end,
            server=server,
            client=client,
            ips=ips,
            dns=dns,
        ).add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(self.cert.public_key()),  # type: ignore[arg-type]
            critical=False,
        )
        cert = builder.sign(self.key, hashes.SHA256())
        return Issued(cert.public_bytes(serialization.Encoding.PEM), key_pem(key) if key else None)
