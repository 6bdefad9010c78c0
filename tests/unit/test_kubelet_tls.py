"""The kubelet API's TLS: client-certificate identity and client CA reloads, over real handshakes
between two in-memory TLS endpoints (``ssl.MemoryBIO``: OpenSSL does the verification, no socket)."""

from __future__ import annotations

import datetime as dt
import os
import ssl
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from e2e.pki import CertAuthority, key_pem, new_ec_key
from vkbridge.credentials.serving import ServingKeyPair
from vkbridge.kubeletapi.auth import UserInfo, user_from_peercert
from vkbridge.kubeletapi.tls import ServingTLS

HOST = "kubelet.test"


def _load_chain(ctx: ssl.SSLContext, cert_pem: bytes, key: bytes) -> None:
    """From memory, as the serving certificate manager does (OpenSSL wants a path: a memfd's)."""
    fd = os.memfd_create("test-chain", os.MFD_CLOEXEC)
    try:
        os.write(fd, cert_pem + key)
        ctx.load_cert_chain(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def serving_tls(serving_ca: CertAuthority, client_ca_pem: bytes) -> ServingTLS:
    issued = serving_ca.issue("system:node:vk", server=True, dns=[HOST])
    assert issued.key_pem is not None
    pair = ServingKeyPair(issued.cert_pem, issued.key_pem)
    return ServingTLS(lambda: pair, client_ca_pem)


def client_context(serving_ca: CertAuthority, cert_pem: bytes, key: bytes) -> ssl.SSLContext:
    ctx = ssl.create_default_context(cadata=serving_ca.cert_pem.decode())
    _load_chain(ctx, cert_pem, key)
    return ctx


def handshake(server: ssl.SSLContext, client: ssl.SSLContext) -> dict[str, Any]:
    """Run both sides of a TLS handshake in memory; the server's view of the client certificate."""
    s_in, s_out, c_in, c_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    srv = server.wrap_bio(s_in, s_out, server_side=True)
    cli = client.wrap_bio(c_in, c_out, server_hostname=HOST)
    done = {"srv": False, "cli": False}
    for _ in range(20):
        for name, side in (("cli", cli), ("srv", srv)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        s_in.write(c_out.read())
        c_in.write(s_out.read())
        if all(done.values()):
            break
    cli.write(b"x")  # TLS 1.3: the server judges the client certificate after the client is done
    s_in.write(c_out.read())
    assert srv.read(1) == b"x"
    peer = srv.getpeercert()
    assert isinstance(peer, dict)
    return peer


def two_cn_certificate(ca: CertAuthority) -> tuple[bytes, bytes]:
    key = new_ec_key()
    now = dt.datetime.now(dt.UTC)
    subject = x509.Name([
        x509.NameAttribute(NameOID.COMMON_NAME, "first"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "team-a"),
        x509.NameAttribute(NameOID.COMMON_NAME, "last"),
        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "team-b"),
    ])  # fmt: skip
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=1))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .sign(ca.key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM), key_pem(key)


@pytest.fixture(scope="module")
def cas() -> tuple[CertAuthority, CertAuthority, CertAuthority]:
    """(serving CA, the client CA in use, the client CA that replaces it)."""
    return (
        CertAuthority.create("serving"),
        CertAuthority.create("client-old"),
        CertAuthority.create("client-new"),
    )


def test_a_real_certificate_with_two_common_names_authenticates_as_the_last_one(
    cas: tuple[CertAuthority, CertAuthority, CertAuthority],
) -> None:
    serving, client_ca, _ = cas
    tls = serving_tls(serving, client_ca.cert_pem)
    peer = handshake(tls.listener_context(), client_context(serving, *two_cn_certificate(client_ca)))
    assert user_from_peercert(peer) == UserInfo("last", groups=("team-a", "team-b", "system:authenticated"))


def test_a_new_client_ca_is_trusted_from_the_next_handshake_without_a_restart(
    cas: tuple[CertAuthority, CertAuthority, CertAuthority],
) -> None:
    serving, old, new = cas
    tls = serving_tls(serving, old.cert_pem)
    listener = tls.listener_context()
    issued = new.issue("kube-apiserver-kubelet-client", ["system:masters"], client=True)
    assert issued.key_pem is not None
    with pytest.raises(ssl.SSLError):
        handshake(listener, client_context(serving, issued.cert_pem, issued.key_pem))
    assert tls.set_client_ca(new.cert_pem)
    peer = handshake(listener, client_context(serving, issued.cert_pem, issued.key_pem))
    assert user_from_peercert(peer) == UserInfo(
        "kube-apiserver-kubelet-client", groups=("system:masters", "system:authenticated")
    )
    assert not tls.set_client_ca(new.cert_pem)  # the same bundle again: nothing to do
    assert tls.client_ca_reloads == 1


def test_an_unusable_client_ca_keeps_the_one_in_use(
    cas: tuple[CertAuthority, CertAuthority, CertAuthority], caplog: pytest.LogCaptureFixture
) -> None:
    serving, old, _ = cas
    tls = serving_tls(serving, old.cert_pem)
    listener = tls.listener_context()
    for bad in (b"-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n", "é".encode()):
        assert not tls.set_client_ca(bad)
    assert tls.client_ca == old.cert_pem.decode()
    assert "kubelet client CA unusable" in caplog.text
    issued = old.issue("still-trusted", client=True)
    assert issued.key_pem is not None
    assert user_from_peercert(handshake(listener, client_context(serving, issued.cert_pem, issued.key_pem)))
