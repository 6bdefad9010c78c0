"""Issue 35 item 7: logs, exec and port-forward never reach an earlier same-name pod still on the pool.

The kubelet API (vkbridge.kubeletapi.server) over the shared in-memory API: real local pod cache, the
pool pod read from a FakeApi; the dial itself is stubbed (it is tests/integration/test_kubeletapi.py's).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import aiohttp
import pytest
from aiohttp.test_utils import TestClient, TestServer

from e2e.waiting import eventually
from reflectors.forge import constants as c
from tests.support.fakeapi import FakeApi, caught_up
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import PODS
from vkbridge.kubeletapi import server
from vkbridge.kubeletapi.server import KubeletServer
from vkbridge.kubeletapi.streams.pooldial import DialError
from vkbridge.kubeletapi.streams.route import StreamRoute

NODE = "vk-pool"
NS, RNS = "team", "team-c-1a2b3c4d"
NEW_UID, OLD_UID = "uid-of-web-0-now", "uid-of-web-0-before"


class LogStream:
    """What ``KubeClient.stream`` yields for ``pods/log``: a body read chunk by chunk."""

    class _Content:
        async def iter_any(self) -> AsyncIterator[bytes]:
            yield b"hello from the pool\n"

    content = _Content()


class Env:
    def __init__(self) -> None:
        self.home, self.pool = FakeApi("consumer"), FakeApi("pool")
        self.pool.credentials = SimpleNamespace(token=None, token_file=None)  # type: ignore[attr-defined]
        self.logs_dialed: list[str] = []
        self.streams_dialed: list[StreamRoute] = []
        self.local_pods = Cache(cast(Any, self.home), PODS, name="consumer/pods")
        self.srv = KubeletServer(
            cast(Any, self.home), cast(Any, self.pool), node_name=NODE, port=0,
            serving_certificate=lambda: None, client_ca_pem=None,
            remote_namespace=lambda ns: RNS if ns == NS else None, local_pods=self.local_pods,
            authorize=False,
        )  # fmt: skip

        @contextlib.asynccontextmanager
        async def stream(method: str, path: str, params: Any = None, **_kw: Any) -> AsyncIterator[Any]:
            self.logs_dialed.append(path)
            yield LogStream()

        async def open_stream(route: StreamRoute, _opts: Any) -> Any:
            self.streams_dialed.append(route)
            raise DialError(500, "dial stubbed")

        self.pool.stream = stream  # type: ignore[attr-defined]
        self.srv._streams.open = open_stream  # type: ignore[method-assign]

    def pods(self, pool_uid: str | None) -> None:
        """web-0 bound to us (UID NEW_UID), and on the pool the pod of that name recording ``pool_uid``."""
        self.home.put("pods", {"metadata": {"name": "web-0", "namespace": NS, "uid": NEW_UID},
                               "spec": {"nodeName": NODE}})  # fmt: skip
        annotations = {} if pool_uid is None else {c.LOCAL_POD_UID_ANNOTATION: pool_uid}
        self.pool.put("pods", {"metadata": {"name": "web-0", "namespace": RNS, "annotations": annotations}})


@contextlib.asynccontextmanager
async def env() -> AsyncIterator[tuple[Env, TestClient[Any, Any]]]:
    e = Env()
    task = asyncio.create_task(e.local_pods.run())
    try:
        client = TestClient(TestServer(e.srv._app()))
        await client.start_server()
        try:
            yield e, client
        finally:
            await client.close()
    finally:
        task.cancel()


async def synced(e: Env) -> None:
    await e.local_pods.wait_synced()
    await eventually(lambda: caught_up(e.local_pods, e.home), 2.0, "local pods caught up")


async def test_logs_of_a_recreated_pod_never_reach_its_predecessor_still_on_the_pool() -> None:
    async with env() as (e, client):
        e.pods(pool_uid=OLD_UID)
        await synced(e)
        resp = await client.get(f"/containerLogs/{NS}/web-0/app")
        assert resp.status == 404, "kubectl logs web-0 read the earlier pod's logs"
        assert "earlier pod" in await resp.text()
        assert e.logs_dialed == []


async def test_logs_of_the_pool_pod_made_for_this_pod_are_served() -> None:
    async with env() as (e, client):
        e.pods(pool_uid=NEW_UID)
        await synced(e)
        resp = await client.get(f"/containerLogs/{NS}/web-0/app")
        assert resp.status == 200 and await resp.text() == "hello from the pool\n"
        assert e.logs_dialed == [f"/api/v1/namespaces/{RNS}/pods/web-0/log"]


@pytest.mark.parametrize("recorded", [NEW_UID, None], ids=["made-for-it", "unmarked-liqo-vk"])
async def test_exec_dials_a_pool_pod_made_for_this_pod_or_unmarked(recorded: str | None) -> None:
    async with env() as (e, client):
        e.pods(pool_uid=recorded)
        await synced(e)
        with pytest.raises(aiohttp.WSServerHandshakeError):
            await client.ws_connect(
                f"/exec/{NS}/web-0/app?command=sh&stdout=1", protocols=("v5.channel.k8s.io",)
            )
        assert [r.pod for r in e.streams_dialed] == ["web-0"]


async def test_exec_of_a_recreated_pod_never_reaches_its_predecessor_still_on_the_pool() -> None:
    async with env() as (e, client):
        e.pods(pool_uid=OLD_UID)
        await synced(e)
        with pytest.raises(aiohttp.WSServerHandshakeError) as err:
            await client.ws_connect(
                f"/exec/{NS}/web-0/app?command=sh&stdout=1", protocols=("v5.channel.k8s.io",)
            )
        assert e.streams_dialed == [], "kubectl exec web-0 opened a shell in the earlier pod"
        assert err.value.status == 404


async def test_port_forward_of_a_recreated_pod_never_reaches_its_predecessor_still_on_the_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    dialed: list[str] = []

    async def dial(_dialer: Any, path: str) -> Any:
        dialed.append(path)
        raise DialError(500, "dial stubbed")

    monkeypatch.setattr(server.PoolPortForward, "dial", staticmethod(dial))
    async with env() as (e, _client):
        e.pods(pool_uid=OLD_UID)
        await synced(e)
        with pytest.raises(DialError) as err:
            await e.srv._pool_port_forward(StreamRoute("portforward", NS, "web-0"))
        assert dialed == [], "kubectl port-forward web-0 reached the earlier pod"
        assert err.value.status == 404
