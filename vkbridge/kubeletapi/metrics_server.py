"""Prometheus ``/metrics`` and the probe endpoints on a separate plain-HTTP port, served from start.

One class for both ports vkbridge may open: ``--metrics-address`` (metrics and probes, with
``--metrics-enabled``) and ``--health-probe-bind-address`` (the probes only, always; one server when the
two addresses are the same). ``/leaderz`` says whether this replica holds the leader Lease: its own
endpoint, because readiness must not require it (a standby that can take over is ready, or every
RollingUpdate with a readiness probe waits for the Lease the old pod holds).

``/livez`` (and ``/healthz``, its older name), ``/readyz`` and ``/leaderz`` answer as Kubernetes components
do: 200 "ok", or the failing status with one ``[+]name ok`` / ``[-]name failed: reason`` line per named check;
``?verbose`` lists the checks on success too, ``?exclude=<name>`` leaves one out, ``/readyz/<name>``
runs one. Liveness is about this process only (event loop, long-lived tasks), never about the pool:
restarting the virtual kubelet never brings a lost pool back.
"""

from __future__ import annotations

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from vkbridge.kube.health import HealthChecks
from vkbridge.logs import get_logger
from vkbridge.metrics import Metrics

__all__ = ["MetricsServer"]

log = get_logger("vkbridge.kubeletapi.metrics")


class MetricsServer:
    def __init__(
        self,
        metrics: Metrics,
        host: str,
        port: int,
        *,
        livez: HealthChecks,
        readyz: HealthChecks,
        leaderz: HealthChecks | None = None,
        serve_metrics: bool = True,
    ) -> None:
        self._metrics = metrics
        self._host = host
        self._port = port
        self._checks = {"healthz": livez, "livez": livez, "readyz": readyz}
        if leaderz is not None:
            self._checks["leaderz"] = leaderz
        self._serve_metrics = serve_metrics
        self._runner: web.AppRunner | None = None

    @property
    def port(self) -> int:
        """The bound port (the real one when constructed with 0 and started)."""
        if self._runner is not None and self._runner.addresses:
            return int(self._runner.addresses[0][1])
        return self._port

    def app(self) -> web.Application:
        app = web.Application()
        if self._serve_metrics:
            app.router.add_get("/metrics", self._scrape)
        for endpoint in self._checks:
            app.router.add_get(f"/{endpoint}", self._probe)
            app.router.add_get(f"/{endpoint}/{{check}}", self._probe)
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
        address = f"{self._host}:{self.port}"
        if self._serve_metrics:
            log.info("metrics and health endpoints listening", address=address)
        else:
            log.info("health endpoints listening", address=address)

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    async def _scrape(self, request: web.Request) -> web.Response:
        body = generate_latest(self._metrics.registry)
        resp = web.Response(body=body)
        resp.headers["Content-Type"] = CONTENT_TYPE_LATEST
        return resp

    async def _probe(self, request: web.Request) -> web.Response:
        checks = self._checks[request.path.strip("/").split("/", 1)[0]]
        name = request.match_info.get("check")
        if name is not None:
            status, text = checks.render_one(name)
        else:
            status, text = checks.render(
                verbose="verbose" in request.query, exclude=request.query.getall("exclude", [])
            )
        if status != 200 and checks.endpoint == "livez":  # the log says why, before the kubelet restarts us
            failed = "; ".join(line for line in text.splitlines() if line.startswith("[-]"))
            log.warning("liveness check failing", path=request.path, failed=failed or text.strip())
        return web.Response(status=status, text=text)
