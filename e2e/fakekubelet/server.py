"""The kubelet HTTPS API of one fake node: /healthz, /pods, /containerLogs and /exec (WebSocket or SPDY/3.1).

The TLS server requests but does not require a client certificate (technotes section 2); the fake does no
authorization, since only the test's API server can reach 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from typing import Any

from aiohttp import web

from e2e.pki import load_cert_chain

from .execspdy import SPDY_PROTOCOLS, RequestHead, Sniffer, SpdyChannels, wanted_streams
from .execws import PROTOCOLS, ExecRequest, ExecSession, WsChannels
from .podlogs import parse_query
from .pods import ContainerNotAvailable, PodRuntime
from .registry import PodRegistry
from .runtime import GroupTracker

log = logging.getLogger(__name__)


def server_ssl_context(cert_pem: bytes, key_pem: bytes, client_ca_pem: bytes | None) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    load_cert_chain(ctx, cert_pem, key_pem)
    if client_ca_pem:
        ctx.load_verify_locations(cadata=client_ca_pem.decode())
        ctx.verify_mode = ssl.CERT_OPTIONAL
    return ctx


class KubeletServer:
    def __init__(self, node: str, registry: PodRegistry, tracker: GroupTracker) -> None:
        self.node = node
        self.registry = registry
        self.tracker = tracker
        self.port = 0
        self.spdy_sessions = 0
        self._runner: web.AppRunner | None = None
        self._spdy_tasks: set[asyncio.Task[None]] = set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/pods", self.pods)
        app.router.add_get("/containerLogs/{ns}/{pod}/{container}", self.container_logs)
        for method in ("GET", "POST"):
            app.router.add_route(method, "/exec/{ns}/{pod}/{container}", self.exec)
            app.router.add_route(method, "/attach/{ns}/{pod}/{container}", self.unsupported)
            app.router.add_route(method, "/portForward/{ns}/{pod}", self.unsupported)
        return app

    async def start(self, ssl_ctx: ssl.SSLContext, host: str = "127.0.0.1", port: int = 0) -> int:
        self._runner = web.AppRunner(self.app(), handler_cancellation=True, access_log=None)
        await self._runner.setup()
        site = SniffingSite(self._runner, host, port, ssl_context=ssl_ctx, on_spdy=self.spdy_exec)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self.port

    async def close(self) -> None:
        for task in list(self._spdy_tasks):
            task.cancel()
        await asyncio.gather(*self._spdy_tasks, return_exceptions=True)
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def _pod(self, request: web.Request) -> PodRuntime:
        ns = request.match_info["ns"]
        name = request.match_info["pod"]
        rt = self.registry.lookup(self.node, ns, name)
        if rt is None:
            raise web.HTTPNotFound(text=f'pod "{ns}/{name}" does not exist\n')
        return rt

    async def healthz(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def pods(self, request: web.Request) -> web.Response:
        items = [rt.pod for rt in self.registry.on_node(self.node)]
        return web.json_response({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items})

    async def container_logs(self, request: web.Request) -> web.StreamResponse:
        rt = self._pod(request)
        try:
            query = parse_query(dict(request.query))
            logfile = rt.container_log(request.match_info["container"], query.previous)
        except (ValueError, ContainerNotAvailable) as exc:
            raise web.HTTPBadRequest(text=f"{exc}\n") from exc
        resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
        await resp.prepare(request)
        if logfile is not None:
            async for chunk in logfile.read(query):
                await resp.write(chunk)
        await resp.write_eof()
        return resp

    async def exec(self, request: web.Request) -> web.StreamResponse:
        rt = self._pod(request)
        name = request.match_info["container"]
        try:
            st = rt.state_of(name)
        except ContainerNotAvailable as exc:
            raise web.HTTPBadRequest(text=f"{exc}\n") from exc
        if not st.running:
            raise web.HTTPBadRequest(text=f'container "{name}" in pod "{rt.name}" is not running\n')
        commands = request.query.getall("command", [])
        if not commands:
            raise web.HTTPBadRequest(text="you must specify at least one command for the container\n")
        ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True, max_msg_size=0)
        if not ws.can_prepare(request).ok:
            raise web.HTTPBadRequest(text="fake kubelet: exec needs a WebSocket upgrade\n")
        await ws.prepare(request)
        env, cwd = rt.exec_env(name)
        req = ExecRequest.from_query(request.query, list(commands))
        log.info("exec %s/%s/%s %s (protocol %s)", rt.namespace, rt.name, name, req.argv, ws.ws_protocol)
        proto = ws.ws_protocol or ""
        await ExecSession(WsChannels(ws, proto), proto, req, env, cwd, self.tracker).run()
        return ws

    # ---- SPDY/3.1 (the API server passes kubectl's SPDY through; it also speaks it when translating)

    def spdy_exec(self, chan: SpdyChannels, head: RequestHead) -> None:
        task = asyncio.get_running_loop().create_task(self._spdy_exec(chan, head))
        self._spdy_tasks.add(task)
        task.add_done_callback(self._spdy_tasks.discard)

    async def _spdy_exec(self, chan: SpdyChannels, head: RequestHead) -> None:
        parts = head.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "exec":
            return chan.refuse(501, "Not Implemented", "fake kubelet: SPDY is served for exec only\n")
        _, ns, name, container = parts
        rt = self.registry.lookup(self.node, ns, name)
        if rt is None:
            return chan.refuse(404, "Not Found", f'pod "{ns}/{name}" does not exist\n')
        try:
            running = rt.state_of(container).running
        except ContainerNotAvailable as exc:
            return chan.refuse(400, "Bad Request", f"{exc}\n")
        if not running:
            return chan.refuse(400, "Bad Request", f'container "{container}" is not running\n')
        commands = head.query.get("command", [])
        if not commands:
            return chan.refuse(400, "Bad Request", "you must specify at least one command\n")
        offered = head.protocols or [SPDY_PROTOCOLS[-1]]
        proto = next((p for p in offered if p in SPDY_PROTOCOLS), None)
        if proto is None:
            return chan.refuse(403, "Forbidden", f"unable to negotiate a protocol among {offered}\n")
        if not await chan.switch(proto, wanted_streams(head.query, proto)):
            return None
        self.spdy_sessions += 1
        env, cwd = rt.exec_env(container)
        req = ExecRequest.from_query({k: v[0] for k, v in head.query.items()}, list(commands))
        log.info("exec %s/%s/%s %s (SPDY/3.1, protocol %s)", ns, name, container, req.argv, proto)
        await ExecSession(chan, proto, req, env, cwd, self.tracker).run()
        return None

    async def unsupported(self, request: web.Request) -> web.Response:
        return web.Response(status=501, text="fake kubelet: not implemented\n")


class SniffingSite(web.TCPSite):
    """aiohttp's TCP site, but every connection starts with execspdy.Sniffer (SPDY next to HTTP)."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, *, ssl_context: ssl.SSLContext,
                 on_spdy: Any) -> None:  # fmt: skip
        super().__init__(runner, host, port, ssl_context=ssl_context, shutdown_timeout=1)
        self._on_spdy = on_spdy

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with the runner
        http = self._runner.server
        assert http is not None
        self._server = await asyncio.get_running_loop().create_server(
            lambda: Sniffer(http, self._on_spdy), self._host, self._port, ssl=self._ssl_context
        )
