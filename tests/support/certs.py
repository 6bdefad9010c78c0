"""Test certificates: the fields every one has in one place; each test adds the extensions it is about."""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificatePublicKeyTypes,
)
from cryptography.x509.oid import NameOID


def cert_builder(
    subject: x509.Name,
    public_key: CertificatePublicKeyTypes,
    *,
    not_before: dt.datetime,
    not_after: dt.datetime,
    issuer: x509.Name | None = None,
    serial: int | None = None,
) -> x509.CertificateBuilder:
    """Subject, issuer (``subject``: self-issued), key, serial (random) and validity; not signed yet."""
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer or subject)
        .public_key(public_key)
        .serial_number(serial if serial is not None else x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
    )


def self_signed(
    key: CertificateIssuerPrivateKeyTypes,
    subject: x509.Name,
    *,
    not_before: dt.datetime,
    not_after: dt.datetime,
    ca: bool = True,
) -> x509.Certificate:
    """A self-signed certificate, a CA (BasicConstraints critical) unless ``ca`` is False."""
    builder = cert_builder(subject, key.public_key(), not_before=not_before, not_after=not_after)
    builder = builder.add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    return builder.sign(key, hashes.SHA256())


def loopback_tls(directory: Path, common_name: str) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """A server context for 127.0.0.1 (self-signed, valid an hour) and a client context that verifies it,
    as in production; the key and certificate are written to ``directory`` for ``load_cert_chain``."""
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        cert_builder(name, key.public_key(), not_before=now - dt.timedelta(minutes=1),
                     not_after=now + dt.timedelta(hours=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                       critical=False)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    pem = cert.public_bytes(serialization.Encoding.PEM)
    (directory / "cert.pem").write_bytes(pem)
    (directory / "key.pem").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(directory / "cert.pem", directory / "key.pem")
    return server, ssl.create_default_context(cadata=pem.decode())
