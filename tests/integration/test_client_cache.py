"""KubeClient and Cache against the real consumer API server: CRUD, watch, 410 re-list, identity swap."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from e2e.controlplane import ControlPlane
from e2e.fixtures_planes import FreshNs
from e2e.tunnel import TunnelProxy
from tests.support.certs import self_signed
from vkbridge.kube import client as client_module
from vkbridge.kube import tokensource
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import (
    CONFIGMAPS,
    SELFSUBJECTREVIEWS,
    ApiError,
    KubeClient,
    Resource,
    TransportError,
    WatchExpired,
)
from vkbridge.kube.kubeconfig import Credentials, KubeconfigError, load_kubeconfig_file, parse_kubeconfig

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

Obj = dict[str, Any]
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", True, "ServiceAccount")


def cm(ns: str, name: str, **data: str) -> Obj:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns, "labels": {"test": "client-cache"}},
        "data": data,
    }


class Seen:
    """Records cache events; ``wait`` blocks on a condition over them (no sleeps)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, Obj | None, Obj | None]] = []
        self._changed = asyncio.Event()

    def __call__(self, etype: str, old: Obj | None, new: Obj | None) -> None:
        name = str(((new or old) or {}).get("metadata", {}).get("name"))
        if name == "kube-root-ca.crt":
            return  # kube-controller-manager publishes it into every namespace, whenever it gets to it
        self.events.append((etype, name, old, new))
        self._changed.set()

    def names(self, etype: str) -> list[str]:
        return [n for t, n, _, _ in self.events if t == etype]

    async def wait(self, pred: Callable[[], bool], timeout: float = 30.0) -> None:
        async with asyncio.timeout(timeout):
            while not pred():
                self._changed.clear()
                await self._changed.wait()


async def whoami(client: KubeClient) -> Obj:
    review = await client.create(
        SELFSUBJECTREVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    )
    user: Obj = review["status"]["userInfo"]
    return user


@contextlib.asynccontextmanager
async def running(cache: Cache) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(cache.run(), name=cache.name)
    try:
        assert await cache.wait_synced(30), f"{cache.name} did not sync"
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_crud_and_error_helpers(consumer: ControlPlane, home: KubeClient, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(consumer, wait_sa=False)
    created = await home.create(CONFIGMAPS, cm(ns, "one", a="1"))
    assert created["metadata"]["uid"]
    with pytest.raises(ApiError) as exists:
        await home.create(CONFIGMAPS, cm(ns, "one"))
    assert exists.value.already_exists and not exists.value.conflict

    got = await home.get(CONFIGMAPS, "one", ns)
    assert got["data"] == {"a": "1"}
    patched = await home.patch(CONFIGMAPS, "one", {"data": {"b": "2"}}, ns)
    assert patched["data"] == {"a": "1", "b": "2"}

    stale = dict(created, data={"c": "3"})  # carries the creation resourceVersion: optimistic lock fails
    with pytest.raises(ApiError) as conflict:
        await home.replace(CONFIGMAPS, stale)
    assert conflict.value.conflict and conflict.value.status == 409
    fresh = dict(patched, data={"c": "3"})
    assert (await home.replace(CONFIGMAPS, fresh))["data"] == {"c": "3"}

    applied = await home.apply(
        CONFIGMAPS,
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "one"}, "data": {"d": "4"}},
        ns,
    )
    assert applied["data"]["d"] == "4"
    managers = {m["manager"] for m in applied["metadata"]["managedFields"]}
    assert "reflection.liqo.io" in managers

    listed = await home.list(CONFIGMAPS, ns, label_selector="test=client-cache")
    assert [i["metadata"]["name"] for i in listed["items"]] == ["one"]

    with pytest.raises(ApiError) as precondition:
        await home.delete(CONFIGMAPS, "one", ns, preconditions_uid="not-the-uid")
    assert precondition.value.conflict
    await home.delete(
        CONFIGMAPS, "one", ns, preconditions_uid=created["metadata"]["uid"], grace_period_seconds=0
    )
    with pytest.raises(ApiError) as missing:
        await home.get(CONFIGMAPS, "one", ns)
    assert missing.value.not_found and not missing.value.is_transient

    assert home.stats[("create", "configmaps")] == 2
    assert home.stats[("apply", "configmaps")] == 1
    assert home.stats[("delete", "configmaps")] == 2
    assert home.stats[("list", "configmaps")] == 1


async def test_stream_checks_status(consumer: ControlPlane, home: KubeClient, fresh_ns: FreshNs) -> None:
    ns = fresh_ns(consumer, wait_sa=False)
    await home.create(CONFIGMAPS, cm(ns, "s"))
    params = {"watch": "true", "timeoutSeconds": "1"}
    async with home.stream("GET", CONFIGMAPS.path(ns), params) as resp:
        first = await resp.content.readline()
    assert b'"ADDED"' in first
    with pytest.raises(ApiError) as missing:
        async with home.stream("GET", "/api/v1/namespaces/no-such-ns-xyz/pods/nope/log"):
            pass
    assert missing.value.not_found


async def test_cache_follows_add_update_delete(
    consumer: ControlPlane, home: KubeClient, fresh_ns: FreshNs
) -> None:
    ns = fresh_ns(consumer, wait_sa=False)
    await home.create(CONFIGMAPS, cm(ns, "pre", v="0"))
    cache = Cache(home, CONFIGMAPS, ns, label_selector="test=client-cache", name="it-cache")
    seen = Seen()
    cache.subscribe(seen)
    async with running(cache):
        assert seen.names("ADDED") == ["pre"]
        assert "managedFields" not in cache.get(f"{ns}/pre")["metadata"]  # type: ignore[index]
        await home.create(CONFIGMAPS, cm(ns, "x", v="1"))
        await seen.wait(lambda: "x" in seen.names("ADDED"))
        await home.patch(CONFIGMAPS, "x", {"data": {"v": "2"}}, ns)
        await seen.wait(lambda: "x" in seen.names("MODIFIED"))
        assert cache.get(f"{ns}/x")["data"] == {"v": "2"}  # type: ignore[index]
        await home.delete(CONFIGMAPS, "x", ns)
        await seen.wait(lambda: "x" in seen.names("DELETED"))
        assert cache.get(f"{ns}/x") is None
        assert cache.keys() == [f"{ns}/pre"]
        assert cache.relists == 0


async def test_inactivity_timeout_rewatches_without_losing_events(
    consumer: ControlPlane, home: KubeClient, fresh_ns: FreshNs
) -> None:
    ns = fresh_ns(consumer, wait_sa=False)
    cache = Cache(home, CONFIGMAPS, ns, name="idle-cache", inactivity_timeout=0.3)
    seen = Seen()
    cache.subscribe(seen)
    async with running(cache):
        start = home.stats[("watch", "configmaps")]
        async with asyncio.timeout(20):
            while home.stats[("watch", "configmaps")] < start + 3:  # noqa: ASYNC110 - a counter, no event
                await asyncio.sleep(0.05)
        await home.create(CONFIGMAPS, cm(ns, "late"))
        await seen.wait(lambda: seen.names("ADDED") == ["late"])
        assert cache.relists == 0 and cache.state == "watching"


async def test_relist_after_compaction_emits_missed_changes(
    consumer: ControlPlane, home: KubeClient, fresh_ns: FreshNs
) -> None:
    ns = fresh_ns(consumer, wait_sa=False)
    for name in ("gone", "changed", "kept"):
        await home.create(CONFIGMAPS, cm(ns, name, v="1"))
    cache = Cache(home, CONFIGMAPS, ns, name="relist-cache", backoff_cap=2.0)
    seen = Seen()
    cache.subscribe(seen)
    async with running(cache):
        await seen.wait(lambda: len(seen.names("ADDED")) == 3)
    stale_rv = cache.resource_version
    assert stale_rv is not None

    # While nobody watches: delete, change, create; then make the old resourceVersion unservable.
    await home.delete(CONFIGMAPS, "gone", ns)
    await home.patch(CONFIGMAPS, "changed", {"data": {"v": "2"}}, ns)
    await home.create(CONFIGMAPS, cm(ns, "new", v="1"))
    await asyncio.to_thread(consumer.compact_etcd)
    await asyncio.to_thread(consumer.restart_apiserver)  # drops the apiserver's watch-cache window too

    with pytest.raises(WatchExpired):
        async with contextlib.aclosing(home.watch(CONFIGMAPS, ns, resource_version=stale_rv)) as events:
            async for _ in events:
                pass

    seen.events.clear()
    async with running(cache):
        await seen.wait(lambda: len(seen.events) >= 3)
        assert cache.expirations == 1 and cache.relists == 1
        assert seen.names("DELETED") == ["gone"]
        assert seen.names("MODIFIED") == ["changed"]
        assert seen.names("ADDED") == ["new"]
        deleted_old = seen.events[0][2]
        assert deleted_old is not None and deleted_old["data"] == {"v": "1"}
        assert sorted(k for k in cache.keys() if not k.endswith("/kube-root-ca.crt")) == [
            f"{ns}/changed",
            f"{ns}/kept",
            f"{ns}/new",
        ]
        # ...and it is watching again, from the re-list's resourceVersion.
        await home.create(CONFIGMAPS, cm(ns, "after"))
        await seen.wait(lambda: "after" in seen.names("ADDED"))


async def test_swap_credentials_keeps_the_cache(
    consumer: ControlPlane, home: KubeClient, fresh_ns: FreshNs
) -> None:
    ns = fresh_ns(consumer, wait_sa=False)
    await home.create(CONFIGMAPS, cm(ns, "before"))
    client = KubeClient(load_kubeconfig_file(consumer.admin_kubeconfig), name="swap", qps=50, burst=10)
    async with client:
        assert (await whoami(client))["username"] == "admin"
        cache = Cache(client, CONFIGMAPS, ns, name="swap-cache", backoff_base=0.05)
        seen = Seen()
        cache.subscribe(seen)
        async with running(cache) as task:
            await seen.wait(lambda: seen.names("ADDED") == ["before"])
            watches = client.stats[("watch", "configmaps")]

            cert, key = consumer.issue_client_cert("other-user", ["system:masters"], dt.timedelta(hours=1))
            assert key is not None
            await client.swap_credentials(parse_kubeconfig(consumer.kubeconfig_dict(cert, key)))
            assert client.generation == 1

            user = await whoami(client)
            assert user["username"] == "other-user"
            assert "system:masters" in user["groups"]

            await home.create(CONFIGMAPS, cm(ns, "after"))
            await seen.wait(lambda: "after" in seen.names("ADDED"))
            assert client.stats[("watch", "configmaps")] > watches  # the broken watch was re-opened
            assert sorted(k for k in cache.keys() if not k.endswith("/kube-root-ca.crt")) == [
                f"{ns}/after",
                f"{ns}/before",
            ]
            assert cache.relists == 0 and not task.done()
            assert seen.names("DELETED") == []


async def test_swap_credentials_ends_every_live_watch_with_a_transport_error(
    consumer: ControlPlane, home: KubeClient, fresh_ns: FreshNs
) -> None:
    """Closing an aiohttp session leaves a reader already waiting on it waiting for ever, and one that
    reads later gets a bare ``RuntimeError("Connection closed.")`` (it once killed vkbridge in CI): the
    swap must end both kinds of watch with a ``TransportError`` the caches know how to resume from."""
    ns = fresh_ns(consumer, wait_sa=False)
    client = KubeClient(load_kubeconfig_file(consumer.admin_kubeconfig), name="swap")
    async with client:
        rv = (await client.list(CONFIGMAPS, ns))["metadata"]["resourceVersion"]

        def quiet_watch() -> Any:
            return client.watch(
                CONFIGMAPS,
                ns,
                resource_version=rv,
                field_selector="metadata.name=nothing",
                announce_open=True,
            )

        async with contextlib.aclosing(quiet_watch()) as idle, contextlib.aclosing(quiet_watch()) as waiting:
            assert (await anext(idle))["type"] == client_module.WATCH_OPENED  # parked at its yield
            assert (await anext(waiting))["type"] == client_module.WATCH_OPENED
            reader = asyncio.create_task(anext(waiting))  # blocked reading the quiet stream
            await asyncio.sleep(0.2)
            assert not reader.done()

            await client.swap_credentials(load_kubeconfig_file(consumer.admin_kubeconfig))

            async with asyncio.timeout(5):
                with pytest.raises(TransportError, match="credentials swapped"):
                    await reader
            with pytest.raises(TransportError, match="credentials swapped"):
                await anext(idle)
        assert client._live_streams == set()  # nothing kept for the streams that ended


async def test_abandon_inflight_frees_a_request_and_a_watch_stuck_on_a_dead_connection(
    consumer: ControlPlane, fresh_ns: FreshNs
) -> None:
    """When the pool is declared lost, a request on a black-holed connection must not hold its worker for
    the 60 s request timeout, nor a watch stay silent until its cache's inactivity timeout; and once the
    tunnel forwards again, no request may pick a dead kept-alive connection from before."""
    ns = fresh_ns(consumer, wait_sa=False)
    proxy = TunnelProxy("127.0.0.1", consumer.port)
    proxy.start()
    try:
        creds = dataclasses.replace(load_kubeconfig_file(consumer.admin_kubeconfig), server=proxy.url)
        async with KubeClient(creds, name="pool") as client:
            lists = await asyncio.gather(*(client.list(CONFIGMAPS, ns) for _ in range(3)))
            assert proxy.open_connections >= 2  # kept alive: one will carry the request, others stay idle
            rv = lists[0]["metadata"]["resourceVersion"]
            watch = client.watch(CONFIGMAPS, ns, resource_version=rv, announce_open=True)
            async with contextlib.aclosing(watch):
                assert (await anext(watch))["type"] == client_module.WATCH_OPENED
                watcher = asyncio.create_task(anext(watch))
                proxy.blackhole()
                request = asyncio.create_task(client.get(CONFIGMAPS, "anything", ns))
                await asyncio.sleep(1.0)
                assert not request.done() and not watcher.done()  # both stuck on dead connections

                assert client.abandon_inflight("the pool stopped answering pings") == 2
                async with asyncio.timeout(2):
                    with pytest.raises(TransportError, match="abandoned: the pool stopped answering pings"):
                        await request
                    with pytest.raises(TransportError, match="the pool stopped answering pings"):
                        await watcher
            assert client.abandon_inflight("nothing left") == 0

            # A watch opened while the pool is lost hangs on a connection into the void; once the pool
            # answers again, the attempts of the outage are restarted, and the old connections stay dead.
            def new_watch() -> Any:
                return client.watch(CONFIGMAPS, ns, resource_version=rv, announce_open=True)

            opening = asyncio.create_task(anext(new_watch()))
            await asyncio.sleep(1.0)
            assert not opening.done()
            proxy.restore(reset_blackholed=False)  # as behind a NAT that forgot them
            assert (
                client.abandon_inflight("started while the pool was lost", streams=False, connections=False)
                == 1
            )
            with pytest.raises(TransportError, match="abandoned: started while the pool was lost") as err:
                await opening
            assert err.value.abandoned
            async with asyncio.timeout(5):
                await client.list(CONFIGMAPS, ns)
                async with contextlib.aclosing(new_watch()) as again:
                    assert (await anext(again))["type"] == client_module.WATCH_OPENED
    finally:
        proxy.stop()


async def test_cache_survives_an_unexpected_error_and_relists(
    consumer: ControlPlane, home: KubeClient, fresh_ns: FreshNs, caplog: pytest.LogCaptureFixture
) -> None:
    """A bug in one cache (here: its projection raises once) is logged with its traceback and the cache
    starts over; it must not end the process's TaskGroup."""
    ns = fresh_ns(consumer, wait_sa=False)
    await home.create(CONFIGMAPS, cm(ns, "first"))
    failures = []

    def project(obj: Obj) -> Obj:
        if not failures:
            failures.append(obj["metadata"]["name"])
            raise KeyError("a projection bug")
        return obj

    cache = Cache(home, CONFIGMAPS, ns, name="buggy-cache", backoff_base=0.05, project=project)
    seen = Seen()
    cache.subscribe(seen)
    with caplog.at_level("ERROR", logger="vkbridge"):
        async with running(cache) as task:
            assert f"{ns}/first" in cache.keys()
            await home.create(CONFIGMAPS, cm(ns, "second"))
            await seen.wait(lambda: "second" in seen.names("ADDED"), timeout=10)
            assert not task.done()
    bugs = [r for r in caplog.records if r.getMessage().startswith("unexpected error")]
    assert failures and any(getattr(r, "kv", {}).get("cache") == "buggy-cache" for r in bugs)
    assert any(r.exc_info for r in bugs)


async def test_token_file_is_reread(
    consumer: ControlPlane,
    home: KubeClient,
    fresh_ns: FreshNs,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ns = fresh_ns(consumer)
    tokens = []
    for sa in ("first", "second"):
        await home.create(SERVICEACCOUNTS, {"metadata": {"name": sa}}, ns)
        req = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}
        tokens.append(
            (await home.create(SERVICEACCOUNTS, req, ns, name=sa, subresource="token"))["status"]["token"]
        )
    token_file = tmp_path / "token"
    token_file.write_text(tokens[0])
    creds = Credentials(
        server=consumer.url, ca_pem=consumer.ca_pem, token=tokens[0], token_file=str(token_file)
    )
    assert tokens[0] not in repr(creds)
    async with KubeClient(creds, name="sa") as client:
        assert (await whoami(client))["username"] == f"system:serviceaccount:{ns}:first"
        token_file.write_text(tokens[1])  # a projected token rotates in place
        assert (await whoami(client))["username"] == f"system:serviceaccount:{ns}:first"  # cached for a while
        monkeypatch.setattr(tokensource, "TOKEN_REFRESH_SECONDS", 0.0)
        assert (await whoami(client))["username"] == f"system:serviceaccount:{ns}:second"


async def test_refusals_and_verification(consumer: ControlPlane) -> None:
    cert, key = consumer.issue_client_cert("someone", [], dt.timedelta(hours=1))
    assert key is not None
    kcfg = consumer.kubeconfig_dict(cert, key)
    kcfg["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    with pytest.raises(KubeconfigError, match="insecure-skip-tls-verify is set"):
        parse_kubeconfig(kcfg)

    good = parse_kubeconfig(consumer.kubeconfig_dict(cert, key))
    # tls-server-name is the name verified (the serving cert has DNS kubernetes.default, we dial an IP).
    named = dataclasses.replace(good, tls_server_name="kubernetes.default")
    async with KubeClient(named, name="named") as client:
        assert (await whoami(client))["username"] == "someone"
    misnamed = dataclasses.replace(good, tls_server_name="not-the-server.example")
    async with KubeClient(misnamed, name="misnamed") as client:
        with pytest.raises(TransportError, match=r"(?i)certificate"):
            await whoami(client)

    # A CA that did not sign the server's certificate: the connection must fail, not be trusted.
    wrong_ca = Credentials(
        server=good.server,
        ca_pem=_self_signed_ca(),
        client_cert_pem=good.client_cert_pem,
        client_key_pem=good.client_key_pem,
    )
    async with KubeClient(wrong_ca, name="wrong-ca") as client:
        with pytest.raises(TransportError) as failed:
            await client.get(CONFIGMAPS, "x", "default")
    assert not failed.value.is_transient
    assert "certificate" in str(failed.value).lower()

    # A certificate the server does not trust (signed by a foreign CA) is 401, and 401 is "unauthorized".
    foreign_key = ec.generate_private_key(ec.SECP256R1())
    foreign = Credentials(
        server=good.server,
        ca_pem=consumer.ca_pem,
        client_cert_pem=_self_signed_ca(foreign_key, client=True),
        client_key_pem=foreign_key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ),
    )
    async with KubeClient(foreign, name="foreign") as client:
        with pytest.raises(ApiError) as denied:
            await client.get(CONFIGMAPS, "x", "default")
    assert denied.value.status == 401 and denied.value.unauthorized


def _self_signed_ca(key: ec.EllipticCurvePrivateKey | None = None, *, client: bool = False) -> bytes:
    key = key or ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "client" if client else "stranger-ca")])
    now = dt.datetime.now(dt.UTC)
    cert = self_signed(
        key,
        name,
        not_before=now - dt.timedelta(minutes=1),
        not_after=now + dt.timedelta(hours=1),
        ca=not client,
    )
    return cert.public_bytes(serialization.Encoding.PEM)
