"""vkbridge.credentials.certs: verification reasons, CSRs, lifetime math, kubeconfig rewriting."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
from collections.abc import Sequence
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.support.certs import cert_builder, self_signed
from vkbridge.credentials import certs, renewobjects
from vkbridge.credentials.certs import CertificateRejected, SigningKey
from vkbridge.credentials.serving import ServingCertificateError, _server_context
from vkbridge.kube.kubeconfig import CertInfo, KubeconfigError, parse_kubeconfig

NOW = dt.datetime(2026, 3, 1, 12, 0, 0, tzinfo=dt.UTC)
CN = "c0123456789ab-0a1b2c3d4e5f"
ORG = "c-1a2b3c4d"


def _ca(cn: str = "pool-ca") -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])
    cert = self_signed(
        key, name, not_before=NOW - dt.timedelta(days=30), not_after=NOW + dt.timedelta(days=3650)
    )
    return key, cert


CA_KEY, CA = _ca()
CA_PEM = CA.public_bytes(serialization.Encoding.PEM)


def _leaf(
    pub_key: SigningKey,
    *,
    cn: str = CN,
    orgs: Sequence[str] = (ORG,),
    not_before: dt.datetime = NOW - dt.timedelta(hours=1),
    lifetime: dt.timedelta = dt.timedelta(days=1),
    issuer: tuple[ec.EllipticCurvePrivateKey, x509.Certificate] = (CA_KEY, CA),
    ips: Sequence[str] = (),
    extra: Sequence[x509.NameAttribute[str]] = (),
) -> bytes:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs += [*extra, x509.NameAttribute(NameOID.COMMON_NAME, cn)]
    b = cert_builder(
        x509.Name(attrs),
        pub_key.public_key(),
        issuer=issuer[1].subject,
        not_before=not_before,
        not_after=not_before + lifetime,
    ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    if ips:
        b = b.add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address(i)) for i in ips]),
            critical=False,
        )
    return b.sign(issuer[0], hashes.SHA256()).public_bytes(serialization.Encoding.PEM)


@pytest.fixture(scope="module")
def key() -> ed25519.Ed25519PrivateKey:
    return ed25519.Ed25519PrivateKey.generate()


def verify(cert_pem: bytes, key: SigningKey, **kw: object) -> CertInfo:
    args: dict[str, object] = {"key": key, "cn": CN, "orgs": (ORG,), "now": NOW, "ca_pem": CA_PEM}
    args.update(kw)
    return certs.verify_certificate(cert_pem, **args)  # type: ignore[arg-type]


# ---- verification -----------------------------------------------------------------------------------


def test_good_certificate_is_accepted_and_described(key: ed25519.Ed25519PrivateKey) -> None:
    pem = _leaf(key)
    info = verify(pem, key)
    assert info.cn == CN and info.orgs == (ORG,)
    assert info.not_after == NOW - dt.timedelta(hours=1) + dt.timedelta(days=1)


def test_not_pem_is_rejected(key: ed25519.Ed25519PrivateKey) -> None:
    with pytest.raises(CertificateRejected, match="not a PEM certificate"):
        verify(b"garbage", key)


def test_other_ca_is_rejected(key: ed25519.Ed25519PrivateKey) -> None:
    other = _ca("other-ca")
    with pytest.raises(CertificateRejected, match="not signed by the expected CA"):
        verify(_leaf(key, issuer=other), key)


def test_same_issuer_name_but_forged_signature_is_rejected(key: ed25519.Ed25519PrivateKey) -> None:
    forger = _ca("pool-ca")  # same subject as the real CA, different key
    with pytest.raises(CertificateRejected, match="not signed by the expected CA"):
        verify(_leaf(key, issuer=forger), key)


def test_ca_bundle_with_several_cas_accepts_any_issuer(key: ed25519.Ed25519PrivateKey) -> None:
    _other_key, other = _ca("other-ca")
    bundle = other.public_bytes(serialization.Encoding.PEM) + CA_PEM
    verify(_leaf(key), key, ca_pem=bundle)


@pytest.mark.parametrize(
    ("cn", "orgs", "extra"),
    [
        ("admin", (ORG,), ()),
        (CN, ("c-other",), ()),
        (CN, (ORG, "system:masters"), ()),
        (CN, (), ()),
        (CN, (ORG,), (x509.NameAttribute(NameOID.ORGANIZATIONAL_UNIT_NAME, "x"),)),
    ],
    ids=["other-cn", "other-org", "extra-group", "no-org", "extra-attribute"],
)
def test_subject_must_be_exact(
    key: ed25519.Ed25519PrivateKey, cn: str, orgs: tuple[str, ...], extra: tuple[x509.NameAttribute[str], ...]
) -> None:
    with pytest.raises(CertificateRejected, match=f"is not exactly CN={CN},O={ORG}"):
        verify(_leaf(key, cn=cn, orgs=orgs, extra=extra), key)


def test_other_public_key_is_rejected(key: ed25519.Ed25519PrivateKey) -> None:
    stranger = ed25519.Ed25519PrivateKey.generate()
    with pytest.raises(CertificateRejected, match="does not match our private key"):
        verify(_leaf(stranger), key)


def test_expired_is_rejected_with_the_time(key: ed25519.Ed25519PrivateKey) -> None:
    pem = _leaf(key, not_before=NOW - dt.timedelta(days=2), lifetime=dt.timedelta(days=1))
    with pytest.raises(CertificateRejected, match="expired at 2026-02-28T12:00:00Z"):
        verify(pem, key)


def test_expiring_exactly_now_is_rejected(key: ed25519.Ed25519PrivateKey) -> None:
    pem = _leaf(key, not_before=NOW - dt.timedelta(days=1), lifetime=dt.timedelta(days=1))
    with pytest.raises(CertificateRejected, match="expired"):
        verify(pem, key)


def test_not_yet_valid_beyond_skew_is_rejected_within_skew_accepted(key: ed25519.Ed25519PrivateKey) -> None:
    future = _leaf(key, not_before=NOW + dt.timedelta(minutes=10))
    with pytest.raises(CertificateRejected, match="not valid before 2026-03-01T12:10:00Z"):
        verify(future, key)
    verify(_leaf(key, not_before=NOW + dt.timedelta(minutes=2)), key)
    with pytest.raises(CertificateRejected, match="not valid before"):
        verify(_leaf(key, not_before=NOW + dt.timedelta(minutes=2)), key, skew=dt.timedelta(0))


def test_missing_ip_san_is_rejected(key: ed25519.Ed25519PrivateKey) -> None:
    verify(_leaf(key, ips=["127.0.0.1"]), key, ips=["127.0.0.1"])
    with pytest.raises(CertificateRejected, match=r"no IP SAN 10\.0\.0\.7"):
        verify(_leaf(key, ips=["127.0.0.1"]), key, ips=["10.0.0.7"])


def test_without_ca_the_chain_is_not_checked(key: ed25519.Ed25519PrivateKey) -> None:
    verify(_leaf(key, issuer=_ca("anything")), key, ca_pem=None)


def test_bad_ca_bundle_is_a_clear_reason(key: ed25519.Ed25519PrivateKey) -> None:
    with pytest.raises(CertificateRejected, match="CA bundle"):
        verify(_leaf(key), key, ca_pem=b"not pem")


# ---- keys -------------------------------------------------------------------------------------------


def test_load_private_key_never_echoes_input() -> None:
    secret = b"-----BEGIN PRIVATE KEY-----\nTOPSECRETMATERIAL\n-----END PRIVATE KEY-----\n"
    with pytest.raises(CertificateRejected) as exc:
        certs.load_private_key(secret)
    assert "TOPSECRET" not in str(exc.value)


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_load_private_key_round_trip(kind: str) -> None:
    key: SigningKey
    if kind == "ed25519":
        key = ed25519.Ed25519PrivateKey.generate()
    elif kind == "ecdsa":
        key = ec.generate_private_key(ec.SECP256R1())
    else:
        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    loaded = certs.load_private_key(certs.private_key_pem(key))
    assert certs.public_key_matches(x509.load_pem_x509_certificate(_leaf(key)), loaded)


def test_renew_public_key_is_raw_for_ed25519_and_pem_otherwise(key: ed25519.Ed25519PrivateKey) -> None:
    raw = certs.renew_public_key(key)
    assert len(raw) == 32
    assert raw == key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    ec_key = ec.generate_private_key(ec.SECP256R1())
    assert certs.renew_public_key(ec_key).startswith(b"-----BEGIN PUBLIC KEY-----")


# ---- CSRs -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa"])
def test_csr_has_exactly_the_subject_and_our_key(kind: str) -> None:
    key: SigningKey = (
        ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else ec.generate_private_key(ec.SECP256R1())
    )
    csr = x509.load_pem_x509_csr(certs.build_csr(key, CN, [ORG]))
    assert csr.is_signature_valid
    pairs = sorted((a.oid.dotted_string, str(a.value)) for a in csr.subject)
    assert pairs == sorted(
        [(NameOID.COMMON_NAME.dotted_string, CN), (NameOID.ORGANIZATION_NAME.dotted_string, ORG)]
    )
    assert certs.public_key_matches(csr, key)
    assert list(csr.extensions) == []


def test_ed25519_csr_is_deterministic(key: ed25519.Ed25519PrivateKey) -> None:
    assert certs.build_csr(key, CN, [ORG]) == certs.build_csr(key, CN, [ORG])


def test_serving_csr_subject_and_san() -> None:
    key = certs.new_serving_key()
    assert isinstance(key.curve, ec.SECP256R1)
    csr = x509.load_pem_x509_csr(certs.serving_csr(key, "c0123456789ab", "127.0.0.1"))
    assert csr.is_signature_valid
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "system:node:c0123456789ab"
    assert [a.value for a in csr.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
        "system:nodes"
    ]
    san = csr.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert san.get_values_for_type(x509.DNSName) == []


def test_self_signed_serving_certificate() -> None:
    key = certs.new_serving_key()
    pem = certs.self_signed_serving_certificate(key, "node-a", "10.1.2.3", now=NOW)
    info = certs.verify_certificate(
        pem, key=key, cn="system:node:node-a", orgs=["liqo.io"], now=NOW, ca_pem=pem, ips=["10.1.2.3"]
    )
    assert info.not_after - info.not_before == dt.timedelta(days=365)


# ---- lifetime math ----------------------------------------------------------------------------------


def test_renew_point_default_is_liqos_two_thirds() -> None:
    nb, na = NOW, NOW + dt.timedelta(days=365)
    assert certs.renew_point(nb, na) == na - (na - nb) / 3
    assert certs.renew_point(nb, na, 0.8) == nb + dt.timedelta(days=292)
    with pytest.raises(ValueError):
        certs.renew_point(nb, na, 0)
    with pytest.raises(ValueError):
        certs.renew_point(nb, na, 1.5)


def test_elapsed_fraction_and_seconds_to_expiry() -> None:
    nb, na = NOW, NOW + dt.timedelta(minutes=3)
    assert certs.elapsed_fraction(nb, na, NOW - dt.timedelta(minutes=1)) == 0.0
    assert certs.elapsed_fraction(nb, na, NOW + dt.timedelta(minutes=2)) == pytest.approx(2 / 3)
    assert certs.elapsed_fraction(nb, na, NOW + dt.timedelta(minutes=6)) == pytest.approx(2.0)
    assert certs.elapsed_fraction(nb, nb, NOW) == float("inf")
    assert certs.seconds_to_expiry(na, NOW) == 180.0
    assert certs.seconds_to_expiry(na, NOW + dt.timedelta(minutes=4)) == -60.0


# ---- kubeconfig ------------------------------------------------------------------------------------


def _kubeconfig(key: SigningKey, cert_pem: bytes, *, file_ref: bool = False) -> dict[str, object]:
    user: dict[str, str] = {"client-key-data": certs.b64(certs.private_key_pem(key))}
    if file_ref:
        user["client-certificate"] = "/nonexistent/old.crt"
    else:
        user["client-certificate-data"] = certs.b64(cert_pem)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "pool",
        "clusters": [
            {
                "name": "pool",
                "cluster": {
                    "server": "https://127.0.0.1:6443",
                    "certificate-authority-data": certs.b64(CA_PEM),
                    "proxy-url": "http://127.0.0.1:3128",
                },
            }
        ],
        "users": [{"name": "other", "user": {"token": "x"}}, {"name": "tenant", "user": user}],
        "contexts": [{"name": "pool", "context": {"cluster": "pool", "user": "tenant", "namespace": "ns"}}],
    }


def test_kubeconfig_with_certificate_replaces_only_the_certificate(key: ed25519.Ed25519PrivateKey) -> None:
    old, new = _leaf(key), _leaf(key, not_before=NOW)
    doc = _kubeconfig(key, old)
    out = certs.kubeconfig_with_certificate(doc, new)
    assert doc["users"][1]["user"]["client-certificate-data"] == certs.b64(old), "input not mutated"  # type: ignore[index]
    assert certs.kubeconfig_client_certificate(out) == new
    assert certs.kubeconfig_client_key(out) == certs.private_key_pem(key)
    assert out["clusters"] == doc["clusters"] and out["contexts"] == doc["contexts"]
    assert out["users"][0] == doc["users"][0]  # type: ignore[index]
    creds = parse_kubeconfig(certs.dump_kubeconfig(out))
    assert creds.client_cert_pem == new and creds.server == "https://127.0.0.1:6443"
    assert creds.ca_pem == CA_PEM and creds.proxy_url == "http://127.0.0.1:3128"
    assert certs.load_kubeconfig_doc(certs.dump_kubeconfig(out)) == out


def test_kubeconfig_with_certificate_drops_a_file_reference(key: ed25519.Ed25519PrivateKey) -> None:
    out = certs.kubeconfig_with_certificate(_kubeconfig(key, b"", file_ref=True), _leaf(key))
    user = out["users"][1]["user"]
    assert "client-certificate" not in user and "client-certificate-data" in user


def test_kubeconfig_without_context_user_is_a_clear_error(key: ed25519.Ed25519PrivateKey) -> None:
    doc = _kubeconfig(key, _leaf(key))
    doc["contexts"] = [{"name": "pool", "context": {"cluster": "pool", "user": "ghost"}}]
    with pytest.raises(KubeconfigError, match="user 'ghost' not found"):
        certs.kubeconfig_with_certificate(doc, _leaf(key))
    with pytest.raises(KubeconfigError, match="not a mapping"):
        certs.load_kubeconfig_doc(b"- a list")


def test_decode_pem_field_accepts_liqo_base64_and_plain_pem(key: ed25519.Ed25519PrivateKey) -> None:
    pem = _leaf(key)
    assert certs.decode_pem_field(base64.b64encode(pem).decode(), "signedCRT") == pem
    assert certs.decode_pem_field(pem.decode(), "signedCRT") == pem
    with pytest.raises(CertificateRejected, match="signedCRT is empty"):
        certs.decode_pem_field("", "signedCRT")
    with pytest.raises(CertificateRejected, match="signedCRT is not valid base64"):
        certs.decode_pem_field("***", "signedCRT")


# ---- serving certificates that cryptography or OpenSSL cannot take (issue 15 item 20) -----------------


def _duplicate_san_certificate(key: ec.EllipticCurvePrivateKey, cn: str) -> bytes:
    """A serving certificate with its SubjectAlternativeName twice (a signer bug or a hostile one).

    The builder refuses duplicates, so a second extension with a same-length OID is patched into a SAN.
    """
    san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, cn),
        ]
    )
    der = (
        cert_builder(
            name,
            key.public_key(),
            not_before=NOW - dt.timedelta(minutes=1),
            not_after=NOW + dt.timedelta(days=1),
            serial=7,
        )
        .add_extension(san, critical=False)
        .add_extension(
            x509.UnrecognizedExtension(x509.ObjectIdentifier("2.5.29.99"), san.public_bytes()), False
        )
        .sign(key, hashes.SHA256())
        .public_bytes(serialization.Encoding.DER)
    )
    assert der.count(b"\x06\x03\x55\x1d\x63") == 1
    der = der.replace(b"\x06\x03\x55\x1d\x63", b"\x06\x03\x55\x1d\x11")
    return x509.load_der_x509_certificate(der).public_bytes(serialization.Encoding.PEM)


def test_serving_certificate_with_a_duplicate_extension_is_rejected_not_raised() -> None:
    key = certs.new_serving_key()
    cn, orgs = certs.serving_subject("n1")
    pem = _duplicate_san_certificate(key, cn)
    with pytest.raises(CertificateRejected, match="malformed: DuplicateExtension"):
        certs.verify_certificate(pem, key=key, cn=cn, orgs=orgs, now=NOW, ips=["127.0.0.1"])


def test_serving_chain_openssl_cannot_load_is_a_serving_error_not_ssl_error() -> None:
    key = certs.new_serving_key()
    good = certs.self_signed_serving_certificate(key, "n1", "127.0.0.1", now=NOW)
    garbage = good + b"-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"
    for chain in (garbage, _duplicate_san_certificate(key, "system:node:n1")):
        with pytest.raises(ServingCertificateError, match="cannot be loaded"):
            _server_context(chain, certs.private_key_pem(key))


def test_serving_csr_and_self_signed_certificate_for_a_63_character_node_name() -> None:
    """CN ``system:node:`` + 63 characters is 75, over X.509's advisory 64: Go signs it, so must we ask."""
    node = "n" * 63
    key = certs.new_serving_key()
    csr = x509.load_pem_x509_csr(certs.serving_csr(key, node, "127.0.0.1"))
    assert csr.is_signature_valid
    assert csr.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{node}"
    pem = certs.self_signed_serving_certificate(key, node, "127.0.0.1", now=NOW)
    info = certs.verify_certificate(
        pem, key=key, cn=f"system:node:{node}", orgs=["liqo.io"], now=NOW, ca_pem=pem, ips=["127.0.0.1"]
    )
    assert info.cn == f"system:node:{node}"
    assert _server_context(pem, certs.private_key_pem(key)) is not None


# ---- vkbridge.credentials.renewobjects: the Renew and the Secret, as the renewer sees them --------------

SCOPE = renewobjects.RenewScope("liqo-tenant-c-1a2b3c4d", "c0123456789ab", "c-1a2b3c4d")


def _secret(key: SigningKey, cert_pem: bytes) -> dict[str, object]:
    doc = certs.dump_kubeconfig(_kubeconfig(key, cert_pem))
    return {
        "metadata": {"name": "kubeconfig", "resourceVersion": "7"},
        "data": {"kubeconfig": certs.b64(doc)},
    }


def test_renew_is_named_after_the_certificate_it_replaces(key: ed25519.Ed25519PrivateKey) -> None:
    info = certs.verify_certificate(_leaf(key), key=key, cn=CN, orgs=[ORG], now=NOW, ca_pem=CA_PEM)
    name = SCOPE.name(info)
    assert name == f"c0123456789ab-renew-{format(info.serial, 'x')[-10:]}"
    assert len(name) <= 63  # a name, and a label value elsewhere


def test_renew_body_is_ours_and_matches_only_its_key(key: ed25519.Ed25519PrivateKey) -> None:
    info = certs.verify_certificate(_leaf(key), key=key, cn=CN, orgs=[ORG], now=NOW, ca_pem=CA_PEM)
    body = SCOPE.body("r1", key, info)
    assert body["metadata"]["namespace"] == "liqo-tenant-c-1a2b3c4d"
    assert body["spec"]["resourceSliceRef"] == {"name": "c0123456789ab"}
    assert SCOPE.is_ours(body)
    assert renewobjects.renew_matches(body, key, info)
    assert not renewobjects.renew_matches(body, ed25519.Ed25519PrivateKey.generate(), info)
    assert not renewobjects.renew_matches({"spec": {"csr": "not a csr"}}, key, info)
    assert SCOPE.selector == "app.kubernetes.io/managed-by=vkbridge,liqo.io/resourceslice-name=c0123456789ab"


@pytest.mark.parametrize(
    "change",
    [
        {"metadata": {"ownerReferences": [{"kind": "Identity"}]}},
        {"metadata": {"labels": {"app.kubernetes.io/managed-by": "liqo"}}},
        {"spec": {"consumerClusterID": "c-other"}},
        {"spec": {"identityType": "ControlPlane"}},
        {"spec": {"resourceSliceRef": {"name": "other-slice"}}},
    ],
)
def test_a_renew_someone_else_made_is_not_ours(
    key: ed25519.Ed25519PrivateKey, change: dict[str, Any]
) -> None:
    info = certs.verify_certificate(_leaf(key), key=key, cn=CN, orgs=[ORG], now=NOW, ca_pem=CA_PEM)
    body = SCOPE.body("r1", key, info)
    for part, values in change.items():
        body[part] = {**body[part], **values}
    assert not SCOPE.is_ours(body)


def test_signed_crt_of_a_status() -> None:
    assert renewobjects.signed_crt({"status": {"authParams": {"signedCRT": "abc"}}}) == "abc"
    assert renewobjects.signed_crt({"status": None}) is None
    assert renewobjects.signed_crt({}) is None


def test_secret_state_compares_key_and_expiry(key: ed25519.Ed25519PrivateKey) -> None:
    old_pem, new_pem = _leaf(key), _leaf(key, not_before=NOW)
    new = certs.verify_certificate(new_pem, key=key, cn=CN, orgs=[ORG], now=NOW, ca_pem=CA_PEM)
    state = renewobjects.secret_state
    assert state(_secret(key, new_pem), key, new) == "current"
    assert state(_secret(key, old_pem), key, new) == "older"
    other = ed25519.Ed25519PrivateKey.generate()
    assert state(_secret(other, _leaf(other)), key, new) == "other-key"
    assert state({"data": {"kubeconfig": "!!"}}, key, new) == "unreadable"
    assert state({}, key, new) == "unreadable"


def test_secret_with_certificate_changes_only_the_certificate(key: ed25519.Ed25519PrivateKey) -> None:
    old_pem, new_pem = _leaf(key), _leaf(key, not_before=NOW)
    secret = _secret(key, old_pem)
    out = renewobjects.secret_with_certificate(secret, new_pem)
    assert out["metadata"] == secret["metadata"]
    doc = certs.load_kubeconfig_doc(base64.b64decode(out["data"]["kubeconfig"]))
    assert certs.kubeconfig_client_certificate(doc) == new_pem
    assert certs.kubeconfig_client_key(doc) == certs.private_key_pem(key)
