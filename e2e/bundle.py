"""The peering bundle fixture: what applying the Extend bundle (GUIDE §8) and `liqoctl peer` leave behind.

Consumer: tenant namespace liqo-tenant-<slug>, ResourceSlice <slug> (with CSR and, as once replicated
back, its granted status), the kubeconfig Secret kubeconfig-resourceslice-<slug> pointing at
pool_server_url (the tunnel) with the pool CA embedded, VirtualNode <slug> and NamespaceMap <slug>.
Pool: tenant namespace liqo-tenant-<consumer id> with the tenant's narrow RBAC, the VK ClusterRole, and
the replicated ResourceSlice with its status, so an emulator started later finds a settled peering.

The client key is generated here (Ed25519, Liqo's default; ECDSA on request), the CSR carries exactly the
subject Liqo's provider checks, and the certificate is signed with the pool's client CA.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Coroutine, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, NotRequired, TypedDict, TypeVar, Unpack

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import NameOID

from e2e.emulator import names as n
from e2e.emulator.certs import Signer
from e2e.emulator.grant import b64, granted
from e2e.emulator.kube import ApiError, Kube, Obj, api_path
from e2e.emulator.offloading import namespacemap_body
from e2e.emulator.rbac import ensure_pool_tenant, ensure_vk_clusterrole
from e2e.pki import key_pem as private_pem

if TYPE_CHECKING:
    from e2e.controlplane import ControlPlane

T = TypeVar("T")
KeyType = Literal["ed25519", "ecdsa"]


@dataclass(repr=False)
class Bundle:
    """A peering as the consumer sees it; repr never shows the key or the kubeconfig."""

    slug: str
    consumer_id: str
    tenant_ns: str
    remote_tenant_ns: str
    secret_name: str
    kubeconfig: dict[str, Any]
    cert_pem: bytes
    key_pem: bytes
    pool_server_url: str = ""
    grant: dict[str, str] = field(default_factory=dict)
    identity_cn: str = ""
    csr_pem: bytes = b""

    def __repr__(self) -> str:
        return (
            f"Bundle(slug={self.slug!r}, consumer_id={self.consumer_id!r}, tenant_ns={self.tenant_ns!r}, "
            f"server={self.pool_server_url!r}, cn={self.identity_cn!r})"
        )

    @property
    def ca_pem(self) -> bytes:
        """The pool CA embedded in the kubeconfig."""
        return base64.b64decode(self.kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"])

    def kube(self, name: str = "tenant") -> Kube:
        """An API client for the pool as this tenant (through pool_server_url)."""
        return Kube.from_kubeconfig(self.kubeconfig, name=name)


def new_key(key_type: KeyType = "ed25519") -> ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey:
    return (
        ed25519.Ed25519PrivateKey.generate()
        if key_type == "ed25519"
        else ec.generate_private_key(ec.SECP256R1())
    )


def make_csr(key: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey, cn: str, orgs: list[str]) -> bytes:
    """PEM PKCS#10 with subject O=<orgs...>, CN=<cn> (Liqo's generateCSR order)."""
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, cn))
    algo = None if isinstance(key, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    csr = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(attrs)).sign(key, algo)
    return csr.public_bytes(serialization.Encoding.PEM)


def kubeconfig_dict(server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, name: str) -> dict[str, Any]:
    """A client-certificate kubeconfig that verifies the server against ca_pem (never insecure)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}
        ],
        "users": [
            {
                "name": name,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }


async def _upsert(kube: Kube, collection: str, body: Obj) -> Obj:
    """Create, or update metadata labels/annotations and spec of the existing object."""

    def merged(cur: Obj) -> Obj:
        md, want = cur["metadata"], body["metadata"]
        md["labels"] = {**(md.get("labels") or {}), **(want.get("labels") or {})}
        md["annotations"] = {**(md.get("annotations") or {}), **(want.get("annotations") or {})}
        for k, v in body.items():
            if k not in ("metadata", "status", "apiVersion", "kind"):
                cur[k] = v
        return cur

    return await kube.create_or_update(collection, body, merged)


async def _put_status(kube: Kube, path: str, status: Obj) -> None:
    await kube.read_modify_write(path, lambda cur: {**cur, "status": status}, sub="status")


async def create_bundle_async(
    consumer_kube: Kube,
    pool_kube: Kube,
    signer: Signer,
    *,
    slug: str,
    consumer_id: str,
    pool_server_url: str,
    grant: Mapping[str, str] | None = None,
    cert_lifetime: dt.timedelta = dt.timedelta(days=365),
    key_type: KeyType = "ed25519",
) -> Bundle:
    tenant, remote_tenant = n.consumer_tenant_ns(slug), n.pool_tenant_ns(consumer_id)
    secret_name = n.kubeconfig_secret(slug)
    effective = granted(dict(grant or {}))
    cn = n.identity_cn(slug, consumer_id)

    # Pool side first: the tenant's namespace and rights exist before any credential does.
    await ensure_vk_clusterrole(pool_kube)
    await ensure_pool_tenant(pool_kube, consumer_id, slug)

    key = new_key(key_type)
    key_pem = private_pem(key)
    csr_pem = make_csr(key, cn, [consumer_id])
    cert_pem = signer.sign_csr(x509.load_pem_x509_csr(csr_pem), cert_lifetime)
    kcfg = kubeconfig_dict(pool_server_url, signer.ca_pem, cert_pem, key_pem, name=f"pool-{slug}")

    await consumer_kube.ensure(
        api_path("v1", "namespaces"),
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {
                "name": tenant,
                "labels": {"liqo.io/tenant-namespace": "true", n.REMOTE_CLUSTER_ID: slug},
            },
        },
    )
    await _upsert(
        consumer_kube,
        api_path("v1", "secrets", tenant),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "Opaque",
            "metadata": {
                "name": secret_name,
                "namespace": tenant,
                "labels": {
                    n.REMOTE_CLUSTER_ID: slug,
                    "liqo.io/identity-type": "ResourceSlice",
                    "liqo.io/resourceslice-name": slug,
                },
            },
            "data": {"kubeconfig": b64(yaml.safe_dump(kcfg).encode())},
        },
    )
    rs_spec = {
        "consumerClusterID": consumer_id,
        "providerClusterID": slug,
        "resources": effective,
        "class": "default",
        "csr": b64(csr_pem),
    }
    rs_status = {
        "resources": effective,
        "authParams": {"ca": b64(signer.ca_pem), "signedCRT": b64(cert_pem), "apiServer": pool_server_url},
        "conditions": [
            {"type": "Authentication", "status": "Accepted", "reason": "CertificateSigned",
             "message": "The certificate has been signed", "lastTransitionTime": _now()},
            {"type": "Resources", "status": "Accepted", "reason": "ResourcesAccepted",
             "message": "The resources have been accepted", "lastTransitionTime": _now()},
        ],
    }  # fmt: skip
    rs_labels = n.replication_labels(slug)
    # The consumer's ResourceSlice and its replicated copy on the pool.
    sides = (
        (consumer_kube, tenant, rs_labels),
        (pool_kube, remote_tenant, n.labels_for_remote(rs_labels, consumer_id)),
    )
    for kube, ns, labels in sides:
        md = {"name": slug, "namespace": ns, "labels": labels, "annotations": {n.CREATE_VIRTUAL_NODE: "true"}}
        body = {"apiVersion": n.AUTH, "kind": "ResourceSlice", "metadata": md, "spec": rs_spec}
        await _upsert(kube, api_path(n.AUTH, n.RESOURCESLICES, ns), body)
    # Status on both sides (pool first), as after replication: the emulator then finds nothing to re-sign.
    for kube, ns, _labels in reversed(sides):
        await _put_status(kube, api_path(n.AUTH, n.RESOURCESLICES, ns, slug), rs_status)

    await _upsert(
        consumer_kube,
        api_path(n.OFFLOADING, n.VIRTUALNODES, tenant),
        {
            "apiVersion": n.OFFLOADING,
            "kind": "VirtualNode",
            "metadata": {"name": slug, "namespace": tenant, "labels": {n.REMOTE_CLUSTER_ID: slug}},
            "spec": {
                "clusterID": slug,
                "createNode": True,
                "disableNetworkCheck": True,
                "kubeconfigSecretRef": {"name": secret_name},
                "labels": {n.POOL_LABEL: slug, n.REMOTE_CLUSTER_ID: slug},
                "taints": [{"key": n.POOL_LABEL, "value": slug, "effect": "NoSchedule"}],
                "resourceQuota": {"hard": effective},
            },
        },
    )
    nm = namespacemap_body(slug, {})
    try:
        await consumer_kube.create(api_path(n.OFFLOADING, n.NAMESPACEMAPS, tenant), nm)
    except ApiError as e:  # keep an existing map's desiredMapping: it belongs to the offloading controller
        if not e.already_exists:
            raise
    return Bundle(
        slug=slug,
        consumer_id=consumer_id,
        tenant_ns=tenant,
        remote_tenant_ns=remote_tenant,
        secret_name=secret_name,
        kubeconfig=kcfg,
        cert_pem=cert_pem,
        key_pem=key_pem,
        pool_server_url=pool_server_url,
        grant=effective,
        identity_cn=cn,
        csr_pem=csr_pem,
    )


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def run_sync(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine to completion from sync code, even when the caller's thread has a running loop."""
    with concurrent.futures.ThreadPoolExecutor(1) as ex:
        return ex.submit(asyncio.run, coro).result()


@contextlib.asynccontextmanager
async def _admin_kubes(consumer: ControlPlane, pool: ControlPlane) -> AsyncIterator[tuple[Kube, Kube]]:
    """Admin clients of both planes, closed on the way out."""
    async with (
        Kube.from_kubeconfig(consumer.admin_kubeconfig, name="consumer") as ck,
        Kube.from_kubeconfig(pool.admin_kubeconfig, name="pool") as pk,
    ):
        yield ck, pk


class PeeringOptions(TypedDict):
    """The keyword arguments of create_bundle_async (defaults there), which create_bundle passes on."""

    slug: str
    consumer_id: str
    pool_server_url: str
    grant: NotRequired[Mapping[str, str] | None]
    cert_lifetime: NotRequired[dt.timedelta]
    key_type: NotRequired[KeyType]


def create_bundle(consumer: ControlPlane, pool: ControlPlane, **peering: Unpack[PeeringOptions]) -> Bundle:
    """Apply a peering bundle between two control planes (idempotent: a second call refreshes it)."""

    async def go() -> Bundle:
        async with _admin_kubes(consumer, pool) as (ck, pk):
            return await create_bundle_async(ck, pk, Signer(pool.ca.cert, pool.ca.key), **peering)

    return run_sync(go())


def delete_bundle(consumer: ControlPlane, pool: ControlPlane, bundle: Bundle) -> None:
    """Remove both tenant namespaces (without waiting for them to go)."""

    async def go() -> None:
        async with _admin_kubes(consumer, pool) as (ck, pk):
            await ck.delete(api_path("v1", "namespaces", name=bundle.tenant_ns))
            await pk.delete(api_path("v1", "namespaces", name=bundle.remote_tenant_ns))

    run_sync(go())


def decode_kubeconfig_secret(secret: Obj) -> dict[str, Any]:
    """The kubeconfig held by a kubeconfig-resourceslice-<slug> Secret."""
    cfg: dict[str, Any] = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    return cfg
