"""Wiring: clients, caches, the node, the reflection engine, credentials and servers in one TaskGroup.

Start-up order matters only where a later part needs an earlier answer: the consumer API (for our
identity and the kubeconfig Secret), then the pool credential; everything else runs concurrently and
copes with the other side being unavailable. SIGTERM stops every task within seconds and leaves the
Node in place (a restart must not make the customer's pods look lost).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Mapping
from typing import Any, Final

from reflectors.context import ReflectionContext
from reflectors.engine import ReflectionEngine
from reflectors.forge import constants as c
from vkbridge.credentials.remote import (
    KUBECONFIG_REFUSED_REASON,
    RemoteCredentialWatcher,
    credentials_from_secret,
    describe,
)
from vkbridge.credentials.renewal import CertificateRenewer
from vkbridge.credentials.serving import ServingCertificateManager
from vkbridge.grant import Admission, Grant, grant_of
from vkbridge.kube.backoff import Backoff
from vkbridge.kube.cache import Cache
from vkbridge.kube.client import (
    CONFIGMAPS,
    EVENTS,
    NODES,
    RESOURCESLICES,
    SECRETS,
    VIRTUALNODES,
    ApiError,
    KubeClient,
    TransportError,
)
from vkbridge.kube.events import EventRecorder
from vkbridge.kube.health import HealthChecks, LoopWatchdog, TaskWatch
from vkbridge.kube.kubeconfig import (
    Credentials,
    KubeconfigError,
    in_cluster_credentials,
    load_kubeconfig_file,
)
from vkbridge.kube.leaderelection import LeaderElector
from vkbridge.kube.reachability import PoolState, Reachability
from vkbridge.kube.tlsbuffer import limit_tls_read_buffer
from vkbridge.kubeletapi.metrics_server import MetricsServer
from vkbridge.kubeletapi.server import KubeletServer
from vkbridge.logs import get_logger
from vkbridge.metrics import Metrics, node_ready, seconds_until
from vkbridge.node.controller import NodeController
from vkbridge.node.lease import LeaseHeartbeat
from vkbridge.node.model import NodeInputs
from vkbridge.node.pinger import Pinger
from vkbridge.settings import Settings

log = get_logger("vkbridge.app")

SHUTDOWN_GRACE_SECONDS = 4.0


# Retrying the first consumer requests at start: 1 s doubling to 30 s; a WARNING at most every 30 s.
START_RETRY_BASE: Final = 1.0
START_RETRY_CAP: Final = 30.0
START_WARN_INTERVAL: Final = 30.0
WAITING_FOR_LEADERSHIP: Final = "waiting for leadership"


def retryable_at_start(err: ApiError) -> bool:
    """No answer, a 5xx or a 429 at start: the consumer API is not there yet, try again. Anything else is a
    refusal that retrying would not change."""
    return isinstance(err, TransportError) or err.status >= 500 or err.status == 429


class StartupError(Exception):
    """A problem an operator must fix before vkbridge can start; the message says how."""


class LostLeadership(Exception):
    """Another replica leads now: stop writing at once (the process exits and restarts as a standby)."""


class HomeEventWriter:
    """`EventWriter` over the consumer client (events go to the involved object's namespace)."""

    def __init__(self, home: KubeClient) -> None:
        self._home = home

    async def create_event(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        return await self._home.create(EVENTS, body, namespace)

    async def patch_event(self, namespace: str, name: str, patch: dict[str, Any]) -> object:
        return await self._home.patch(EVENTS, name, patch, namespace)


def split_address(address: str, default_port: int) -> tuple[str, int]:
    """`:5872`, `0.0.0.0:8082`, `[::]:80` -> (host, port); an empty host means every interface."""
    host, _, port = address.rpartition(":")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port) if port else default_port


async def client_ca(home: KubeClient) -> bytes | None:
    """The CA kube-apiserver's kubelet client certificate chains to (how kubelets authenticate it)."""
    try:
        cm = await home.get(CONFIGMAPS, "extension-apiserver-authentication", "kube-system")
    except ApiError as err:
        log.warning(
            "cannot read kube-system/extension-apiserver-authentication: the kubelet API accepts bearer "
            "tokens only (kube-apiserver's client certificate cannot be verified)",
            error=str(err)[:200],
        )
        return None
    ca = (cm.get("data") or {}).get("client-ca-file")
    return ca.encode() if ca else None


def home_credentials(settings: Settings) -> Any:
    """The consumer identity (blocking file reads: call it from a thread, never on the loop)."""
    if settings.home_kubeconfig:
        return load_kubeconfig_file(settings.home_kubeconfig)
    return in_cluster_credentials()


class VirtualKubelet:
    """The whole process, as an object tests can run in-process."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.metrics = Metrics()
        self.reach = Reachability()
        self.home: KubeClient | None = None
        self.pool: KubeClient | None = None
        self.engine: ReflectionEngine | None = None
        self.node: NodeController | None = None
        self.ready = asyncio.Event()
        self.elector: LeaderElector | None = None
        self.serving: ServingCertificateManager | None = None
        self.caches: list[Cache] = []
        self.phase = "connecting to the consumer API"
        self.watchdog = LoopWatchdog()
        self.tasks = TaskWatch()
        self.livez = HealthChecks("livez", failure_status=500)
        self.readyz = HealthChecks("readyz")
        self.leaderz = HealthChecks("leaderz")
        self._add_checks()

    def _add_checks(self) -> None:
        """Liveness: this process works (loop, tasks). Readiness: it can serve. A standby can once it has
        reached the consumer API and waits for the Lease; the leader once it has started, its caches are
        synced, the pool's reachability is known (reachable, or knowingly lost: a hibernating pool is
        normal operation, its Node already says NotReady) and it has a kubelet serving certificate.
        Leadership is /leaderz, never a condition of readiness: with it, a RollingUpdate under a
        readiness probe waited for ever (the new pod for the Lease the old, Ready, pod held)."""
        for checks in (self.livez, self.readyz):
            checks.add("ping", lambda: None)
            checks.add("event-loop", self.watchdog.check)
            checks.add("tasks", self.tasks.check)
        self.readyz.add("consumer-api", self._consumer_check)
        self.readyz.add("started", self._started_check)
        self.readyz.add("caches", self._leading_only(self._caches_check))
        self.readyz.add("pool", self._leading_only(self._pool_check))
        self.readyz.add("serving-certificate", self._leading_only(self._serving_check))
        self.leaderz.add("leader", self._leader_check)
        self.metrics.leader.set_function(lambda: float(self._leader_check() is None))

    def _standby(self) -> bool:
        """Waiting for the leader Lease, with everything a leader needs before it (the consumer API)."""
        return self.elector is not None and not self.elector.is_leader and not self.ready.is_set()

    def _leading_only(self, check: Callable[[], str | None]) -> Callable[[], str | None]:
        return lambda: None if self._standby() else check()

    def _consumer_check(self) -> str | None:
        return None if self.home is not None else f"not connected: {self.phase}"

    def _started_check(self) -> str | None:
        if self.ready.is_set() or (self._standby() and self.phase == WAITING_FOR_LEADERSHIP):
            return None
        return f"starting: {self.phase}"

    def _pool_check(self) -> str | None:
        if self.reach.state is PoolState.UNKNOWN:
            return "the pool's reachability is not known yet (first check pending)"
        return None

    def _leader_check(self) -> str | None:
        if not self.settings.vk_lease_enabled:
            return None
        if self.elector is None:
            return "leader election not started"
        if self.elector.is_leader:
            return None
        holder = self.elector.holder or "nobody"
        return f"standby: lease {self.elector.namespace}/{self.elector.name} held by {holder}"

    def _caches_check(self) -> str | None:
        if not self.caches:
            return f"not started: {self.phase}"
        waiting = [f"{c.name} ({c.state})" for c in self.caches if not c.synced]
        return f"not synced: {', '.join(waiting)}" if waiting else None

    def _serving_check(self) -> str | None:
        if self.serving is None:
            return f"not started: {self.phase}"
        if self.serving.current_keypair() is None:
            return f"no kubelet serving certificate yet ({self.settings.certificate_type})"
        return None

    def _probe_servers(self) -> list[tuple[str, MetricsServer]]:
        """(flag, server): the metrics port (with --metrics-enabled) and the health port (unless "0"),
        one server when both name the same address."""
        s = self.settings
        servers: list[tuple[str, MetricsServer]] = []
        metrics_at = split_address(s.metrics_address, 8082) if s.metrics_enabled else None
        if metrics_at is not None:
            servers.append(("--metrics-address", self._probe_server(metrics_at, serve_metrics=True)))
        if s.health_probe_bind_address != "0":
            health_at = split_address(s.health_probe_bind_address, 8081)
            if health_at != metrics_at:
                servers.append(
                    ("--health-probe-bind-address", self._probe_server(health_at, serve_metrics=False))
                )
        return servers

    def _probe_server(self, at: tuple[str, int], *, serve_metrics: bool) -> MetricsServer:
        host, port = at
        return MetricsServer(
            self.metrics, host, port, livez=self.livez, readyz=self.readyz, leaderz=self.leaderz,
            serve_metrics=serve_metrics,
        )  # fmt: skip

    async def run(self) -> None:
        """Serve the probes from the first moment (a standby must answer its liveness probe), then work."""
        servers = self._probe_servers()
        started: list[MetricsServer] = []
        watchdog = asyncio.create_task(self.watchdog.run(), name="loop-watchdog")
        self.tasks.add(watchdog)
        try:
            for flag, server in servers:
                try:
                    await server.start()
                except OSError as err:
                    raise StartupError(f"cannot listen on {flag}: {err}") from None
                started.append(server)
            await self._run()
        finally:
            watchdog.cancel()
            for server in started:
                await server.stop()

    def _client_metrics(self) -> dict[str, Any]:
        m = self.metrics
        return {
            "request_counter": m.api_requests,
            "request_latency": m.api_request_duration,
            "throttle_wait": m.api_throttle_wait,
        }

    async def _connect(self) -> tuple[KubeClient, KubeClient, str]:
        s = self.settings
        try:
            home = KubeClient(
                await asyncio.to_thread(home_credentials, s), qps=s.client_qps, burst=s.client_max_burst,
                timeout=s.client_timeout or None, name="consumer", **self._client_metrics(),
            )  # fmt: skip
        except KubeconfigError as err:
            raise StartupError(f"cannot use the consumer kubeconfig: {err}") from None
        try:
            version, pool_creds = await self._first_answers(home)
        except BaseException:
            await home.close()  # a refusal at start is one clear line, not asyncio's unclosed-session noise
            raise
        pool = KubeClient(
            pool_creds, qps=s.client_qps, burst=s.client_max_burst,
            timeout=s.client_timeout or None, name="pool", **self._client_metrics(),
        )  # fmt: skip
        log.info("pool credential loaded", server=pool_creds.server, **describe(pool_creds))
        return home, pool, str(version.get("gitVersion") or "v1.36.0")

    async def _first_answers(self, home: KubeClient) -> tuple[dict[str, Any], Credentials]:
        """The consumer's version and the pool credential, retried while the consumer API does not answer
        (a control-plane upgrade, the pod started before its network): capped backoff, a WARNING on the
        first failure and every ``START_WARN_INTERVAL`` after, the reason in /readyz; never an exit. A
        refusal (401, 403, a bad Secret) is a StartupError: retrying would not change it."""
        backoff = Backoff(START_RETRY_BASE, START_RETRY_CAP)
        last_warning = -START_WARN_INTERVAL
        loop = asyncio.get_running_loop()
        while True:
            try:
                version = await home.request("GET", "/version")
                creds = await self._pool_credentials(home)
            except ApiError as err:
                if not retryable_at_start(err):
                    raise StartupError(f"the consumer API refused vkbridge: {err}") from None
                delay = backoff.next()
                reason = str(err)[:160]
                self.phase = (
                    f"connecting to the consumer API: no answer yet ({reason}), try {backoff.attempts}"
                )
                if loop.time() - last_warning >= START_WARN_INTERVAL:
                    last_warning = loop.time()
                    log.warning(
                        "consumer API not answering at start; retrying",
                        error=str(err)[:200], attempts=backoff.attempts, retry_in=round(delay, 1),
                    )  # fmt: skip
                await asyncio.sleep(delay)
                continue
            if backoff.attempts:
                log.info("consumer API answering", after_attempts=backoff.attempts)
            self.phase = "connected to the consumer API"
            return version, creds

    async def _pool_credentials(self, home: KubeClient) -> Credentials:
        s = self.settings
        secret_where = f"{s.tenant_namespace}/{s.foreign_kubeconfig_secret_name}"
        try:
            secret = await home.get(SECRETS, s.foreign_kubeconfig_secret_name, s.tenant_namespace)
        except ApiError as err:
            if err.not_found:
                secret = None
            elif retryable_at_start(err):
                raise  # the consumer API stopped answering: retried by _first_answers
            else:
                raise StartupError(f"cannot read the pool kubeconfig Secret {secret_where}: {err}") from None
        try:
            return credentials_from_secret(secret, secret_where)
        except KubeconfigError as err:
            raise StartupError(f"cannot use the pool kubeconfig: {err}") from None

    async def _run(self) -> None:
        s = self.settings
        home, pool, kubelet_version = await self._connect()
        self.home, self.pool = home, pool
        node_name, vn_name = s.nodename, s.virtual_node_name or s.nodename
        tenant = s.tenant_namespace
        recorder = EventRecorder(HomeEventWriter(home), c.event_component(c.REFLECTOR_POD), host=node_name)

        node_cache = Cache(home, NODES, field_selector=f"metadata.name={node_name}", name="consumer/node")
        vn_cache = Cache(
            home, VIRTUALNODES, tenant, field_selector=f"metadata.name={vn_name}", name="consumer/vn"
        )
        rs_cache = Cache(
            home, RESOURCESLICES, tenant, field_selector=f"metadata.name={vn_name}", name="consumer/rs"
        )
        secret_cache = Cache(
            home, SECRETS, tenant, field_selector=f"metadata.name={s.foreign_kubeconfig_secret_name}",
            name="consumer/kubeconfig-secret",
        )  # fmt: skip
        vn_key = f"{tenant}/{vn_name}"

        def base_inputs() -> NodeInputs:
            return NodeInputs(
                node_name=node_name,
                remote_cluster_id=s.foreign_cluster_id,
                node_ip=s.node_ip,
                listen_port=s.listen_port,
                kubelet_version=kubelet_version,
                extra_labels=s.node_extra_labels,
                extra_annotations=s.node_extra_annotations,
            )

        node = NodeController(
            home, self.reach, node_cache=node_cache, virtual_node_cache=vn_cache,
            resource_slice_cache=rs_cache, base_inputs=base_inputs, virtual_node_key=vn_key,
            status_interval=s.node_status_interval,
        )  # fmt: skip
        self.node = node
        self.metrics.node_ready.set_function(lambda: node_ready(node_cache.get(node_name)))
        lease = LeaseHeartbeat(
            home, node_name, self.reach, duration=s.node_lease_duration,
            renew_interval=s.node_lease_renew_interval or None, node_uid=node.node_uid,
        )  # fmt: skip
        pinger = Pinger(
            pool, self.reach, interval=s.node_ping_interval, timeout=s.node_ping_timeout,
            metrics=self.metrics,
        )  # fmt: skip
        self.reach.subscribe(lambda _old, new: _follow_the_pool(pool, new))

        def offloading_patch() -> Mapping[str, Any] | None:
            vn = vn_cache.get(vn_key)
            return None if vn is None else (vn.get("spec") or {}).get("offloadingPatch")

        ctx = ReflectionContext(
            home=home, pool=pool, node_name=node_name, local_cluster_id=s.home_cluster_id,
            remote_cluster_id=s.foreign_cluster_id, tenant_namespace=tenant, vk_pod_ip=s.node_ip,
            reach=self.reach, recorder=recorder, metrics=self.metrics,
            # Service-account token reflection (TokenAPI) is not built: a ShadowPod pointing at a
            # `<pod>-token` Secret nobody writes would hang on the pool, so tokens are dropped instead.
            apiserver_support="disabled",
            disable_ip_reflection=s.disable_ip_reflection, offloading_patch=offloading_patch,
        )  # fmt: skip
        admission = Admission(Grant())
        engine = ReflectionEngine(
            ctx, admission, pod_workers=s.pod_reflection_workers, event_workers=s.event_reflection_workers,
            configuration_workers=max(s.secret_reflection_workers, s.configmap_reflection_workers, 1),
            secret_policy=s.secret_reflection_type, configmap_policy=s.configmap_reflection_type,
        )  # fmt: skip
        self.engine = engine

        def on_grant(*_: Any) -> None:
            engine.set_grant(grant_of(rs_cache.get(vn_key), vn_cache.get(vn_key)))

        rs_cache.subscribe(on_grant)
        vn_cache.subscribe(on_grant)

        def kubeconfig_refused(message: str, secret: Mapping[str, Any] | None) -> None:
            # The log has it already; the Event puts it where `kubectl describe secret` shows it.
            if secret is not None:
                recorder.event(secret, "Warning", KUBECONFIG_REFUSED_REASON, message, kind="Secret",
                               api_version="v1")  # fmt: skip

        creds = RemoteCredentialWatcher(
            pool, secret_cache, f"{tenant}/{s.foreign_kubeconfig_secret_name}", on_invalid=kubeconfig_refused
        )
        renewer = CertificateRenewer(
            home, pool, tenant_namespace=tenant, secret_name=s.foreign_kubeconfig_secret_name,
            resource_slice_name=vn_name,
            remote_tenant_namespace=f"{c.TENANT_NAMESPACE_PREFIX}{s.home_cluster_id}",
            consumer_cluster_id=s.home_cluster_id, renew_fraction=s.cert_renew_fraction, metrics=self.metrics,
            reach=self.reach, resource_slice_cache=rs_cache, secret_cache=secret_cache,
        )  # fmt: skip
        serving = ServingCertificateManager(
            home, node_name=node_name, node_ip=s.node_ip, certificate_type=s.certificate_type
        )
        self.metrics.serving_cert_expiry_seconds.set_function(
            lambda: seconds_until(info.not_after if (info := serving.certificate_info) else None)
        )

        def remote_namespace(local_ns: str) -> str | None:
            pair = engine.pairs.get(local_ns)
            return None if pair is None else pair.remote

        kubelet = KubeletServer(
            home, pool, node_name=node_name, port=s.listen_port, serving_certificate=serving.current_keypair,
            client_ca_pem=await client_ca(home), remote_namespace=remote_namespace,
            client_ca_configmap="kube-system/extension-apiserver-authentication",
            local_pods=engine.local_pods, healthz=self.livez, metrics=self.metrics,
        )  # fmt: skip

        elector: LeaderElector | None = None
        if s.vk_lease_enabled:
            identity = s.pod_name or f"{socket.gethostname()}-{os.getpid()}"
            elector = LeaderElector(
                home, namespace=tenant, name=node_name, identity=identity,
                lease_duration=s.vk_lease_duration, renew_deadline=s.vk_lease_renew_interval,
                retry_period=s.vk_lease_retry_period,
            )  # fmt: skip
            self.elector = elector

        async def hold_leadership() -> None:
            assert elector is not None
            await elector.hold()
            raise LostLeadership(f"lease {tenant}/{node_name} taken over")

        try:
            if elector is not None:
                self.phase = WAITING_FOR_LEADERSHIP
                await elector.acquire()
            self.serving = serving
            self.caches = [node_cache, vn_cache, rs_cache, secret_cache]
            self.caches += [engine.local_pods, engine.namespace_maps]
            self.phase = "waiting for the node, VirtualNode and ResourceSlice caches"
            async with asyncio.TaskGroup() as tg:

                def spawn(coro: Coroutine[Any, Any, None], name: str) -> None:
                    """Every long-lived task is watched: one that ends fails liveness."""
                    self.tasks.add(tg.create_task(coro, name=name))

                if elector is not None:
                    spawn(hold_leadership(), "leader-election")
                for cache in (node_cache, vn_cache, rs_cache, secret_cache):
                    spawn(cache.run(), f"cache-{cache.name}")
                spawn(recorder.run(), "event-recorder")
                spawn(pinger.run(), "pinger")
                spawn(creds.run(), "credential-watcher")
                spawn(serving.run(), "serving-certificate")
                spawn(renewer.run(), "client-certificate-renewal")
                spawn(_serve(kubelet), "kubelet-api")
                await asyncio.gather(vn_cache.wait_synced(), rs_cache.wait_synced(), node_cache.wait_synced())
                on_grant()
                if s.create_node:
                    spawn(node.run(), "node")
                    spawn(lease.run(), "node-lease")
                spawn(engine.run(), "reflection")
                self.phase = "running"
                self.ready.set()
                log.info(
                    "vkbridge running",
                    node=node_name,
                    tenant=tenant,
                    pool=pool.server,
                    workers=s.pod_reflection_workers,
                )
        finally:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(1.0):
                    await recorder.aclose()
            if elector is not None:
                with contextlib.suppress(Exception):
                    await elector.release()  # bounded; logs when it could not
            await pool.close()
            await home.close()


async def _serve(server: KubeletServer | MetricsServer) -> None:
    """Run a start()/stop() server as a task: started now, stopped when the task is cancelled."""
    await server.start()
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


async def _main(settings: Settings) -> int:
    vk = VirtualKubelet(settings)
    task = asyncio.current_task()
    loop = asyncio.get_running_loop()
    stopping = False

    def on_signal(signame: str) -> None:
        nonlocal stopping
        if stopping:
            return
        stopping = True
        log.info("shutting down: heartbeats and reflection stop, the Node stays", signal=signame)
        assert task is not None
        task.cancel()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal, sig.name)
    loop.add_signal_handler(signal.SIGUSR1, _log_tasks)
    try:
        await vk.run()
    except asyncio.CancelledError:
        if not stopping:
            raise
        return 0
    except StartupError as err:
        log.error(str(err))
        return 2
    except ExceptionGroup as group:
        if group.subgroup(LostLeadership) is not None:
            return 1
        raise
    return 0


def run(settings: Settings) -> int:
    """Entry point called by the CLI once flags are parsed and logging is set up."""
    try:
        # The standard loop, not uvloop: uvloop can leave a transport bound to a file descriptor the OS
        # has already reused when a connect is cancelled (MagicStack/uvloop#653, unfixed in 0.23), which
        # killed vkbridge during a pool outage in the long-outage scenario and can mix two connections'
        # bytes. Correctness first; the cost is measured in bench/README.md.
        limit_tls_read_buffer()
        return int(asyncio.run(_main(settings)))
    except KeyboardInterrupt:
        return 0
    except ExceptionGroup as group:
        for err in _leaves(group):
            log.error("fatal error", error=f"{type(err).__name__}: {str(err)[:300]}")
        sys.stderr.flush()
        return 1


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def _follow_the_pool(pool: KubeClient, state: PoolState) -> None:
    """Lost: free the workers and watches stuck on dead connections now (a request would hold its worker
    for its 60 s timeout, a watch stay silent until its cache's inactivity timeout), so a pool back within
    a minute is re-synced at once. Back: restart what began meanwhile, and pool watches in backoff retry
    now, not at their next attempt."""
    if state is PoolState.LOST:
        ended = pool.abandon_inflight("the pool stopped answering pings")
        if ended:
            log.info("pool lost: ended requests and watches waiting on it", count=ended)
    elif state is PoolState.CONNECTED:
        # Attempts made while it was lost wait on connections into the void (up to the 15 s connect
        # timeout): start them again now.
        ended = pool.abandon_inflight("started while the pool was lost", streams=False, connections=False)
        if ended:
            log.info("pool back: restarted requests and watches begun while it was lost", count=ended)
        pool.nudge()


def _log_tasks() -> None:
    """SIGUSR1: log every asyncio task with where it waits (code locations only, never values), so a
    process that does not stop or does not progress can be diagnosed from `kubectl logs` alone."""
    tasks = asyncio.all_tasks()
    log.warning("SIGUSR1: dumping asyncio tasks", count=len(tasks))
    for t in sorted(tasks, key=lambda t: t.get_name()):
        frames = t.get_stack(limit=8)
        where = " <- ".join(f"{f.f_code.co_name} ({f.f_code.co_filename.rsplit('/', 1)[-1]}:{f.f_lineno})"
                            for f in reversed(frames))  # fmt: skip
        log.warning("task", name=t.get_name(), cancelling=t.cancelling(), waits_in=where or "-")
