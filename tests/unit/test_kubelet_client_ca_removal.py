"""A CA removed from the kubelet client CA bundle is refused from the next handshake on, without a restart.

Real TLS over loopback sockets: an asyncio server on ``ServingTLS.listener_context()`` (as the kubelet
API listens), blocking clients in a thread (they can offer a saved session, which asyncio's cannot).
OpenSSL decides; the server's handler records the client certificate it was given, if any.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

import pytest
from cryptography import x509

from e2e.pki import CertAuthority, load_cert_chain
from vkbridge.credentials.serving import ServingCertificateError, ServingKeyPair
from vkbridge.kubeletapi.tls import ServingCertificate, ServingTLS

HOST = "kubelet.test"
VERSIONS = [ssl.TLSVersion.TLSv1_3, ssl.TLSVersion.TLSv1_2]


@dataclass
class Authorities:
    serving: CertAuthority
    a: CertAuthority
    b: CertAuthority

    def pair(self) -> ServingKeyPair:
        issued = self.serving.issue("system:node:vk", server=True, dns=[HOST])
        assert issued.key_pem is not None
        return ServingKeyPair(issued.cert_pem, issued.key_pem)

    def bundle(self, *cas: CertAuthority) -> bytes:
        return b"".join(ca.cert_pem for ca in cas)


@pytest.fixture(scope="module")
def cas() -> Authorities:
    return Authorities(
        CertAuthority.create("serving"), CertAuthority.create("ca-a"), CertAuthority.create("ca-b")
    )


@dataclass
class Answer:
    """What one connection got: the server's reply (its view of the client) or the client's error."""

    reply: str | None = None
    error: str | None = None
    session: ssl.SSLSession | None = field(default=None, repr=False)
    served_serial: int | None = None


@dataclass
class Client:
    """A client certificate (or none) and the TLS version the client insists on."""

    context: ssl.SSLContext
    session: ssl.SSLSession | None = None

    @classmethod
    def of(cls, cas: Authorities, signer: CertAuthority | None, version: ssl.TLSVersion) -> Client:
        ctx = ssl.create_default_context(cadata=cas.serving.cert_pem.decode())
        ctx.minimum_version = ctx.maximum_version = version
        if signer is not None:
            issued = signer.issue(f"user-of-{signer.cert.subject.rfc4514_string()}", client=True)
            assert issued.key_pem is not None
            load_cert_chain(ctx, issued.cert_pem, issued.key_pem)
        return cls(ctx)

    def connect(self, port: int, resume: bool = False) -> Answer:
        """One connection: send a byte, read the reply. Blocking: run it in a thread."""
        try:
            with (
                socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
                self.context.wrap_socket(
                    raw, server_hostname=HOST, session=self.session if resume else None
                ) as tls,
            ):
                der = tls.getpeercert(binary_form=True)
                assert der is not None
                tls.sendall(b"x")
                reply = tls.recv(200).decode()
                self.session = tls.session
                serial = x509.load_der_x509_certificate(der).serial_number
                return Answer(reply=reply or None, session=tls.session, served_serial=serial)
        except (ssl.SSLError, OSError) as exc:
            return Answer(error=f"{type(exc).__name__}: {exc}")


@contextlib.asynccontextmanager
async def listening(tls: ServingTLS) -> AsyncIterator[Callable[[Client, bool], Awaitable[Answer]]]:
    """The listener; yields ``connect(client, resume)``. Replies "<cn>|<reused>" or "anonymous|<reused>"."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readexactly(1)
            obj = writer.get_extra_info("ssl_object")
            peer = obj.getpeercert()
            cn = dict(x[0] for x in peer["subject"])["commonName"] if peer else "anonymous"
            writer.write(f"{cn}|{obj.session_reused}".encode())
            await writer.drain()
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError, ssl.SSLError):
                await writer.wait_closed()

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=tls.listener_context())
    port = server.sockets[0].getsockname()[1]

    async def connect(client: Client, resume: bool) -> Answer:
        return await asyncio.to_thread(client.connect, port, resume)

    try:
        yield connect
    finally:
        server.close()
        await server.wait_closed()


def fixed(pair: ServingKeyPair) -> Callable[[], ServingCertificate | None]:
    """A provider that never rotates."""
    return lambda: pair


def user(signer: CertAuthority) -> str:
    return f"user-of-{signer.cert.subject.rfc4514_string()}"


def refused(answer: Answer) -> bool:
    """The server ended the handshake (the client sees it during it in TLS 1.2, at its first read in 1.3,
    where the server judges the client certificate last); the handler never ran."""
    return answer.reply is None


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.3", "tls1.2"])
async def test_a_removed_ca_is_refused_from_the_next_handshake(
    cas: Authorities, version: ssl.TLSVersion
) -> None:
    tls = ServingTLS(fixed(cas.pair()), cas.bundle(cas.a, cas.b))
    by_a, by_b = Client.of(cas, cas.a, version), Client.of(cas, cas.b, version)
    async with listening(tls) as connect:
        assert (await connect(by_a, False)).reply == f"{user(cas.a)}|False"
        assert (await connect(by_b, False)).reply == f"{user(cas.b)}|False"
        assert tls.set_client_ca(cas.bundle(cas.b))
        a_after = await connect(Client.of(cas, cas.a, version), False)
        assert refused(a_after), a_after
        assert (await connect(by_b, False)).reply == f"{user(cas.b)}|False"
        assert (
            await connect(Client.of(cas, None, version), False)
        ).reply == "anonymous|False"  # token clients
        assert tls.set_client_ca(cas.bundle(cas.a))  # and back: A again, B no longer
        assert (await connect(by_a, False)).reply == f"{user(cas.a)}|False"
        assert refused(await connect(by_b, False))
    assert tls.client_ca_reloads == 2 and tls.rotations == 0


@pytest.mark.parametrize("version", VERSIONS, ids=["tls1.3", "tls1.2"])
async def test_a_session_from_before_the_removal_does_not_resume(
    cas: Authorities, version: ssl.TLSVersion
) -> None:
    """A resumed session skips certificate verification: it would carry the removed CA's client in.
    TLS 1.3 has no tickets; TLS 1.2 session IDs resume until the bundle changes, then are refused."""
    tls = ServingTLS(fixed(cas.pair()), cas.bundle(cas.a, cas.b))
    by_a, by_b = Client.of(cas, cas.a, version), Client.of(cas, cas.b, version)
    resumes = version == ssl.TLSVersion.TLSv1_2
    async with listening(tls) as connect:
        first = await connect(by_a, False)
        assert first.reply == f"{user(cas.a)}|False" and first.session is not None
        assert (await connect(by_a, True)).reply == f"{user(cas.a)}|{resumes}"
        assert tls.refused_resumptions == 0
        assert tls.set_client_ca(cas.bundle(cas.b))
        assert refused(await connect(by_a, True))
        assert refused(await connect(by_a, False))
        assert (await connect(by_b, False)).reply == f"{user(cas.b)}|False"
        if resumes:  # OpenSSL cannot say when a session began: B's new one is refused too, not B
            assert refused(await connect(by_b, True))
            assert (await connect(by_b, False)).reply == f"{user(cas.b)}|False"
        else:
            assert (await connect(by_b, True)).reply == f"{user(cas.b)}|False"
    assert tls.refused_resumptions == (2 if resumes else 0)


async def test_a_client_ca_that_arrives_after_the_listener_started_without_one(cas: Authorities) -> None:
    tls = ServingTLS(fixed(cas.pair()), None)
    by_a = Client.of(cas, cas.a, ssl.TLSVersion.TLSv1_3)
    async with listening(tls) as connect:
        assert (await connect(by_a, False)).reply == "anonymous|False"  # not even asked for
        assert tls.set_client_ca(cas.a.cert_pem)
        assert (await connect(by_a, False)).reply == f"{user(cas.a)}|False"
        assert refused(await connect(Client.of(cas, cas.b, ssl.TLSVersion.TLSv1_3), False))


async def test_rotation_keeps_the_client_ca_and_a_failing_provider_keeps_the_certificate(
    cas: Authorities, caplog: pytest.LogCaptureFixture
) -> None:
    first, second = cas.pair(), cas.pair()
    state: dict[str, ServingCertificate | Exception | None] = {"now": first}

    def provider() -> ServingCertificate | None:
        now = state["now"]
        if isinstance(now, Exception):
            raise now
        return now

    tls = ServingTLS(provider, cas.bundle(cas.a, cas.b))
    by_a, by_b = Client.of(cas, cas.a, ssl.TLSVersion.TLSv1_3), Client.of(cas, cas.b, ssl.TLSVersion.TLSv1_3)
    async with listening(tls) as connect:
        serial_1 = (await connect(by_b, False)).served_serial
        assert tls.set_client_ca(cas.bundle(cas.b))
        state["now"] = second
        rotated = await connect(by_b, False)
        assert rotated.reply == f"{user(cas.b)}|False" and rotated.served_serial not in (None, serial_1)
        assert refused(await connect(by_a, False)) and tls.rotations == 1
        state["now"] = RuntimeError("provider bug")
        assert tls.set_client_ca(cas.bundle(cas.a))  # applied to the last good certificate
        kept = await connect(by_a, False)
        assert kept.reply == f"{user(cas.a)}|False" and kept.served_serial == rotated.served_serial
        assert refused(await connect(by_b, False))
    assert "serving certificate provider failed" in caplog.text


@dataclass(eq=False)
class Unloadable:
    """A certificate OpenSSL refuses (as ServingKeyPair.new_context does a bad chain), counting attempts."""

    attempts: int = 0

    def new_context(self) -> ssl.SSLContext:
        self.attempts += 1
        raise ServingCertificateError("the certificate chain cannot be loaded: test")


def test_a_certificate_that_cannot_be_loaded_keeps_the_context_in_use(
    cas: Authorities, caplog: pytest.LogCaptureFixture
) -> None:
    good, bad = cas.pair(), Unloadable()
    state: dict[str, ServingCertificate] = {"now": good}
    tls = ServingTLS(lambda: state["now"], cas.a.cert_pem)
    listener = tls.listener_context()
    state["now"] = bad
    assert tls.current() is listener and tls.current() is listener
    assert bad.attempts == 1 and caplog.text.count("cannot build the serving TLS context") == 1
    assert tls.set_client_ca(cas.b.cert_pem)  # a new target: tried once more, still the old context
    assert tls.current() is listener and bad.attempts == 2 and tls.rotations == 0
