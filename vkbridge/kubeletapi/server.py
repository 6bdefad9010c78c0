"""The kubelet HTTPS API of the virtual node: what kube-apiserver calls for logs, exec, attach, stats.

One TLS port serves two stacks: ``Sniffer`` sends SPDY/3.1 upgrades (kube-apiserver's translation of
kubectl's WebSocket exec, technotes §0) to our SPDY code and everything else to aiohttp. Requests are
authenticated and authorized like a kubelet in Webhook mode before any routing. Streams are relayed
to the pool API server's ``pods/exec``/``pods/attach`` over WebSocket ``v5.channel.k8s.io``, or over
SPDY/3.1 where the pool forbids that (Liqo's pool role); logs are streamed chunk by chunk from
``pods/log``; port-forward sessions are relayed pair by pair to ``pods/portforward`` (streams/portforward.py).

Until a serving certificate exists the port is closed, and the reason is logged every minute (the
silent wait of LIQO issue #241 cost days to diagnose).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Final

from aiohttp import web
from prometheus_client import generate_latest

from reflectors.forge import constants as c
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import PODS, ApiError, KubeClient, is_transport_failure
from vkbridge.kube.health import HealthChecks
from vkbridge.kubeletapi import promtext
from vkbridge.kubeletapi.auth import KubeletAuth
from vkbridge.kubeletapi.clientca import ClientCAFollower
from vkbridge.kubeletapi.sniffer import Sniffer
from vkbridge.kubeletapi.stats import PodRefs, StatsProvider
from vkbridge.kubeletapi.streams import pfserve, rawhttp
from vkbridge.kubeletapi.streams.channels import (
    PORTFORWARD,
    SPDY_PROTOCOLS,
    V1,
    WS_PROTOCOLS,
    ChannelError,
    StreamOptions,
    negotiate,
    split_protocols,
)
from vkbridge.kubeletapi.streams.pooldial import DialError, PoolDialer
from vkbridge.kubeletapi.streams.poolstream import PoolStream
from vkbridge.kubeletapi.streams.portforward import PoolPortForward, SpdyPortForward
from vkbridge.kubeletapi.streams.relay import ExecFront, relay
from vkbridge.kubeletapi.streams.route import StreamRoute, StreamService, not_reflected, stream_route
from vkbridge.kubeletapi.streams.spdyconn import SpdyConnection, SpdyExecFront, StreamSetTimeout
from vkbridge.kubeletapi.streams.wsfront import FrontWebSocket, WsExecFront
from vkbridge.kubeletapi.tls import ServingCertificate, ServingTLS
from vkbridge.logs import get_logger
from vkbridge.metrics import Metrics, kubelet_api_path

__all__ = ["KubeletServer"]

log = get_logger("vkbridge.kubeletapi")

CERT_POLL_SECONDS: Final = 2.0
CERT_LOG_EVERY: Final = 60.0
SSL_SHUTDOWN_TIMEOUT: Final = 5.0
LOG_PARAMS: Final = (
    "follow",
    "previous",
    "sinceSeconds",
    "sinceTime",
    "timestamps",
    "tailLines",
    "limitBytes",
    "stream",
)
_NOT_FOUND: Final = "404 page not found\n"
_NO_CADVISOR: Final = (
    "vkbridge virtual node: no cAdvisor here. The containers run on the pool's workers, whose cAdvisor\n"
    "metrics this node's identity may not read; scrape the pool's kubelets for them. Container CPU and\n"
    "memory of this node's pods are on /metrics/resource when the pool serves metrics.k8s.io."
)
_NO_PROBES: Final = (
    "vkbridge virtual node: no prober here. Probes run on the pool's kubelets; their results reach this\n"
    "cluster only as the pods' Ready conditions (prober_probe_total is on the pool's /metrics/probes)."
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class KubeletServer:
    """The kubelet API of one virtual node; ``start()``/``stop()`` own every task and connection.

    ``serving_certificate`` is called on every TLS handshake, so it must return a cached object (a new
    one means "rotated"); None means "no certificate yet". Each context built from it verifies client
    certificates against ``client_ca_pem`` alone; ``client_ca_configmap`` (``namespace/name``) is then
    followed and each new bundle in it trusted instead, without a restart (kubeletapi.tls).
    ``remote_namespace`` maps a local namespace to its pool namespace (None: not reflected);
    ``local_pods`` is the cache of the pods bound to our node: only those can be reached, as a kubelet
    serves only its own pods.
    ``metrics`` is vkbridge's registry, served on ``/metrics`` with the kubelet gauges of this node.
    ``authorize=False`` admits every request and exists for tests only.
    """

    def __init__(
        self,
        home: KubeClient,
        pool: KubeClient,
        *,
        node_name: str,
        listen_host: str = "0.0.0.0",
        port: int,
        serving_certificate: Callable[[], ServingCertificate | None],
        client_ca_pem: bytes | None,
        remote_namespace: Callable[[str], str | None],
        local_pods: Cache,
        authorize: bool = True,
        healthz: HealthChecks | None = None,
        client_ca_configmap: str | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.node_name = node_name
        self._healthz_checks = healthz
        self._host = listen_host
        self._port = port
        self._pool = pool
        self._remote_namespace = remote_namespace
        self._local_pods = local_pods
        self.auth = KubeletAuth(home, node_name, enabled=authorize)
        if not authorize:
            log.warning("kubelet API authorization is DISABLED: anyone reaching the port can exec")
        self._dialer = PoolDialer(pool)
        self._streams = StreamService(pool, self._dialer, remote_namespace)
        self._metrics = metrics
        self._pod_refs = PodRefs(local_pods)
        self._stats = StatsProvider(pool, node_name, remote_namespace, self._pod_refs.entries)
        self.tls = ServingTLS(serving_certificate, client_ca_pem)
        self._client_ca = None
        if client_ca_configmap is not None:  # "namespace/name": followed, each new CA trusted at once
            namespace, _, name = client_ca_configmap.partition("/")
            self._client_ca = ClientCAFollower(home, self.tls.set_client_ca, namespace=namespace, name=name)
        self._client_ca_task: asyncio.Task[None] | None = None
        self._runner: web.AppRunner | None = None
        self._server: asyncio.Server | None = None
        self._waiter: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._spdy_conns: set[SpdyConnection] = set()
        self._sniffing: set[Sniffer] = set()
        self._serving = asyncio.Event()
        self.stream_protocols: Counter[str] = Counter()  # "spdy/v5.channel.k8s.io", "websocket/..."
        self.active_log_streams = 0
        self.active_exec_sessions = 0
        self.active_port_forwards = 0

    # ------------------------------------------------------------------------------------------ lifecycle

    @property
    def port(self) -> int:
        """The bound port once listening (the real one when configured with 0), else the configured."""
        if self._server is not None and self._server.sockets:
            return int(self._server.sockets[0].getsockname()[1])
        return self._port

    @property
    def serving(self) -> bool:
        return self._serving.is_set()

    async def wait_serving(self, timeout: float | None = None) -> None:
        async with asyncio.timeout(timeout):
            await self._serving.wait()

    async def start(self) -> None:
        """Prepare the handlers and listen, or start waiting for a serving certificate (non-blocking)."""
        runner = web.AppRunner(self._app(), handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        self._runner = runner
        if self._client_ca is not None:
            self._client_ca_task = asyncio.create_task(self._client_ca.run(), name="kubelet-api-client-ca")
        if self.tls.current() is not None:
            await self._listen()
        else:
            self._waiter = asyncio.create_task(self._wait_for_certificate(), name="kubelet-api-cert")

    async def stop(self) -> None:
        for task in (self._waiter, self._client_ca_task):
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._waiter = self._client_ca_task = None
        if self._server is not None:
            self._server.close()
        for sniffer in list(self._sniffing):  # idle connections that never sent a request
            sniffer.close()
        for t in list(self._tasks):  # sessions tell their clients they were interrupted, then close
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for conn in list(self._spdy_conns):
            conn.close(goaway=True)
        if self._spdy_conns:  # each closes, or is aborted after ABORT_AFTER
            waits = [asyncio.ensure_future(c.closed.wait()) for c in self._spdy_conns]
            _, pending = await asyncio.wait(waits, timeout=2.0)
            for w in pending:
                w.cancel()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._server is not None:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(2.0):
                    await self._server.wait_closed()
            self._server = None
        self._serving.clear()
        await self._dialer.close()

    async def _wait_for_certificate(self) -> None:
        """Until a serving certificate exists. Every start waits for one (a CSR round trip, usually a
        second): INFO then; a WARNING only once the wait has lasted ``CERT_LOG_EVERY``, and every
        ``CERT_LOG_EVERY`` after, so a healthy start logs no WARNING (issue 36 point 2)."""
        started = last_log = time.monotonic()
        if self.tls.current() is None:
            log.info("kubelet API waits for its serving certificate", node=self.node_name, port=self._port)
        while self.tls.current() is None:
            now = time.monotonic()
            if now - last_log >= CERT_LOG_EVERY:
                last_log = now
                log.warning(
                    "kubelet API not listening: no serving certificate available yet "
                    "(kubectl logs/exec on this node fail until one is issued; check the CSR approval)",
                    node=self.node_name,
                    port=self._port,
                    waited_seconds=round(now - started),
                )
            await asyncio.sleep(CERT_POLL_SECONDS)
        delay = 1.0
        while True:
            try:
                await self._listen()
                return
            except OSError as exc:  # e.g. the port is still taken: keep trying, capped backoff
                log.error(
                    "kubelet API cannot listen; retrying", port=self._port, error=str(exc), retry_in=delay
                )
                await asyncio.sleep(delay)
                delay = min(delay * 2, 30.0)

    async def _listen(self) -> None:
        assert self._runner is not None and self._runner.server is not None
        http_factory = self._runner.server
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(
            lambda: Sniffer(http_factory, self._spdy_entry, live=self._sniffing),
            self._host,
            self._port,
            ssl=self.tls.listener_context(),
            reuse_address=True,
            ssl_shutdown_timeout=SSL_SHUTDOWN_TIMEOUT,
        )
        self._serving.set()
        log.info("kubelet API listening", node=self.node_name, address=f"{self._host}:{self.port}")

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> None:
        task = asyncio.create_task(coro, name=name)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------------------------------ aiohttp

    def _app(self) -> web.Application:
        app = web.Application(middlewares=[self._auth_middleware], client_max_size=1024**2)
        r = app.router
        r.add_get("/healthz", self._healthz)
        r.add_get("/pods", self._pods)
        r.add_get("/runningpods", self._running_pods)  # client-go's spelling
        r.add_get("/runningpods/", self._running_pods)
        r.add_get("/stats/summary", self._summary)
        r.add_get("/stats/summary/", self._summary)
        r.add_get("/metrics", self._metrics_own)
        r.add_get("/metrics/resource", self._metrics_resource)
        r.add_get("/metrics/cadvisor", self._metrics_cadvisor)
        r.add_get("/metrics/probes", self._metrics_probes)
        r.add_get("/containerLogs/{ns}/{pod}/{container}", self._container_logs)
        for method in ("GET", "POST"):
            for prefix in ("/exec", "/attach"):
                r.add_route(method, prefix + "/{ns}/{pod}/{container}", self._ws_stream)
                r.add_route(method, prefix + "/{ns}/{pod}/{uid}/{container}", self._ws_stream)
            r.add_route(method, "/portForward/{ns}/{pod}", self._port_forward)
            r.add_route(method, "/portForward/{ns}/{pod}/{uid}", self._port_forward)
        return app

    def _count(self, path: str, status: int) -> None:
        """vkbridge_kubelet_api_requests_total: one request to this API, by path and status."""
        if self._metrics is not None:
            self._metrics.kubelet_api_requests.labels(kubelet_api_path(path), str(status)).inc()

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        transport = request.transport
        peercert = transport.get_extra_info("peercert") if transport is not None else None
        result = await self.auth.check(
            request.method, request.path, peercert, request.headers.get("Authorization")
        )
        if not result.ok:
            self._count(request.path, result.status)
            return web.Response(status=result.status, text=result.message)
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            self._count(request.path, status)

    async def _healthz(self, request: web.Request) -> web.Response:
        """The process's liveness checks, as on the metrics port (a kubelet serves /healthz here too)."""
        if self._healthz_checks is None:
            return web.Response(text="ok")
        status, text = self._healthz_checks.render(verbose="verbose" in request.query)
        return web.Response(status=status, text=text)

    async def _pods(self, request: web.Request) -> web.Response:
        # The cache's JSON as is: decoding 10,000 compact pods to encode them again takes ~1 s of the loop.
        body = b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[%s]}' % b",".join(
            self._local_pods.list_json()
        )
        return web.Response(body=body, content_type="application/json")

    async def _running_pods(self, request: web.Request) -> web.Response:
        """What runs on the pool (a kubelet lists its runtime's pods): not the pods held back or finished."""
        running = (self._local_pods.get_json(key) for key in self._pod_refs.running_keys())
        blobs = [b for b in running if b is not None]
        body = b'{"kind":"PodList","apiVersion":"v1","metadata":{},"items":[%s]}' % b",".join(blobs)
        return web.Response(body=body, content_type="application/json")

    def _unknown_pod(self, namespace: str, pod: str, uid: str = "") -> str | None:
        """Why ``namespace/pod`` (with ``uid`` when the path names one) is not ours to reach, else None.

        A kubelet serves only the pods bound to it, and answers 404 for any other: the pool namespace
        may also hold other virtual nodes' pods, or pods nobody reflected.
        """
        local = self._local_pods.get(f"{namespace}/{pod}")
        if local is None or (local.get("spec") or {}).get("nodeName") != self.node_name:
            return f'pods "{pod}" not found on node {self.node_name}'
        if uid and (local.get("metadata") or {}).get("uid") != uid:
            return f'pods "{pod}" with UID {uid} not found on node {self.node_name}'
        return None

    def _pool_namespace(self, namespace: str, pod: str, uid: str = "") -> str:
        """The pool namespace of a pod bound to us; DialError 404 for another pod or one not reflected."""
        if (unknown := self._unknown_pod(namespace, pod, uid)) is not None:
            raise DialError(404, unknown)  # the kubelet looks the pod up first
        remote = self._remote_namespace(namespace)
        if remote is None:
            raise DialError(404, not_reflected(namespace, pod))
        return remote

    async def _check_pool_pod(self, namespace: str, pod: str, remote: str) -> None:
        """DialError 404 unless the pool pod of that name is this local pod's. After a same-name re-creation
        (StatefulSet ``web-0`` after a force delete) the earlier pod may still terminate on the pool under
        that name: its logs and shell are not this pod's. The provider copies the ShadowPod's annotations,
        the local pod's UID among them, onto the pool pod; one without it (Liqo's VK made it) is served.
        A pool pod that is not there is left to the dial, which answers as before."""
        local = self._local_pods.get(f"{namespace}/{pod}")
        uid = str(((local or {}).get("metadata") or {}).get("uid") or "")
        try:
            found = await self._pool.get(PODS, pod, remote)
        except ApiError as exc:
            if exc.not_found:
                return
            raise DialError(
                exc.status if 400 <= exc.status < 600 else 502, exc.message or exc.reason
            ) from None
        recorded = ((found.get("metadata") or {}).get("annotations") or {}).get(c.LOCAL_POD_UID_ANNOTATION)
        if recorded and recorded != uid:
            log.info("pool pod of that name belongs to an earlier pod: not reached", pod=f"{namespace}/{pod}")
            raise DialError(
                404,
                f'pods "{pod}" with UID {uid} not found on node {self.node_name}: '
                "the pool still runs an earlier pod of that name",
            )

    async def _check_stream_pod(self, route: StreamRoute) -> None:
        """`_check_pool_pod` before an exec/attach dial (a namespace not reflected is the dial's 404)."""
        remote = self._remote_namespace(route.namespace)
        if remote is not None:
            await self._check_pool_pod(route.namespace, route.pod, remote)

    async def _summary(self, request: web.Request) -> web.Response:
        return web.json_response(await self._stats.summary())

    async def _metrics_own(self, request: web.Request) -> web.Response:
        """vkbridge's registry and the kubelet gauges this node can honestly give (promtext)."""
        own = generate_latest(self._metrics.registry) if self._metrics is not None else b""
        gauges = promtext.render(promtext.kubelet_gauges(self.node_name, self._pod_refs.entries()))
        return _exposition(own + gauges)

    async def _metrics_resource(self, request: web.Request) -> web.Response:
        collected = await self._stats.collect()
        return _exposition(promtext.resource_metrics(collected.summary, scrape_error=collected.error))

    async def _metrics_cadvisor(self, request: web.Request) -> web.Response:
        return _exposition(promtext.comment_only(_NO_CADVISOR))

    async def _metrics_probes(self, request: web.Request) -> web.Response:
        return _exposition(promtext.comment_only(_NO_PROBES))

    async def _port_forward(self, request: web.Request) -> web.StreamResponse:
        route = stream_route(request.path)
        if route is None:
            return web.Response(status=404, text=_NOT_FOUND)
        try:
            self._pool_namespace(route.namespace, route.pod, route.uid)
        except DialError as exc:
            return web.Response(status=exc.status, text=exc.message + "\n")
        return await pfserve.websocket(request, route, self._pool_port_forward)

    async def _pool_port_forward(self, route: StreamRoute) -> PoolPortForward:
        """The pool's ``pods/portforward`` of a pod bound to us; DialError with the HTTP answer."""
        remote = self._pool_namespace(route.namespace, route.pod, route.uid)
        await self._check_pool_pod(route.namespace, route.pod, remote)
        return await PoolPortForward.dial(self._dialer, PODS.path(remote, route.pod, "portforward"))

    async def _spdy_port_forward(
        self, conn: SpdyConnection, head: rawhttp.RequestHead, route: StreamRoute,
        refuse: Callable[[int, str], None],
    ) -> None:  # fmt: skip
        offered = split_protocols(head.header_all("x-stream-protocol-version"))
        if offered and PORTFORWARD not in offered:
            return refuse(
                403, f"unable to upgrade: client supports {offered}, server accepts {[PORTFORWARD]}\n"
            )
        try:
            pool = await self._pool_port_forward(route)
        except DialError as exc:
            return refuse(exc.status, exc.message + "\n")
        headers = [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")]
        if offered:
            headers.append(("X-Stream-Protocol-Version", PORTFORWARD))
        session = SpdyPortForward(conn, pool, _ref(route))
        self._count(head.path, 101)
        conn.write_raw(rawhttp.response(101, headers=tuple(headers)))
        conn.start_framing()
        self.stream_protocols[f"spdy/{PORTFORWARD}"] += 1
        self.active_port_forwards += 1
        try:
            outcome = await session.run()
        finally:
            self.active_port_forwards -= 1
        log.info("port-forward ended", pod=_ref(route), transport="spdy", connections=session.pairs,
                 outcome=outcome)  # fmt: skip

    async def _container_logs(self, request: web.Request) -> web.StreamResponse:
        ns, pod = request.match_info["ns"], request.match_info["pod"]
        try:
            remote = self._pool_namespace(ns, pod)
            await self._check_pool_pod(ns, pod, remote)
        except DialError as exc:
            return web.Response(status=exc.status, text=exc.message)
        params: dict[str, str] = {"container": request.match_info["container"]}
        params.update({k: request.query[k] for k in LOG_PARAMS if k in request.query})
        if "tail" in request.query and "tailLines" not in params and request.query["tail"] != "all":
            params["tailLines"] = request.query["tail"]  # the kubelet's legacy spelling
        follow = params.get("follow", "").lower() in ("true", "1")
        path = PODS.path(remote, pod, "log")
        self.active_log_streams += 1
        try:
            async with self._pool.stream("GET", path, params, timeout=None if follow else 60.0) as upstream:
                resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
                await resp.prepare(request)
                try:
                    async for chunk in upstream.content.iter_any():
                        await resp.write(chunk)
                except Exception as exc:
                    if not is_transport_failure(exc):
                        raise
                    reason = f"{type(exc).__name__}: {exc}"
                    log.info("log stream ended early", pod=f"{ns}/{pod}", reason=reason)
                    return resp
                await resp.write_eof()
                return resp
        except ApiError as exc:
            status = exc.status if 400 <= exc.status < 600 else 502
            return web.Response(status=status, text=exc.message or exc.reason)
        finally:
            self.active_log_streams -= 1

    async def _ws_stream(self, request: web.Request) -> web.StreamResponse:
        route = stream_route(request.path)
        if route is None:
            return web.Response(status=404, text=_NOT_FOUND)
        if not web.WebSocketResponse(protocols=WS_PROTOCOLS).can_prepare(request).ok:
            return web.Response(
                status=400, text="unable to upgrade: a WebSocket or SPDY/3.1 upgrade request is required\n"
            )
        offered = split_protocols(request.headers.getall("Sec-WebSocket-Protocol", []))
        protocol = negotiate(offered, WS_PROTOCOLS) if offered else V1
        if protocol is None:
            return web.Response(
                status=400, text=f"unable to negotiate a stream protocol: client offered {offered}\n"
            )
        try:
            opts = StreamOptions.from_query(
                request.query.get, request.query.getall, exec_=route.kind == "exec"
            )
        except ChannelError as exc:
            return web.Response(status=400, text=f"{exc}\n")
        if (unknown := self._unknown_pod(route.namespace, route.pod, route.uid)) is not None:
            return web.Response(status=404, text=unknown + "\n")
        try:
            await self._check_stream_pod(route)
            pool_stream = await self._streams.open(route, opts)
        except DialError as exc:
            return web.Response(status=exc.status, text=exc.message + "\n")
        try:
            ws = FrontWebSocket(protocols=(protocol,) if offered else ())
            await ws.prepare(request)
            front = WsExecFront(ws, protocol, opts, request.transport)
            await front.start()
        except BaseException:
            await pool_stream.close()
            raise
        await self._relay_exec(route, "websocket", protocol, front, pool_stream)
        return ws

    # ------------------------------------------------------------------------------------------ SPDY

    def _spdy_entry(self, transport: asyncio.Transport, head: bytes, rest: bytes) -> None:
        conn = SpdyConnection()
        conn.on_lost = lambda: self._spdy_conns.discard(conn)
        transport.set_protocol(conn)
        conn.connection_made(transport)
        if rest:
            conn.data_received(rest)
        self._spdy_conns.add(conn)
        peercert = transport.get_extra_info("peercert")
        self._spawn(self._serve_spdy(conn, head, peercert), "kubelet-api-spdy")

    async def _serve_spdy(self, conn: SpdyConnection, raw_head: bytes, peercert: Any) -> None:
        try:
            await self._spdy_session(conn, raw_head, peercert)
        except Exception:
            log.exception("SPDY stream failed")
        finally:
            conn.close()  # idempotent; also covers cancellation before the relay took over

    async def _spdy_session(self, conn: SpdyConnection, raw_head: bytes, peercert: Any) -> None:
        def refuse(status: int, text: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
            self._count(path, status)
            conn.write_raw(rawhttp.response(status, text, headers))
            conn.close()

        path = raw_head.split(b" ", 2)[1].decode("latin-1") if raw_head.count(b" ") >= 2 else ""

        try:
            head = rawhttp.parse_head(raw_head)
        except rawhttp.BadRequest as exc:
            return refuse(400, f"{exc}\n")
        result = await self.auth.check(head.method, head.path, peercert, head.header("authorization"))
        if not result.ok:
            return refuse(result.status, result.message)
        route = stream_route(head.path)
        if route is None or head.method not in ("GET", "POST"):
            return refuse(404, _NOT_FOUND)
        if route.kind == "portforward":
            return await self._spdy_port_forward(conn, head, route, refuse)
        offered = head.header_all("x-stream-protocol-version")
        if not offered:
            return refuse(400, "unable to upgrade: header X-Stream-Protocol-Version does not exist\n")
        protocol = negotiate(offered, SPDY_PROTOCOLS)
        log.debug("SPDY upgrade", path=head.path, method=head.method, offered=",".join(offered))
        if protocol is None:
            accepted = tuple(("X-Accepted-Stream-Protocol-Versions", p) for p in SPDY_PROTOCOLS)
            return refuse(
                403,
                f"unable to upgrade: unable to negotiate protocol: client supports "
                f"{split_protocols(offered)}, server accepts {list(SPDY_PROTOCOLS)}\n",
                accepted,
            )
        try:
            opts = StreamOptions.from_query(head.param, head.params, exec_=route.kind == "exec")
        except ChannelError as exc:
            return refuse(400, f"{exc}\n")
        if (unknown := self._unknown_pod(route.namespace, route.pod, route.uid)) is not None:
            return refuse(404, unknown + "\n")
        try:
            await self._check_stream_pod(route)
            pool_stream = await self._streams.open(route, opts)
        except DialError as exc:
            return refuse(exc.status, exc.message + "\n")
        try:
            self._count(head.path, 101)
            conn.write_raw(
                rawhttp.response(
                    101,
                    headers=(
                        ("Connection", "Upgrade"),
                        ("Upgrade", "SPDY/3.1"),
                        ("X-Stream-Protocol-Version", protocol),
                    ),
                )
            )
            conn.start_framing()
            await conn.wait_streams(opts.spdy_streams(protocol))
        except (StreamSetTimeout, ConnectionError) as exc:
            log.warning("exec: the API server did not open its streams", pod=_ref(route), error=str(exc))
            await pool_stream.close()
            conn.close(goaway=True)
            return None
        except BaseException:
            await pool_stream.close()
            raise
        await self._relay_exec(route, "spdy", protocol, SpdyExecFront(conn, protocol), pool_stream)
        return None

    async def _relay_exec(
        self, route: StreamRoute, front_kind: str, protocol: str, front: ExecFront, pool_stream: PoolStream
    ) -> None:
        """One exec/attach session relayed, counted while it runs (both fronts alike), and its end logged."""
        self.stream_protocols[f"{front_kind}/{protocol}"] += 1
        self.active_exec_sessions += 1
        try:
            outcome = await relay(front, pool_stream)
        finally:
            self.active_exec_sessions -= 1
        transport = f"{front_kind}->{pool_stream.transport}"
        _log_stream(route, transport, protocol, outcome.exit_code, outcome.status is None)


def _exposition(body: bytes) -> web.Response:
    resp = web.Response(body=body)
    resp.headers["Content-Type"] = promtext.CONTENT_TYPE
    return resp


def _ref(route: StreamRoute) -> str:
    return f"{route.namespace}/{route.pod}"


def _log_stream(route: StreamRoute, transport: str, protocol: str, code: int | None, left: bool) -> None:
    log.info(
        f"{route.kind} ended",
        pod=_ref(route),
        container=route.container,
        transport=transport,
        protocol=protocol,
        outcome="client left" if left else ("exit " + str(code) if code is not None else "error"),
    )
