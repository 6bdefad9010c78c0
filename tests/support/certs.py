"""Test certificates: the fields every one has in one place; each test adds the extensions it is about."""

from __future__ import annotations

import datetime as dt

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric.types import (
    CertificateIssuerPrivateKeyTypes,
    CertificatePublicKeyTypes,
)


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
