"""Credentials on the real planes: the kubelet serving CSR, pool certificate renewal, the Secret hot swap.

Every pool-certificate test builds its own peering (fresh slug and consumer id, short certificate
lifetime) and, when it needs one, its own emulator without the quota webhook, so nothing here disturbs
the session's bundle or emulator.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import functools
import logging
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from e2e import waiting
from e2e.bundle import (
    Bundle,
    decode_kubeconfig_secret,
    kubeconfig_dict,
    private_pem,
)
from e2e.controlplane import ControlPlane
from e2e.emulator import EmulatorHandle
from e2e.fixtures_pool import offload_namespace
from e2e.pki import CertAuthority
from e2e.tunnel import TunnelProxy
from e2e.vkbridge_proc import VkbridgeProcess, metric_sum
from e2e.waiting import wait_until
from tests.fixtures_vkbridge import node_ready, vkbridge_options
from tests.integration.helpers import RecordingServer, fresh_peering, pool_pod, token_file_kubeconfig
from tests.support.certs import cert_builder, self_signed
from vkbridge.credentials import certs
from vkbridge.credentials.remote import RemoteCredentialWatcher, credentials_from_secret
from vkbridge.credentials.renewal import CertificateRenewer
from vkbridge.credentials.serving import ServingCertificateManager, ServingKeyPair
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import (
    CERTIFICATESIGNINGREQUESTS,
    NODES,
    PODS,
    RENEWS,
    RESOURCESLICES,
    SECRETS,
    ApiError,
    KubeClient,
)
from vkbridge.kube.kubeconfig import Credentials, cert_info
from vkbridge.kube.reachability import Reachability
from vkbridge.kubeletapi.tls import ServingTLS
from vkbridge.metrics import Metrics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(360)]

REVIEW = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
REVIEW_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
RENEW_FAILED = "pool client certificate renewal failed; will retry"
LOG_LINE = "served over the CSR-issued certificate\n"
TOKEN_MARKER = "MARKER-TOKEN-from-a-local-file-7f3e"

NewPeering = Callable[..., contextlib.AbstractAsyncContextManager[tuple[Bundle, EmulatorHandle | None]]]


# API errors count as "not yet" while the planes settle (RBAC, a Secret being re-written).
eventually = functools.partial(waiting.eventually, interval=0.05, not_yet=(ApiError,))


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# ---- fixtures and stacks ----------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def _vkbridge_info_captured(caplog: pytest.LogCaptureFixture) -> None:
    """The tests here read vkbridge's INFO lines: what the operator is told about certificates."""
    caplog.set_level(logging.INFO, logger="vkbridge")


@pytest.fixture
def new_peering(
    consumer: ControlPlane,
    pool: ControlPlane,
    tunnel: TunnelProxy,
    pool_ca_files: tuple[Path, Path],
    pool_workdir: Path,
) -> NewPeering:
    """Factory: a fresh peering with certificates of ``lifetime`` and an emulator running ``controllers``."""

    def make(
        lifetime: str, controllers: str | None
    ) -> contextlib.AbstractAsyncContextManager[tuple[Bundle, EmulatorHandle | None]]:
        return fresh_peering(
            consumer, pool, tunnel.url, pool_ca_files, pool_workdir, lifetime, controllers,
            propagate_kubeconfig=False,  # the Secret is ours to write
        )  # fmt: skip

    return make


def quick_renewer(
    renew_fraction: float, answer_timeout: float, retry_base: float = 0.5, retry_cap: float = 1.0
) -> dict[str, float]:
    """Renewer knobs for a pool that never answers: ask at ``renew_fraction`` sharp, retry within a second."""
    return {
        "renew_fraction": renew_fraction,
        "provider_grace": 0.0,
        "answer_timeout": answer_timeout,
        "retry_base": retry_base,
        "retry_cap": retry_cap,
    }


@dataclass
class Stack:
    """The credential parts of vkbridge for one peering, running."""

    bundle: Bundle
    pool: KubeClient
    rs_cache: Cache
    secret_cache: Cache
    watcher: RemoteCredentialWatcher
    renewer: CertificateRenewer | None
    metrics: Metrics
    invalid: list[str] = field(default_factory=list)
    tasks: list[asyncio.Task[None]] = field(default_factory=list)

    def metric(self, name: str) -> float | None:
        return self.metrics.registry.get_sample_value(name)


@contextlib.asynccontextmanager
async def credential_stack(
    home: KubeClient, b: Bundle, renewer: dict[str, Any] | None = None
) -> AsyncIterator[Stack]:
    where = f"{b.tenant_ns}/{b.secret_name}"
    secret = await home.get(SECRETS, b.secret_name, b.tenant_ns)
    pool = KubeClient(credentials_from_secret(secret, where), name="pool")
    rs_cache = Cache(home, RESOURCESLICES, b.tenant_ns, field_selector=f"metadata.name={b.slug}")
    secret_cache = Cache(home, SECRETS, b.tenant_ns, field_selector=f"metadata.name={b.secret_name}")
    metrics = Metrics()
    invalid: list[str] = []
    watcher = RemoteCredentialWatcher(
        pool, secret_cache, where, on_invalid=lambda msg, _secret: invalid.append(msg)
    )
    rn = None
    if renewer is not None:
        rn = CertificateRenewer(
            home,
            pool,
            tenant_namespace=b.tenant_ns,
            secret_name=b.secret_name,
            resource_slice_name=b.slug,
            remote_tenant_namespace=b.remote_tenant_ns,
            consumer_cluster_id=b.consumer_id,
            metrics=metrics,
            reach=Reachability(),
            resource_slice_cache=rs_cache,
            secret_cache=secret_cache,
            **renewer,
        )
    stack = Stack(b, pool, rs_cache, secret_cache, watcher, rn, metrics, invalid)
    for part in (rs_cache, secret_cache, watcher):
        stack.tasks.append(asyncio.create_task(part.run()))
    try:
        assert await rs_cache.wait_synced(30) and await secret_cache.wait_synced(30)
        if rn is not None:
            stack.tasks.append(asyncio.create_task(rn.run()))
        yield stack
    finally:
        for t in stack.tasks:
            t.cancel()
        await asyncio.gather(*stack.tasks, return_exceptions=True)
        await pool.close()


@dataclass
class Traffic:
    """Pool requests in a loop (whoami), every failure recorded with its time; run() may run concurrently."""

    pool: KubeClient
    ok: int = 0
    failures: list[str] = field(default_factory=list)
    users: set[str] = field(default_factory=set)
    last_ok: dt.datetime | None = None
    inflight: int = 0

    async def run(self) -> None:
        while True:
            started = dt.datetime.now(dt.UTC)
            self.inflight += 1
            try:
                got = await self.pool.request("POST", REVIEW_PATH, body=REVIEW, timeout=10)
            except ApiError as err:
                self.failures.append(f"{started:%H:%M:%S.%f} {err}")
            else:
                self.ok += 1
                self.last_ok = dt.datetime.now(dt.UTC)
                self.users.add(got["status"]["userInfo"]["username"])
            finally:
                self.inflight -= 1
            await asyncio.sleep(0.01)


def kubeconfig_of(secret: dict[str, Any]) -> tuple[bytes, bytes]:
    """(certificate, key) PEM of the kubeconfig in a kubeconfig-resourceslice Secret."""
    user = decode_kubeconfig_secret(secret)["users"][0]["user"]
    return base64.b64decode(user["client-certificate-data"]), base64.b64decode(user["client-key-data"])


async def our_renews(pool_admin: KubeClient, b: Bundle) -> list[dict[str, Any]]:
    got = await pool_admin.list(
        RENEWS,
        b.remote_tenant_ns,
        label_selector=f"app.kubernetes.io/managed-by=vkbridge,liqo.io/resourceslice-name={b.slug}",
    )
    return list(got.get("items") or [])


async def sleep_until(when: dt.datetime) -> None:
    await asyncio.sleep(max(0.0, (when - dt.datetime.now(dt.UTC)).total_seconds()))


# ---- the kubelet serving certificate ----------------------------------------------------------------


@contextlib.asynccontextmanager
async def kubelet_endpoint(provider: Callable[[], ServingKeyPair | None]) -> AsyncIterator[int]:
    """A tiny HTTPS kubelet on 127.0.0.1 that presents the provider's current certificate."""
    app = web.Application()

    async def logs(_request: web.Request) -> web.Response:
        return web.Response(text=LOG_LINE)

    app.router.add_get("/containerLogs/{ns}/{pod}/{container}", logs)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ServingTLS(provider, None).listener_context())
    await site.start()
    try:
        server = site._server
        assert server is not None
        yield int(server.sockets[0].getsockname()[1])  # type: ignore[attr-defined]
    finally:
        await runner.cleanup()


async def presented_certificate(port: int, ca_pem: bytes) -> x509.Certificate:
    """Handshake as a verifying client by IP (no SNI, as Go dials kubelets) and return the server cert."""
    ctx = ssl.create_default_context(cadata=ca_pem.decode())
    reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=ctx, server_hostname="127.0.0.1")
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
        return x509.load_der_x509_certificate(der)
    finally:
        writer.close()
        with contextlib.suppress(OSError, ssl.SSLError):
            await writer.wait_closed()
        del reader


async def test_serving_certificate_issued_by_kcm_after_approval(
    consumer: ControlPlane, home: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    node = f"vkb-serving-{uuid.uuid4().hex[:6]}"
    mgr = ServingCertificateManager(
        home, node_name=node, node_ip="127.0.0.1", certificate_type="kubelet", wait_log_interval=0.5
    )
    task = asyncio.create_task(mgr.run())
    csr_name = ""
    try:
        csr_name = await eventually(lambda: mgr.last_csr, 15, "the serving CSR")
        assert csr_name.startswith(f"vkbridge-{node}-")
        hint = (
            f"waiting for approval of kubelet serving CSR {csr_name}: approve it "
            f"(kubectl certificate approve {csr_name}) or check Liqo's controller-manager"
        )
        await eventually(lambda: hint in caplog.messages, 10, "the waiting-for-approval reminder")
        assert mgr.current_keypair() is None, "nothing to serve before approval"
        assert not await mgr.wait_ready(1.0)

        csr = await home.get(CERTIFICATESIGNINGREQUESTS, csr_name)
        assert csr["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
        assert sorted(csr["spec"]["usages"]) == ["digital signature", "key encipherment", "server auth"]
        request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
        assert isinstance(request.public_key(), ec.EllipticCurvePublicKey)

        await asyncio.to_thread(consumer.kubectl, "certificate", "approve", csr_name)  # as Liqo's approver
        assert await mgr.wait_ready(30), "certificate installed after approval"

        assert mgr.certificate_pem is not None
        cert = x509.load_pem_x509_certificate(mgr.certificate_pem)
        cert.verify_directly_issued_by(x509.load_pem_x509_certificate(consumer.ca_pem))  # KCM's signer CA
        assert cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == f"system:node:{node}"
        assert [a.value for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)] == [
            "system:nodes"
        ]
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert [str(ip) for ip in san.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
        assert san.get_values_for_type(x509.DNSName) == []
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        assert ExtendedKeyUsageOID.SERVER_AUTH in eku
        assert request.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        ) == cert.public_key().public_bytes(
            serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        )
        assert any("kubelet serving certificate issued" in m for m in caplog.messages)

        async with kubelet_endpoint(mgr.current_keypair) as port:
            assert (await presented_certificate(port, consumer.ca_pem)).serial_number == cert.serial_number
            # The kube-apiserver dials it for pod logs, verifying with --kubelet-certificate-authority.
            await home.create(
                NODES,
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": node},
                    "status": {
                        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
                    },
                },
            )
            pod = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": node, "namespace": "default"},
                "spec": {"nodeName": node, "containers": [{"name": "main", "image": "busybox"}]},
            }
            await home.create(PODS, pod, "default")
            status, body = await asyncio.to_thread(
                consumer.api, "GET", f"/api/v1/namespaces/default/pods/{node}/log?container=main"
            )
            assert (status, body) == (200, LOG_LINE), (status, str(body)[:300])
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        with contextlib.suppress(ApiError):
            await home.delete(PODS, node, "default", grace_period_seconds=0)
        with contextlib.suppress(ApiError):
            await home.delete(NODES, node)
        if csr_name:
            with contextlib.suppress(ApiError):
                await home.delete(CERTIFICATESIGNINGREQUESTS, csr_name)


def _serving_chain(
    signer: CertAuthority, request: x509.CertificateSigningRequest, lifetime: dt.timedelta, weak_ca: bool
) -> bytes:
    """What a signer answers: the leaf for the CSR, and with ``weak_ca`` a chain OpenSSL refuses to load
    (an RSA-1024 CA: Go and the API server accept it, OpenSSL's security level does not)."""
    now = dt.datetime.now(dt.UTC)
    leaf = (
        cert_builder(
            request.subject,
            request.public_key(),
            issuer=signer.cert.subject,
            not_before=now - dt.timedelta(seconds=1),
            not_after=now + lifetime,
        )
        .add_extension(request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value, False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .sign(signer.key, hashes.SHA256())
        .public_bytes(serialization.Encoding.PEM)
    )
    if not weak_ca:
        return leaf
    weak = rsa.generate_private_key(65537, 1024)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "weak-intermediate")])
    ca = self_signed(
        weak, name, not_before=now - dt.timedelta(minutes=1), not_after=now + dt.timedelta(days=1)
    )
    return leaf + ca.public_bytes(serialization.Encoding.PEM)


async def test_serving_certificate_openssl_refuses_keeps_the_old_one_and_retries(
    consumer: ControlPlane, home: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 15 item 20: an ssl.SSLError while installing a certificate used to end the manager (and the
    process); now the round is logged, the previous certificate keeps serving and a new CSR follows."""
    node = f"vkb-weak-{uuid.uuid4().hex[:6]}"
    signer = CertAuthority.create("test-serving-signer")
    mgr = ServingCertificateManager(
        home, node_name=node, node_ip="127.0.0.1", certificate_type="aws", rotate_fraction=0.5,
        retry_base=0.2, retry_cap=1.0,
    )  # fmt: skip
    task = asyncio.create_task(mgr.run())
    signed: list[str] = []

    async def sign_next(lifetime: dt.timedelta, *, weak_ca: bool) -> None:
        """Act as the aws signer (nothing in the plane signs it): approve the next CSR, then answer it."""
        name = await eventually(lambda: mgr.last_csr not in (None, *signed) and mgr.last_csr, 15, "a CSR")
        signed.append(name)
        path = f"/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}"
        csr = await home.get(CERTIFICATESIGNINGREQUESTS, name)
        csr["status"] = {
            "conditions": [{"type": "Approved", "status": "True", "reason": "Test", "message": "t"}]
        }
        status, body = await asyncio.to_thread(consumer.api, "PUT", f"{path}/approval", csr)
        assert status == 200, body
        request = x509.load_pem_x509_csr(base64.b64decode(csr["spec"]["request"]))
        body["status"]["certificate"] = b64(_serving_chain(signer, request, lifetime, weak_ca))
        status, got = await asyncio.to_thread(consumer.api, "PUT", f"{path}/status", body)
        assert status == 200, got

    try:
        await sign_next(dt.timedelta(seconds=6), weak_ca=False)  # rotated after about 3 s
        assert await mgr.wait_ready(15)
        first_ctx, first_pem = mgr.current_keypair(), mgr.certificate_pem
        await sign_next(dt.timedelta(hours=1), weak_ca=True)
        failed = "kubelet serving certificate request failed; retrying"
        record = await eventually(
            lambda: next((r for r in caplog.records if r.getMessage() == failed), None), 15, "the refusal"
        )
        kv = getattr(record, "kv", {})
        assert "cannot be loaded" in kv["error"] and kv["serving"] == "the previous certificate"
        assert not task.done(), "the manager survives"
        assert mgr.current_keypair() is first_ctx and mgr.certificate_pem == first_pem and mgr.issued == 1
        await sign_next(dt.timedelta(hours=1), weak_ca=False)  # the retry (capped backoff) gets a good one
        await eventually(lambda: mgr.issued == 2, 15, "the next good certificate installed")
        assert mgr.current_keypair() is not first_ctx and not task.done()
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        for name in signed:
            with contextlib.suppress(ApiError):
                await home.delete(CERTIFICATESIGNINGREQUESTS, name)


async def test_self_signed_serving_certificate(home: KubeClient) -> None:
    mgr = ServingCertificateManager(
        home, node_name="node-x", node_ip="127.0.0.1", certificate_type="self-signed"
    )
    task = asyncio.create_task(mgr.run())
    try:
        assert await mgr.wait_ready(5)
        assert mgr.certificate_pem is not None
        cert = x509.load_pem_x509_certificate(mgr.certificate_pem)
        assert cert.subject.rfc4514_string() == "CN=system:node:node-x,O=liqo.io"
        assert cert.not_valid_after_utc - cert.not_valid_before_utc == dt.timedelta(days=365)
        async with kubelet_endpoint(mgr.current_keypair) as port:
            presented = await presented_certificate(port, mgr.certificate_pem)
        assert presented.serial_number == cert.serial_number
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


# ---- the pool client certificate --------------------------------------------------------------------


async def test_resourceslice_renewal_before_expiry_without_failed_requests(
    new_peering: NewPeering, home: KubeClient, pool_admin: KubeClient, tunnel: TunnelProxy
) -> None:
    """A 2-minute certificate re-signed in the ResourceSlice: adopted at once, persisted, no request lost.
    (Two minutes, not three: the test waits for the old one's expiry, and CI time is a budget.)"""
    async with (
        new_peering("2m", "replicator,resourceslice") as (b, _emu),
        credential_stack(home, b, renewer={}) as stack,
    ):
        assert stack.renewer is not None
        first = x509.load_pem_x509_certificate(b.cert_pem)
        traffic = Traffic(stack.pool)
        # Three loops through a tunnel with 50 ms latency each way (a real tunnel has some): a request
        # is on the wire at the swap, so a swap that drops in-flight requests fails this test.
        tunnel.set_latency(0.05)
        loops = [asyncio.create_task(traffic.run()) for _ in range(3)]
        inflight_at_swap: list[int] = []
        real_swap = stack.pool.swap_credentials

        async def observed_swap(creds: Credentials) -> None:
            inflight_at_swap.append(traffic.inflight)
            await real_swap(creds)

        stack.pool.swap_credentials = observed_swap  # type: ignore[method-assign]
        try:
            assert 90 < (stack.metric("vkbridge_client_certificate_expiry_seconds") or 0) <= 126
            await eventually(
                lambda: stack.pool.credentials.client_cert_pem != b.cert_pem,
                (first.not_valid_after_utc - dt.datetime.now(dt.UTC)).total_seconds(),
                "the pool client to present the re-signed certificate",
            )
            assert dt.datetime.now(dt.UTC) < first.not_valid_after_utc
            # Keep the traffic going past the old certificate's expiry: only the new one can work then.
            await sleep_until(first.not_valid_after_utc + dt.timedelta(seconds=1))
            ok_after_expiry = traffic.ok
            await sleep_until(first.not_valid_after_utc + dt.timedelta(seconds=6))
            assert traffic.ok > ok_after_expiry + 10, "requests kept succeeding after the old one expired"
        finally:
            tunnel.set_latency(0.0)
            for t in loops:
                t.cancel()
            await asyncio.gather(*loops, return_exceptions=True)

        assert inflight_at_swap and inflight_at_swap[0] > 0, (
            f"nothing in flight at the swap: {inflight_at_swap}"
        )
        assert traffic.failures == [], (
            f"{len(traffic.failures)} failed pool requests ({inflight_at_swap} in flight at the swap): "
            f"{traffic.failures[:5]}"
        )
        assert traffic.users == {b.identity_cn}
        new_pem = stack.pool.credentials.client_cert_pem
        assert new_pem is not None
        new = x509.load_pem_x509_certificate(new_pem)
        assert new.serial_number != first.serial_number and new.subject == first.subject
        rs = await home.get(RESOURCESLICES, b.slug, b.tenant_ns)
        assert base64.b64decode(rs["status"]["authParams"]["signedCRT"]) == new_pem, (
            "came from the ResourceSlice"
        )
        cert_in_secret, key_in_secret = kubeconfig_of(await home.get(SECRETS, b.secret_name, b.tenant_ns))
        assert (cert_in_secret, key_in_secret) == (new_pem, b.key_pem), "persisted with the same key"
        assert await our_renews(pool_admin, b) == [], "no Renew needed"
        assert (stack.renewer.renewals, stack.renewer.failures) == (1, 0)
        left = stack.metric("vkbridge_client_certificate_expiry_seconds")
        assert (
            left is not None
            and 0 < left <= (new.not_valid_after_utc - dt.datetime.now(dt.UTC)).total_seconds() + 1
        )


async def test_renew_on_the_pool_when_the_resourceslice_is_not_resigned(
    new_peering: NewPeering, home: KubeClient, pool_admin: KubeClient
) -> None:
    """No re-signing in the ResourceSlice: the renewer asks with a Renew, verifies, swaps and persists."""
    async with (
        new_peering("3m", "replicator,renew") as (b, _emu),
        credential_stack(
            home, b, renewer={"renew_fraction": 0.2, "provider_grace": 0.0, "answer_timeout": 30.0}
        ) as stack,
    ):
        assert stack.renewer is not None
        # Someone else keeps writing the Secret meanwhile: the renewer must not lose those writes.
        marks = {"n": 0}
        stop = asyncio.Event()

        async def annotate() -> None:
            while not stop.is_set():
                patch = {"metadata": {"annotations": {"test.vkbridge.io/mark": str(marks["n"] + 1)}}}
                await home.patch(SECRETS, b.secret_name, patch, b.tenant_ns)
                marks["n"] += 1
                await asyncio.sleep(0.02)

        writer = asyncio.create_task(annotate())
        try:
            await eventually(
                lambda: stack.pool.credentials.client_cert_pem != b.cert_pem, 90, "a renewed certificate"
            )
            await asyncio.sleep(0.5)  # keep writing through the renewer's Secret update
        finally:
            stop.set()
            await asyncio.wait_for(writer, 10)

        new_pem = stack.pool.credentials.client_cert_pem
        assert new_pem is not None
        certs.verify_certificate(
            new_pem,
            key=certs.load_private_key(b.key_pem),
            cn=b.identity_cn,
            orgs=[b.consumer_id],
            now=dt.datetime.now(dt.UTC),
            ca_pem=b.ca_pem,
        )
        got = await stack.pool.request("POST", REVIEW_PATH, body=REVIEW)
        assert got["status"]["userInfo"]["username"] == b.identity_cn

        async def persisted() -> dict[str, Any] | None:
            secret = await home.get(SECRETS, b.secret_name, b.tenant_ns)
            return secret if kubeconfig_of(secret)[0] == new_pem else None

        secret = await eventually(persisted, 10, "the renewed certificate in the Secret")
        assert kubeconfig_of(secret)[1] == b.key_pem
        assert secret["metadata"]["annotations"]["test.vkbridge.io/mark"] == str(marks["n"]), "no write lost"

        # The answered Renew is deleted once used (the tenant may delete its Renews): at most one remains.
        renews = await our_renews(pool_admin, b)
        assert len(renews) <= 1, [r["metadata"]["name"] for r in renews]
        for renew in renews:
            assert base64.b64decode(renew["status"]["authParams"]["signedCRT"]) == new_pem
            spec = renew["spec"]
            assert spec["identityType"] == "ResourceSlice" and spec["resourceSliceRef"] == {"name": b.slug}
            assert spec["consumerClusterID"] == b.consumer_id
        rs = await home.get(RESOURCESLICES, b.slug, b.tenant_ns)
        assert base64.b64decode(rs["status"]["authParams"]["signedCRT"]) == b.cert_pem, "slice not re-signed"
        await asyncio.sleep(1.0)
        assert stack.pool.credentials.client_cert_pem == new_pem, "the older slice certificate never wins"
        assert (stack.renewer.renewals, stack.renewer.failures) == (1, 0)
        assert stack.metric("vkbridge_certificate_renewal_failures_total") == 0


async def test_pool_that_never_answers_counts_failures_and_reuses_one_renew(
    new_peering: NewPeering, home: KubeClient, pool_admin: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    knobs = quick_renewer(renew_fraction=0.02, answer_timeout=1.5)
    async with new_peering("3m", None) as (b, _), credential_stack(home, b, renewer=knobs) as stack:
        assert stack.renewer is not None
        renewer = stack.renewer
        await eventually(lambda: renewer.failures >= 3, 60, "three failed renewal rounds")
        renewer_task = stack.tasks[-1]
        assert not renewer_task.done(), "no crash"
        assert stack.metric("vkbridge_certificate_renewal_failures_total") == renewer.failures
        assert stack.pool.credentials.client_cert_pem == b.cert_pem
        renews = await our_renews(pool_admin, b)
        assert len(renews) == 1, "one Renew, reused by every retry"
        lines = [r for r in caplog.records if r.getMessage() == RENEW_FAILED]
        assert len(lines) == renewer.failures, "one line per failed round"
        assert "did not answer Renew" in str(getattr(lines[0], "kv", {}).get("error"))


async def test_secret_swaps_refuses_insecure_and_keeps_newer_certificate(
    new_peering: NewPeering,
    home: KubeClient,
    pool: ControlPlane,
    tunnel: TunnelProxy,
    caplog: pytest.LogCaptureFixture,
) -> None:
    async with new_peering("365d", None) as (b, _), credential_stack(home, b) as stack:
        # A new bundle (new key, same identity): swapped within 5 s, and it authenticates.
        key = ec.generate_private_key(ec.SECP256R1())
        cert, _ = pool.issue_client_cert(b.identity_cn, [b.consumer_id], public_key=key.public_key())
        kcfg = kubeconfig_dict(tunnel.url, b.ca_pem, cert, private_pem(key), name="rotated")
        t0 = time.monotonic()
        await write_secret_kubeconfig(home, b, kcfg)
        await eventually(lambda: stack.pool.credentials.client_cert_pem == cert, 5, "the swap")
        assert time.monotonic() - t0 <= 5.0
        got = await stack.pool.request("POST", REVIEW_PATH, body=REVIEW)
        assert got["status"]["userInfo"]["username"] == b.identity_cn
        assert stack.watcher.swaps == 1

        # An older certificate for the same key (a stale rewrite): the newer one stays in use.
        older, _ = pool.issue_client_cert(
            b.identity_cn, [b.consumer_id], lifetime=dt.timedelta(days=1), public_key=key.public_key()
        )
        stale = kubeconfig_dict(tunnel.url, b.ca_pem, older, private_pem(key), name="stale")
        await write_secret_kubeconfig(home, b, stale)
        await eventually(
            lambda: any("older certificate for the key in use" in m for m in caplog.messages),
            5,
            "the downgrade to be refused",
        )
        assert stack.pool.credentials.client_cert_pem == cert and stack.watcher.swaps == 1

        # insecure-skip-tls-verify: refused with a clear message, the working credential kept.
        insecure = kubeconfig_dict(tunnel.url, b.ca_pem, cert, private_pem(key), name="insecure")
        insecure["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
        await write_secret_kubeconfig(home, b, insecure)
        await eventually(lambda: stack.invalid, 5, "the insecure kubeconfig to be refused")
        assert "insecure-skip-tls-verify" in stack.invalid[0] and "refusing" in stack.invalid[0]
        assert stack.pool.credentials.client_cert_pem == cert and stack.watcher.swaps == 1
        assert (await stack.pool.request("POST", REVIEW_PATH, body=REVIEW))["status"]["userInfo"]


async def write_secret_kubeconfig(home: KubeClient, b: Bundle, kcfg: dict[str, Any]) -> None:
    for _ in range(5):
        secret = await home.get(SECRETS, b.secret_name, b.tenant_ns)
        secret["data"]["kubeconfig"] = b64(certs.dump_kubeconfig(kcfg))
        try:
            await home.replace(SECRETS, secret, b.tenant_ns)
            return
        except ApiError as err:
            if not err.conflict:
                raise
    raise AssertionError("Secret kept conflicting")


async def test_secret_kubeconfig_naming_a_token_file_is_refused_and_the_token_never_sent(
    new_peering: NewPeering, home: KubeClient, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 15 item 6: a kubeconfig Secret with ``tokenFile`` made vkbridge read a local file (its own
    ServiceAccount token) and send it as Bearer to the server the Secret names. Now it is refused, naming
    the field, the file is never read, and the working credential stays."""
    marker = tmp_path / "token"
    marker.write_text(TOKEN_MARKER)
    with RecordingServer(tmp_path) as evil:
        async with new_peering("365d", None) as (b, _), credential_stack(home, b) as stack:
            await write_secret_kubeconfig(home, b, token_file_kubeconfig(evil.url, evil.ca_pem, marker))
            await eventually(lambda: stack.invalid or stack.watcher.swaps, 10, "the Secret to be judged")
            assert stack.watcher.swaps == 0 and stack.pool.credentials.server != evil.url, "not swapped"
            assert "sets tokenFile, a local file path" in stack.invalid[0], stack.invalid
            refusals = [
                r
                for r in caplog.records
                if r.getMessage() == "pool credential unusable; keeping the previous one"
            ]
            assert refusals and "tokenFile" in str(getattr(refusals[0], "kv", {}).get("error"))
            got = await stack.pool.request("POST", REVIEW_PATH, body=REVIEW)  # the current one still works
            assert got["status"]["userInfo"]["username"] == b.identity_cn
            await asyncio.sleep(0.5)
            assert not any(TOKEN_MARKER in h for h in evil.seen), "our token reached the Secret's server"
            assert evil.seen == [] and TOKEN_MARKER not in caplog.text


async def test_renew_of_our_name_not_created_by_us_is_never_deleted(
    new_peering: NewPeering, home: KubeClient, pool_admin: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 15 item 23: a Renew that happened to bear our name was deleted when its CSR was not ours,
    whoever made it. Only a Renew we created (labels, spec, no owner) may be deleted."""
    knobs = quick_renewer(renew_fraction=0.02, answer_timeout=1.5, retry_base=0.3, retry_cap=0.6)
    async with new_peering("3m", None) as (b, _):
        name = f"{b.slug}-renew-{format(cert_info(b.cert_pem).serial, 'x')[-10:]}"
        other_key = ec.generate_private_key(ec.SECP256R1())
        foreign: dict[str, Any] = {
            "apiVersion": RENEWS.api_version,
            "kind": RENEWS.kind,
            "metadata": {"name": name, "labels": {"liqo.io/managed-by": "someone-else"}},
            "spec": {
                "consumerClusterID": b.consumer_id,
                "csr": b64(certs.build_csr(other_key, b.identity_cn, [b.consumer_id])),
                "identityType": "ResourceSlice",
                "resourceSliceRef": {"name": b.slug},
            },
        }
        created = await pool_admin.create(RENEWS, foreign, b.remote_tenant_ns)
        async with credential_stack(home, b, renewer=knobs) as stack:
            assert stack.renewer is not None and stack.renewer.renew_name(cert_info(b.cert_pem)) == name
            await eventually(lambda: stack.renewer and stack.renewer.failures >= 2, 60, "two refused rounds")
            still = await pool_admin.get(RENEWS, name, b.remote_tenant_ns)
            assert still["metadata"]["uid"] == created["metadata"]["uid"], "someone else's Renew was replaced"
            assert still["spec"]["csr"] == foreign["spec"]["csr"]
            lines = [r for r in caplog.records if r.getMessage() == RENEW_FAILED]
            assert "was not created by vkbridge" in str(getattr(lines[0], "kv", {}).get("error"))
            assert stack.pool.credentials.client_cert_pem == b.cert_pem
        await pool_admin.delete(RENEWS, name, b.remote_tenant_ns)


async def test_expired_certificate_is_reported_once_and_not_renewed(
    new_peering: NewPeering, home: KubeClient, caplog: pytest.LogCaptureFixture
) -> None:
    """Nobody renews a 20-second certificate: after expiry, one line telling the operator what to do."""
    knobs = quick_renewer(renew_fraction=0.9, answer_timeout=1.0)
    async with new_peering("20s", None) as (b, _), credential_stack(home, b, renewer=knobs) as stack:
        assert stack.renewer is not None
        first = x509.load_pem_x509_certificate(b.cert_pem)
        expired_at = first.not_valid_after_utc.strftime("%Y-%m-%dT%H:%M:%SZ")
        line = (
            f"the pool client certificate expired at {expired_at}: apply a new bundle "
            "(user guide section 5, Rotate the credentials)"
        )
        await eventually(lambda: line in caplog.messages, 40, "the expiry line")
        failures = stack.renewer.failures
        await asyncio.sleep(3)  # several retry periods: nothing more is attempted with a dead credential
        assert caplog.messages.count(line) == 1
        assert stack.renewer.failures == failures
        assert (stack.metric("vkbridge_client_certificate_expiry_seconds") or 0) < 0


async def test_pod_reflection_continues_across_a_certificate_renewal(
    new_peering: NewPeering,
    home: KubeClient,
    consumer: ControlPlane,
    pool: ControlPlane,
    fake_nodes: object,
    emulator: EmulatorHandle,  # its consumer pod webhook adds Liqo's virtual-node toleration
    fresh_ns: Callable[[ControlPlane], str],
    tmp_path: Path,
) -> None:
    """A whole vkbridge on a peering whose 2-minute certificate the pool re-signs at 2/3 of its life:
    pods created every second before, during and after the swap all run, one ShadowPod each, without a
    failed handle, a retried key or a warning, through the old certificate's expiry."""
    full = "offloading,replicator,namespacemap,shadowpod,resourceslice"
    async with new_peering("2m", full) as (b, _emu):
        first = x509.load_pem_x509_certificate(b.cert_pem)
        vk = VkbridgeProcess(vkbridge_options(consumer, b), tmp_path / "vkbridge.log").start()
        try:
            await asyncio.to_thread(
                wait_until, lambda: node_ready(consumer, b.slug) == "True", 60, "the virtual node Ready"
            )
            ns = fresh_ns(consumer)
            remote = await asyncio.to_thread(
                offload_namespace, consumer, pool, ns, slug=b.slug, consumer_id=b.consumer_id
            )
            before, mark = vk.metrics(), len(vk.log_text())
            created: dict[str, float] = {}
            running: dict[str, float] = {}
            stop = asyncio.Event()

            async def create_pods() -> None:
                while not stop.is_set():
                    body = pool_pod(
                        b.slug, f"r-{len(created):03d}", cpu="10m", memory="16Mi", node_name=b.slug
                    )
                    await home.create(PODS, body, ns)
                    created[body["metadata"]["name"]] = time.monotonic()
                    await asyncio.sleep(1.0)

            deleted: set[str] = set()

            async def watch_running_and_delete() -> None:
                """Pods Running for 10 s are deleted: the swap meets creations and deletions alike, and
                the node stays far below the grant's 110 pods."""
                while True:
                    for p in (await home.list(PODS, ns)).get("items") or []:
                        name = p["metadata"]["name"]
                        if (p.get("status") or {}).get("phase") == "Running":
                            running.setdefault(name, time.monotonic())
                        if (
                            time.monotonic() - running.get(name, time.monotonic()) > 10
                            and name not in deleted
                        ):
                            await home.delete(PODS, name, ns)
                            deleted.add(name)
                    await asyncio.sleep(0.25)

            tasks = [asyncio.create_task(create_pods()), asyncio.create_task(watch_running_and_delete())]
            try:
                until_expiry = (first.not_valid_after_utc - dt.datetime.now(dt.UTC)).total_seconds()
                await asyncio.to_thread(
                    vk.wait_for_log, "pool client certificate renewed", until_expiry, mark
                )
                t_swap = time.monotonic()
                # Past the old certificate's expiry: from then on only the renewed one can work.
                await sleep_until(first.not_valid_after_utc + dt.timedelta(seconds=5))
                stop.set()
                await asyncio.wait_for(tasks[0], 30)
                await eventually(lambda: set(running) >= set(created), 90, "every pod Running")
                tasks[1].cancel()

                async def settled() -> bool:
                    local = {p["metadata"]["name"] for p in (await home.list(PODS, ns)).get("items") or []}
                    return not local & deleted

                await eventually(settled, 60, "deleted pods gone")
            finally:
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
            after = vk.metrics()
        finally:
            code = vk.stop()
        lines = vk.log_text()[mark:].splitlines()

    around_swap = [n for n, t in created.items() if t_swap - 15 <= t <= t_swap + 15]
    latency = sorted(running[n] - created[n] for n in created)
    print(
        f"\n   pods created {len(created)}, {len(around_swap)} of them within 15 s of the swap; "
        f"create -> Running p50/max {latency[len(latency) // 2]:.1f}/{latency[-1]:.1f}s; vkbridge exit {code}"
    )
    assert len(around_swap) >= 20, "the pods did not straddle the swap"
    status, shadows = pool.api("GET", f"/apis/offloading.liqo.io/v1beta1/namespaces/{remote}/shadowpods")
    assert status == 200, shadows
    worst = max(created, key=lambda n: running[n] - created[n])
    print(
        f"   pods deleted {len(deleted)}; slowest {worst}, created {created[worst] - t_swap:+.1f}s from the swap"
    )
    assert len(deleted) >= 20, "deletions did not straddle the swap"
    names = [s["metadata"]["name"] for s in shadows["items"] if not s["metadata"].get("deletionTimestamp")]
    assert sorted(names) == sorted(set(created) - deleted), (
        "one ShadowPod per live pod, none for deleted ones"
    )
    for name in ("liqo_virtual_kubelet_reflection_error_counter", "vkbridge_workqueue_retries_total"):
        assert metric_sum(after, name) == metric_sum(before, name), (
            f"{name}: failed handles during the renewal"
        )
    problems = [ln for ln in lines if " WARNING " in ln or " ERROR " in ln]
    assert problems == [], "\n".join(problems[:20])
