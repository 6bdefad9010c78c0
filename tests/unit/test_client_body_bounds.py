"""Pool response bodies and watch lines are read with a size bound (issue 35, confirm or refute).

Real HTTPS over loopback: an aiohttp server plays a broken or hostile API server that sends a body or
a watch line without end (slowly: the old client would read it until the test's timeout, not forever).
The bounds are lowered to 1 MiB here; in production they are MAX_BODY_BYTES and MAX_WATCH_LINE_BYTES.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import AsyncIterator

import orjson
import pytest
from aiohttp import web

from e2e.pki import CertAuthority, load_cert_chain
from vkbridge.kube import client as kclient
from vkbridge.kube.client import PODS, ApiError, KubeClient, TransportError
from vkbridge.kube.kubeconfig import Credentials

LIMIT = 2**20
CHUNK = 64 * 1024
EVENT = orjson.dumps({"type": "ADDED", "object": {"metadata": {"name": "a", "resourceVersion": "2"}}})


async def endless(request: web.Request) -> web.StreamResponse:
    """200, then ``x`` forever at ~6 MiB/s (a watch gets one good event line first)."""
    resp = web.StreamResponse(headers={"Content-Type": "application/json"})
    await resp.prepare(request)
    if request.query.get("watch") == "true":
        await resp.write(EVENT + b"\n")
    while True:
        await resp.write(b"x" * CHUNK)
        await asyncio.sleep(0.01)


async def declared(request: web.Request) -> web.Response:
    """A well-formed list whose Content-Length says it is over the bound."""
    return web.Response(
        body=orjson.dumps({"items": [], "pad": "x" * (2 * LIMIT)}), content_type="application/json"
    )


@pytest.fixture
async def api(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[KubeClient]:
    monkeypatch.setattr(kclient, "MAX_BODY_BYTES", LIMIT, raising=False)
    monkeypatch.setattr(kclient, "MAX_WATCH_LINE_BYTES", LIMIT, raising=False)
    ca = CertAuthority.create("test-ca")
    issued = ca.issue("127.0.0.1", server=True, ips=["127.0.0.1"])
    assert issued.key_pem is not None
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    load_cert_chain(ctx, issued.cert_pem, issued.key_pem)
    app = web.Application()
    app.router.add_get("/api/v1/pods", endless)
    app.router.add_get("/api/v1/namespaces/big/pods", declared)
    runner = web.AppRunner(app, shutdown_timeout=0.1)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = runner.addresses[0][1]
    client = KubeClient(
        Credentials(server=f"https://127.0.0.1:{port}", ca_pem=ca.cert_pem, token="t"), name="pool"
    )
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


async def test_a_response_body_without_end_is_refused_past_the_bound(api: KubeClient) -> None:
    with pytest.raises(ApiError) as err:
        await asyncio.wait_for(api.request("GET", "/api/v1/pods", timeout=30), 5.0)
    assert err.value.reason == "ResponseTooLarge" and not isinstance(err.value, TransportError)


async def test_a_response_whose_content_length_is_over_the_bound_is_refused_unread(api: KubeClient) -> None:
    with pytest.raises(ApiError) as err:
        await asyncio.wait_for(api.request("GET", "/api/v1/namespaces/big/pods"), 5.0)
    assert err.value.reason == "ResponseTooLarge"


async def test_a_watch_line_without_end_ends_the_watch_after_the_events_before_it(api: KubeClient) -> None:
    got = []

    async def read() -> None:
        async for ev in api.watch(PODS, resource_version="1"):
            got.append(ev)

    with pytest.raises(TransportError, match="event line over"):
        await asyncio.wait_for(read(), 5.0)
    assert [ev["object"]["metadata"]["name"] for ev in got] == ["a"]
