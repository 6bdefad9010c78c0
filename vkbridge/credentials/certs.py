"""Pure certificate helpers: verify before use, build CSRs, rewrite a kubeconfig, lifetime math.

Nothing here does I/O or reads the clock: callers pass ``now``. Every rejection is a
``CertificateRejected`` whose message is one clear reason, safe to log (never key material).
"""

from __future__ import annotations

import base64
import binascii
import copy
import datetime as dt
import ipaddress
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import yaml
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from reflectors.forge.timefmt import rfc3339
from vkbridge.kube.kubeconfig import CertInfo, KubeconfigError, cert_info_of, load_kubeconfig_doc

__all__ = [
    "DEFAULT_RENEW_FRACTION",
    "DEFAULT_SKEW",
    "KUBELET_SERVING_USAGES",
    "CertificateRejected",
    "SigningKey",
    "b64",
    "build_csr",
    "cert_info_of",
    "decode_pem_field",
    "dump_kubeconfig",
    "elapsed_fraction",
    "kubeconfig_client_certificate",
    "kubeconfig_client_key",
    "kubeconfig_with_certificate",
    "load_kubeconfig_doc",
    "load_private_key",
    "new_serving_key",
    "private_key_pem",
    "public_key_matches",
    "renew_point",
    "renew_public_key",
    "same_key",
    "seconds_to_expiry",
    "self_signed_serving_certificate",
    "serving_csr",
    "serving_subject",
    "verify_certificate",
]

DEFAULT_RENEW_FRACTION = 2 / 3
DEFAULT_SKEW = dt.timedelta(minutes=5)
# certificates.k8s.io usages of a kubelet serving certificate (client-go certificate manager).
KUBELET_SERVING_USAGES = ("digital signature", "key encipherment", "server auth")

SigningKey = (
    ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
)
_SPKI = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
# cryptography warns on every CN over RFC 5280's advisory 64 characters (building or parsing one);
# ours are legitimate (see _name), and a warning on stderr per certificate would only be noise.
warnings.filterwarnings("ignore", message="Attribute's length must be", category=UserWarning)


class CertificateRejected(ValueError):
    """A certificate (or key) vkbridge will not use; the message is the reason, safe to log."""


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ---------------------------------------------------------------------------------------------- keys


def load_private_key(pem: bytes) -> SigningKey:
    """An unencrypted PEM private key of a type that can sign a CSR; errors never echo the input."""
    try:
        key = serialization.load_pem_private_key(pem, password=None)
    except (ValueError, TypeError):
        raise CertificateRejected("the client key is not a valid unencrypted PEM private key") from None
    except Exception:
        raise CertificateRejected("the client key is not a supported private key") from None
    if not isinstance(
        key,
        ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey,
    ):
        raise CertificateRejected(f"unsupported client key type {type(key).__name__}")
    return key


def private_key_pem(key: SigningKey) -> bytes:
    """PKCS#8 PEM, for loading into an in-memory TLS context only."""
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def new_serving_key() -> ec.EllipticCurvePrivateKey:
    """ECDSA P-256, as client-go's certificate manager generates for kubelet serving certificates."""
    return ec.generate_private_key(ec.SECP256R1())


def public_key_matches(cert: x509.Certificate | x509.CertificateSigningRequest, key: SigningKey) -> bool:
    return bool(cert.public_key().public_bytes(*_SPKI) == key.public_key().public_bytes(*_SPKI))


def same_key(a: SigningKey, b: SigningKey) -> bool:
    """Both private keys have the same public key."""
    return bool(a.public_key().public_bytes(*_SPKI) == b.public_key().public_bytes(*_SPKI))


def renew_public_key(key: SigningKey) -> bytes:
    """Renew ``spec.publicKey`` bytes: raw for Ed25519 (Liqo's ``ed25519.PublicKey``), else PEM SPKI."""
    pub = key.public_key()
    if isinstance(pub, ed25519.Ed25519PublicKey):
        return pub.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return pub.public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)


def _hash_for(key: SigningKey) -> hashes.SHA256 | None:
    return None if isinstance(key, ed25519.Ed25519PrivateKey | ed448.Ed448PrivateKey) else hashes.SHA256()


# ---------------------------------------------------------------------------------------------- parsing


def decode_pem_field(value: object, what: str) -> bytes:
    """A CRD ``format: byte`` field holding a PEM (base64 in JSON, as Liqo stores signedCRT/ca)."""
    if not isinstance(value, str) or not value:
        raise CertificateRejected(f"{what} is empty")
    if value.lstrip().startswith("-----BEGIN"):
        return value.encode()
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise CertificateRejected(f"{what} is not valid base64") from None


def _load_cert(pem: bytes, what: str = "certificate") -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(pem)
    except ValueError:
        raise CertificateRejected(f"{what} is not a PEM certificate") from None


def _load_cas(pem: bytes) -> list[x509.Certificate]:
    try:
        cas = x509.load_pem_x509_certificates(pem)
    except ValueError:
        raise CertificateRejected("the CA bundle is not valid PEM") from None
    if not cas:
        raise CertificateRejected("the CA bundle is empty")
    return cas


# ---------------------------------------------------------------------------------------------- verification


def _signed_by(cert: x509.Certificate, cas: Sequence[x509.Certificate]) -> bool:
    for ca in cas:
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return True
    return False


def _subject_pairs(name: x509.Name) -> list[tuple[str, str]]:
    return sorted((a.oid.dotted_string, str(a.value)) for a in name)


def _wanted_subject(cn: str, orgs: Sequence[str]) -> list[tuple[str, str]]:
    pairs = [(NameOID.COMMON_NAME.dotted_string, cn)]
    pairs += [(NameOID.ORGANIZATION_NAME.dotted_string, o) for o in orgs]
    return sorted(pairs)


def verify_certificate(
    cert_pem: bytes,
    *,
    key: SigningKey,
    cn: str,
    orgs: Sequence[str],
    now: dt.datetime,
    ca_pem: bytes | None = None,
    ips: Sequence[str] = (),
    skew: dt.timedelta = DEFAULT_SKEW,
) -> CertInfo:
    """Check a certificate before using it; raise ``CertificateRejected`` with the first failing reason.

    Chains directly to one certificate of ``ca_pem`` (when given), the subject is exactly CN=cn plus
    O=orgs (nothing else: a pool must not add groups), the public key is ours, it is valid now (a
    not-before up to ``skew`` in the future is tolerated) and, for serving certificates, it names ``ips``.
    """
    cert = _load_cert(cert_pem)
    try:
        return _verify(cert, key, cn, orgs, now, ca_pem, ips, skew)
    except CertificateRejected:
        raise
    except (ValueError, TypeError, x509.DuplicateExtension, x509.UnsupportedGeneralNameType) as exc:
        # cryptography parses lazily: a malformed or duplicated extension or name surfaces only here.
        raise CertificateRejected(f"certificate is malformed: {type(exc).__name__}") from None


def _verify(
    cert: x509.Certificate,
    key: SigningKey,
    cn: str,
    orgs: Sequence[str],
    now: dt.datetime,
    ca_pem: bytes | None,
    ips: Sequence[str],
    skew: dt.timedelta,
) -> CertInfo:
    if ca_pem is not None and not _signed_by(cert, _load_cas(ca_pem)):
        raise CertificateRejected(
            f"certificate (issuer {cert.issuer.rfc4514_string()!r}) is not signed by the expected CA"
        )
    if _subject_pairs(cert.subject) != _wanted_subject(cn, orgs):
        want = ",".join([f"CN={cn}", *(f"O={o}" for o in orgs)])
        raise CertificateRejected(
            f"certificate subject {cert.subject.rfc4514_string()!r} is not exactly {want}"
        )
    if not public_key_matches(cert, key):
        raise CertificateRejected("certificate public key does not match our private key")
    info = cert_info_of(cert)
    if info.not_before > now + skew:
        raise CertificateRejected(f"certificate is not valid before {rfc3339(info.not_before)} (clock skew?)")
    if info.not_after <= now:
        raise CertificateRejected(f"certificate expired at {rfc3339(info.not_after)}")
    if info.not_after <= info.not_before:
        raise CertificateRejected("certificate validity window is empty")
    if ips:
        missing = [ip for ip in ips if ip not in _san_ips(cert)]
        if missing:
            raise CertificateRejected(f"certificate has no IP SAN {', '.join(missing)}")
    return info


def _san_ips(cert: x509.Certificate) -> set[str]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return set()
    return {str(ip) for ip in san.get_values_for_type(x509.IPAddress)}


# ---------------------------------------------------------------------------------------------- CSRs


def _name(cn: str, orgs: Sequence[str]) -> x509.Name:
    """O attributes first, then CN: the order of Liqo's (and client-go's) generated CSRs.

    The CN is not held to RFC 5280's advisory 64 characters, as Go's crypto/x509 does not hold it:
    ``system:node:`` plus a 63-character node name is 75 characters and kube-apiserver signs it.
    """
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    if not cn:
        raise ValueError("a certificate subject needs a CN")
    common_name = x509.NameAttribute(NameOID.COMMON_NAME, cn, _validate=len(cn) <= 64)
    return x509.Name([*attrs, common_name])


def build_csr(key: SigningKey, cn: str, orgs: Sequence[str]) -> bytes:
    """PEM PKCS#10 for exactly CN=cn, O=orgs, signed by ``key`` (no extensions)."""
    csr = x509.CertificateSigningRequestBuilder().subject_name(_name(cn, orgs)).sign(key, _hash_for(key))
    return csr.public_bytes(serialization.Encoding.PEM)


def serving_subject(node_name: str) -> tuple[str, tuple[str, ...]]:
    """CN and O of a kubelet serving certificate (what the kubelet-serving signer requires)."""
    return f"system:node:{node_name}", ("system:nodes",)


def _sans(node_ip: str) -> x509.SubjectAlternativeName:
    try:
        return x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(node_ip))])
    except ValueError:
        return x509.SubjectAlternativeName([x509.DNSName(node_ip)])


def serving_csr(key: SigningKey, node_name: str, node_ip: str) -> bytes:
    """The kubelet serving CSR: CN system:node:<node>, O system:nodes, SAN = the node IP only."""
    cn, orgs = serving_subject(node_name)
    csr = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(_name(cn, orgs))
        .add_extension(_sans(node_ip), critical=False)
        .sign(key, _hash_for(key))
    )
    return csr.public_bytes(serialization.Encoding.PEM)


def self_signed_serving_certificate(
    key: SigningKey,
    node_name: str,
    node_ip: str,
    *,
    now: dt.datetime,
    lifetime: dt.timedelta = dt.timedelta(days=365),
    serial: int | None = None,
) -> bytes:
    """Liqo's ``--certificate-type=self-signed``: CN system:node:<node>, O liqo.io, IP SAN node IP."""
    name = _name(f"system:node:{node_name}", ("liqo.io",))
    start = now.replace(microsecond=0) - dt.timedelta(minutes=1)
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial if serial is not None else x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + lifetime)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(_sans(node_ip), critical=False)
    )
    return builder.sign(key, _hash_for(key)).public_bytes(serialization.Encoding.PEM)


# ---------------------------------------------------------------------------------------------- lifetime


def renew_point(
    not_before: dt.datetime, not_after: dt.datetime, fraction: float = DEFAULT_RENEW_FRACTION
) -> dt.datetime:
    """not_before + fraction x lifetime (Liqo's rule is fraction 2/3: notAfter - lifetime/3)."""
    if not 0.0 < fraction <= 1.0:
        raise ValueError(f"fraction must be in (0, 1], got {fraction!r}")
    return not_before + (not_after - not_before) * fraction


def elapsed_fraction(not_before: dt.datetime, not_after: dt.datetime, now: dt.datetime) -> float:
    """How much of the lifetime has passed (0 before not_before, > 1 after expiry)."""
    lifetime = (not_after - not_before).total_seconds()
    if lifetime <= 0:
        return float("inf")
    return max(0.0, (now - not_before).total_seconds() / lifetime)


def seconds_to_expiry(not_after: dt.datetime, now: dt.datetime) -> float:
    """Negative once expired (so a dashboard shows how long ago)."""
    return (not_after - now).total_seconds()


# ---------------------------------------------------------------------------------------------- kubeconfig


def _user_entry(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """The ``users[]`` entry of the current (or only) context."""
    contexts = [c for c in doc.get("contexts") or [] if isinstance(c, Mapping)]
    name = doc.get("current-context") or (contexts[0].get("name") if len(contexts) == 1 else None)
    ctx = next((c for c in contexts if c.get("name") == name), None)
    if ctx is None:
        raise KubeconfigError("kubeconfig has no usable current-context")
    user_name = (ctx.get("context") or {}).get("user")
    entry = next(
        (u for u in doc.get("users") or [] if isinstance(u, Mapping) and u.get("name") == user_name), None
    )
    if entry is None or not isinstance(entry.get("user"), Mapping):
        raise KubeconfigError(f"kubeconfig user {user_name!r} not found")
    return entry


def _user_data(doc: Mapping[str, Any], key: str) -> bytes | None:
    raw = _user_entry(doc)["user"].get(key)
    if not raw:
        return None
    try:
        return base64.b64decode(str(raw), validate=True)
    except (binascii.Error, ValueError):
        raise KubeconfigError(f"kubeconfig {key} is not valid base64") from None


def kubeconfig_client_certificate(doc: Mapping[str, Any]) -> bytes | None:
    return _user_data(doc, "client-certificate-data")


def kubeconfig_client_key(doc: Mapping[str, Any]) -> bytes | None:
    return _user_data(doc, "client-key-data")


def kubeconfig_with_certificate(doc: Mapping[str, Any], cert_pem: bytes) -> dict[str, Any]:
    """A copy of ``doc`` whose current user presents ``cert_pem``; server, CA, key and the rest unchanged."""
    out = copy.deepcopy(dict(doc))
    entry = _user_entry(out)
    user = entry["user"]
    assert isinstance(user, dict)
    user.pop("client-certificate", None)  # a file reference would win over the new data
    user["client-certificate-data"] = b64(cert_pem)
    return out


def dump_kubeconfig(doc: Mapping[str, Any]) -> bytes:
    return yaml.safe_dump(dict(doc), sort_keys=False).encode()
