"""Prometheus ``/metrics`` and the probe endpoints on a separate plain-HTTP port.

``/healthz`` and ``/readyz`` both report ``health()``: 200 "ok", or 503 with its reason. Whoever wires
a livenessProbe to it should make ``health()`` about this process, not about the pool: restarting the
virtual kubelet never brings a lost pool back.
"""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from vkbridge.logs import get_logger
from vkbridge.metrics import Metrics

__all__ = ["MetricsServer"]

log = get_logger("vkbridge.kubeletapi.metrics")


class MetricsServer:
    def __init__(
        self, metrics: Metrics, host: str, port: int, health: Callable[[], tuple[bool, str]]
    ) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self._health = health
        self._runner: web.AppRunner | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with 0 and started)."""
        if self._runner is not None and self._runner.addresses:
            return int(self._runner.addresses[0][1])
        return self._port

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/metrics", self._scrape)
        app.router.add_get("/healthz", self._probe)
        app.router.add_get("/readyz", self._probe)
        return app

    async def start(self) -> None:
        runner = web.AppRunner(self.app(), access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
        except BaseException:
            await runner.cleanup()
            raise
        self._runner = runner
        log.info("metrics endpoint listening", address=f"{self._host}:{self.port}")

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def _scrape(self, request: web.Request) -> web.Response:
        body = generate_latest(self._metrics.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    def _check(self) -> tuple[bool, str]:
        try:
            return self._health()
        except Exception as exc:  # a broken check reads as "not ready", never as a crash
            return False, f"health check failed: {type(exc).__name__}: {exc}"

    async def _probe(self, request: web.Request) -> web.Response:
        ok, reason = self._check()
        if ok:
            return web.Response(text=f"ok\n{reason}\n" if reason and "verbose" in request.query else "ok")
        return web.Response(status=503, text=reason or "not ready")
