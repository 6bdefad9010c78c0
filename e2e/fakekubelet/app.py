"""Wires one fake-kubelet process: API client, per-node HTTPS servers and agents, pod watches, writers."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import resource
from dataclasses import dataclass, field
from pathlib import Path

from e2e.kubeconfig import read_kubeconfig

from .kubeclient import KubeClient
from .node import NodeAgent
from .pods import PodContext
from .podwatch import watch_node_pods
from .registry import PodRegistry
from .runtime import GroupTracker
from .server import KubeletServer, server_ssl_context
from .writers import EventRecorder, StatusWriter

log = logging.getLogger(__name__)

READY_FILE = "ready.json"


@dataclass
class Options:
    kubeconfig: Path
    nodes: list[str]
    serving_cert: bytes
    serving_key: bytes
    workdir: Path
    no_exec: bool = False
    client_ca: bytes | None = None
    lease_interval: float = 10.0
    status_interval: float = 30.0
    status_concurrency: int = 20
    events: str = "all"
    node_certs: dict[str, tuple[bytes, bytes]] = field(default_factory=dict)


def write_ready(workdir: Path, info: dict[str, object]) -> None:
    tmp = workdir / (READY_FILE + ".tmp")
    tmp.write_text(json.dumps(info, indent=1))
    os.replace(tmp, workdir / READY_FILE)


async def run(opts: Options, stop: asyncio.Event) -> int:
    """Serve until ``stop`` is set (0) or a long-lived task dies (1). Always cleans up processes."""
    opts.workdir.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        (opts.workdir / READY_FILE).unlink()
    cfg = read_kubeconfig(opts.kubeconfig)
    client = KubeClient(cfg, connections=opts.status_concurrency + 2 * len(opts.nodes) + 20)
    tracker = GroupTracker(opts.workdir)
    writer = StatusWriter(client, opts.status_concurrency)
    events = EventRecorder(client, opts.events)
    contexts = {
        node: PodContext(client, writer, events, tracker, opts.workdir, opts.no_exec) for node in opts.nodes
    }
    registry = PodRegistry(contexts)
    servers = {node: KubeletServer(node, registry, tracker) for node in opts.nodes}
    tasks: list[asyncio.Task[None]] = []
    client_ca = opts.client_ca if opts.client_ca is not None else cfg.ca_pem
    try:
        agents = []
        for node in opts.nodes:
            cert, key = opts.node_certs.get(node, (opts.serving_cert, opts.serving_key))
            port = await servers[node].start(server_ssl_context(cert, key, client_ca))
            agent = NodeAgent(
                client, node, port, lease_interval=opts.lease_interval, status_interval=opts.status_interval
            )
            await agent.register()
            agents.append(agent)
        synced = {node: asyncio.Event() for node in opts.nodes}
        for node in opts.nodes:
            tasks.append(asyncio.create_task(watch_node_pods(client, node, registry, synced[node])))
        for agent in agents:
            tasks.append(asyncio.create_task(agent.run()))
        await asyncio.gather(*(e.wait() for e in synced.values()))
        write_ready(
            opts.workdir,
            {
                "pid": os.getpid(),
                "ports": {a.name: a.port for a in agents},
                "declaredFeatures": {a.name: a.declared_features for a in agents},
                "noExec": opts.no_exec,
            },
        )
        log.info("fake kubelet ready: %s", {a.name: a.port for a in agents})
        stopper = asyncio.create_task(stop.wait())
        done, _ = await asyncio.wait([*tasks, stopper], return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        for task in done:
            if task is not stopper and not task.cancelled() and task.exception() is not None:
                log.error("fake kubelet task failed", exc_info=task.exception())
                return 1
        return 0
    finally:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        log.info(
            "stopping: %d status patches (%d no-op skipped), %d events posted (%d dropped), cpu %.1fs+%.1fs",
            writer.patches,
            writer.skipped,
            events.posted,
            events.dropped,
            usage.ru_utime,
            usage.ru_stime,
        )
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await registry.stop()
        tracker.kill_all()
        await writer.close()
        await events.close()
        for srv in servers.values():
            await srv.close()
        await client.close()
        with contextlib.suppress(FileNotFoundError):
            (opts.workdir / READY_FILE).unlink()
