"""One pod's life on the fake node: init containers, containers with restarts, graceful deletion.

Everything is event-driven (process exits, timers, the deletion event); there is no polling, so thousands
of no-exec pods cost only a few idle tasks each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .kubeclient import ApiError, KubeClient
from .podlogs import ContainerLog
from .podspec import (
    ANN_FAIL_START,
    backoff,
    container_argv,
    container_env,
    exit_plan,
    grace_seconds,
    pod_annotations,
    should_restart,
)
from .podstatus import (
    ConditionBook,
    ContainerState,
    conditions,
    container_id,
    merge_conditions,
    pod_phase,
    reported_resources,
)
from .runtime import FakeProc, GroupTracker, Proc, StartError, spawn
from .timefmt import iso_seconds
from .writers import EventRecorder, StatusWriter

log = logging.getLogger(__name__)

Json = dict[str, Any]
STABLE_RUN = 10.0  # a container that ran this long restarts with the backoff reset


@dataclass
class PodContext:
    client: KubeClient
    writer: StatusWriter
    events: EventRecorder
    tracker: GroupTracker
    workdir: Path
    no_exec: bool


class ContainerNotAvailable(Exception):
    """Logs or exec asked for a container that has no (matching) instance; the message is the API's."""


class PodRuntime:
    def __init__(self, ctx: PodContext, node: str, pod: Json, pod_ip: str) -> None:
        meta = pod["metadata"]
        spec = pod["spec"]
        self.ctx = ctx
        self.node = node
        self.pod = pod
        self.uid: str = meta["uid"]
        self.namespace: str = meta["namespace"]
        self.name: str = meta["name"]
        self.pod_ip = pod_ip
        self.policy: str = spec.get("restartPolicy") or "Always"
        self.specs: dict[str, tuple[Json, str]] = {}
        self.init: list[ContainerState] = []
        self.main: list[ContainerState] = []
        for c in spec.get("initContainers") or []:
            self.specs[c["name"]] = (c, f"spec.initContainers{{{c['name']}}}")
            sidecar = c.get("restartPolicy") == "Always"
            self.init.append(ContainerState(c["name"], c.get("image", ""), init=True, sidecar=sidecar))
        for c in spec.get("containers") or []:
            self.specs[c["name"]] = (c, f"spec.containers{{{c['name']}}}")
            resources = reported_resources(c.get("resources"))
            st = ContainerState(c["name"], c.get("image", ""), resources=resources)
            if self.init:
                st.state = {"waiting": {"reason": "PodInitializing"}}
            self.main.append(st)
        self.book = ConditionBook()
        self.start_time = iso_seconds()
        self.sandbox = False
        self.gone = False
        self.last_written: Json | None = None
        self.write_lock = asyncio.Lock()
        self.terminating = asyncio.Event()
        self.pod_dir = ctx.workdir / "pods" / f"{self.namespace}_{self.name}_{self.uid}"
        self.procs: dict[str, Proc] = {}
        self.logs: dict[str, ContainerLog] = {}
        self._started: dict[str, asyncio.Event] = {name: asyncio.Event() for name in self.specs}
        self._stopping_sidecars = False
        self._task: asyncio.Task[None] | None = None
        self._termination: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------------------

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=f"pod {self.namespace}/{self.name}")
        self.observe(self.pod)

    def observe(self, pod: Json) -> None:
        """A newer copy from the watch; a deletionTimestamp starts graceful termination once."""
        self.pod = pod
        if pod["metadata"].get("deletionTimestamp") and self._termination is None:
            self._termination = asyncio.create_task(self._terminate(), name=f"terminate {self.name}")

    def kill(self) -> None:
        """The pod object is gone (force-deleted): stop everything now, write nothing more."""
        self.gone = True
        self.terminating.set()
        for proc in list(self.procs.values()):
            proc.send(signal.SIGKILL)
        if self._termination is not None:
            self._termination.cancel()

    def tasks(self) -> list[asyncio.Task[None]]:
        return [t for t in (self._task, self._termination) if t is not None and not t.done()]

    async def stop(self) -> None:
        """Shutdown of the fake kubelet itself."""
        self.kill()
        tasks = self.tasks()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def mark(self) -> None:
        if not self.gone:
            self.ctx.writer.mark(self)

    def _event(self, st: ContainerState | None, reason: str, message: str, warning: bool = False) -> None:
        field = self.specs[st.name][1] if st is not None else ""
        self.ctx.events.emit(self.node, self.pod, reason, message, field, warning)

    async def _run(self) -> None:
        try:
            self.sandbox = True
            reason = pod_annotations(self.pod).get(ANN_FAIL_START)
            if reason:
                self._fail_start(reason)
                return
            loops: list[asyncio.Task[None]] = []
            for st in self.init:
                if self.terminating.is_set():
                    return
                if st.sidecar:
                    loops.append(asyncio.create_task(self._container_loop(st)))
                    await self._first_start(st)
                    continue
                await self._container_loop(st)
                if st.failed:
                    return
            for st in self.main:
                if st.state.get("waiting", {}).get("reason") == "PodInitializing":
                    st.state = {"waiting": {"reason": "ContainerCreating"}}
            main = [asyncio.create_task(self._container_loop(st)) for st in self.main]
            await asyncio.gather(*main)
            self._stopping_sidecars = True
            for st in self.init:
                proc = self.procs.get(st.name)
                if st.sidecar and proc is not None:
                    proc.send(signal.SIGTERM)
            await asyncio.gather(*loops)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("pod %s/%s: runtime error", self.namespace, self.name)
        finally:
            self.mark()

    async def _first_start(self, st: ContainerState) -> None:
        started = asyncio.create_task(self._started[st.name].wait())
        stop = asyncio.create_task(self.terminating.wait())
        await asyncio.wait({started, stop}, return_when=asyncio.FIRST_COMPLETED)
        started.cancel()
        stop.cancel()

    def _fail_start(self, reason: str) -> None:
        targets = [c for c in self.init if not c.done][:1] or self.main
        message = f"fake failure ({reason})"
        if "Image" in reason or "Pull" in reason:
            message = f'Back-off pulling image "{targets[0].image}"' if targets else message
        for st in targets:
            st.state = {"waiting": {"reason": reason, "message": message}}
        if targets:
            self._event(targets[0], "Failed", f"Error: {reason}", warning=True)
            if "Image" in reason or "Pull" in reason:
                self._event(targets[0], "BackOff", message)
        self.mark()

    async def _container_loop(self, st: ContainerState) -> None:
        spec, _ = self.specs[st.name]
        plan = None if st.init else exit_plan(self.pod)
        loop = asyncio.get_running_loop()
        while True:
            if self.terminating.is_set() and not st.ever_started:
                return
            self._event(st, "Pulled", f'Container image "{st.image}" already present on machine')
            cid = container_id(self.uid, st.name, st.restart_count)
            started_at = iso_seconds()
            began = loop.time()
            try:
                proc = await self._launch(st, spec)
            except StartError as exc:
                code = 128
                st.container_id = cid
                st.state = {
                    "terminated": {
                        "exitCode": code,
                        "reason": "StartError",
                        "message": str(exc),
                        "startedAt": "1970-01-01T00:00:00Z",
                        "finishedAt": iso_seconds(),
                        "containerID": cid,
                    }
                }
                self._event(st, "Failed", f"Error: {exc}", warning=True)
            else:
                code = await self._supervise(st, proc, cid, started_at, plan)
            restart = should_restart(self.policy, code, init=st.init, sidecar=st.sidecar)
            if self.terminating.is_set() or (st.sidecar and self._stopping_sidecars) or not restart:
                st.done = True
                self.mark()
                return
            previous = st.state["terminated"]
            st.last_state = {"terminated": previous}
            delay = backoff(0 if loop.time() - began >= STABLE_RUN else st.restart_count)
            st.state = {
                "waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": f"back-off {delay:g}s restarting failed container={st.name} "
                    f"pod={self.name}_{self.namespace}({self.uid})",
                }
            }
            who = f"{self.name}_{self.namespace}({self.uid})"
            self._event(st, "BackOff", f"Back-off restarting failed container {st.name} in pod {who}", True)
            self.mark()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.terminating.wait(), delay)
            if self.terminating.is_set():
                st.state = {"terminated": previous}
                st.last_state = {}
                st.done = True
                self.mark()
                return
            st.restart_count += 1

    async def _supervise(
        self, st: ContainerState, proc: Proc, cid: str, started_at: str, plan: tuple[float, int] | None
    ) -> int:
        self.procs[st.name] = proc
        st.container_id = cid
        st.state = {"running": {"startedAt": started_at}}
        st.ready = not st.init or st.sidecar
        self._event(st, "Created", f"Created container: {st.name}")
        self._event(st, "Started", f"Started container {st.name}")
        self._started[st.name].set()
        self.mark()
        if self.terminating.is_set():
            proc.send(signal.SIGTERM)
        timer = proc.schedule_exit(*plan) if plan else None
        try:
            code = await proc.wait()
        finally:
            if timer is not None:
                timer.cancel()
            self.procs.pop(st.name, None)
        st.state = {
            "terminated": {
                "exitCode": code,
                "reason": "Completed" if code == 0 else "Error",
                "startedAt": started_at,
                "finishedAt": iso_seconds(),
                "containerID": cid,
            }
        }
        st.ready = st.init and not st.sidecar and code == 0
        return code

    async def _launch(self, st: ContainerState, spec: Json) -> Proc:
        if self.ctx.no_exec:
            return FakeProc()
        env, cwd = self.exec_env(st.name)
        logfile = ContainerLog(self.pod_dir / st.name / f"{st.restart_count}.log")
        self.logs[container_id(self.uid, st.name, st.restart_count)] = logfile
        argv = container_argv(spec, env)
        return await spawn(argv, env, cwd, logfile, self.ctx.tracker)

    async def _terminate(self) -> None:
        """kubelet killPod: SIGTERM, wait out the grace period (capped), SIGKILL, final status, DELETE."""
        grace = grace_seconds(self.pod)
        self.terminating.set()
        for name, proc in list(self.procs.items()):
            st = next(c for c in [*self.init, *self.main] if c.name == name)
            self._event(st, "Killing", f"Stopping container {name}")
            proc.send(signal.SIGTERM)
        if self._task is not None:
            done, _ = await asyncio.wait({self._task}, timeout=grace)
            if not done:
                for proc in list(self.procs.values()):
                    proc.send(signal.SIGKILL)
                await asyncio.wait({self._task}, timeout=10)
        try:
            await self.ctx.writer.write_now(self)
        except Exception as exc:  # the DELETE below matters more than the last status
            log.warning("pod %s/%s: final status not written: %s", self.namespace, self.name, exc)
        try:
            await delete_pod(self.ctx.client, self.namespace, self.name, self.uid)
        except Exception as exc:  # the next re-list retries: the pod still has its deletionTimestamp
            log.warning("pod %s/%s: delete failed: %s", self.namespace, self.name, exc)
            self._termination = None
            return
        self.gone = True

    # -- status, logs, exec ----------------------------------------------------------------------------

    def build_status(self) -> Json:
        now = iso_seconds()
        phase = pod_phase(self.init, self.main)
        generation = self.pod["metadata"].get("generation")
        ours = conditions(self.book, self.init, self.main, phase, self.sandbox, now)
        scheduled = self.book.make("PodScheduled", True, now)
        if generation is not None:  # a 1.35+ kubelet: its conditions carry the generation it acted on
            ours = [{**cond, "observedGeneration": generation} for cond in ours]
            scheduled = {**scheduled, "observedGeneration": generation}
        status: Json = {
            "phase": phase,
            "conditions": merge_conditions(self.pod.get("status", {}).get("conditions"), ours, scheduled),
            "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}],
            "podIP": self.pod_ip,
            "podIPs": [{"ip": self.pod_ip}],
            "startTime": self.start_time,
            "containerStatuses": [c.to_status() for c in self.main],
        }
        if self.init:
            status["initContainerStatuses"] = [c.to_status() for c in self.init]
        if generation is not None:
            status["observedGeneration"] = generation
        return status

    def state_of(self, name: str) -> ContainerState:
        for st in [*self.init, *self.main]:
            if st.name == name:
                return st
        raise ContainerNotAvailable(f"container {name} is not valid for pod {self.name}")

    def container_log(self, name: str, previous: bool) -> ContainerLog | None:
        """The kubelet's choice of instance; None in no-exec mode (an empty log)."""
        st = self.state_of(name)
        if previous:
            cid = st.last_state.get("terminated", {}).get("containerID")
            if not cid:
                raise ContainerNotAvailable(
                    f'previous terminated container "{name}" in pod "{self.name}" not found'
                )
        elif "waiting" in st.state:
            cid = st.last_state.get("terminated", {}).get("containerID")
            if not cid:
                reason = st.state["waiting"].get("reason", "")
                raise ContainerNotAvailable(
                    f'container "{name}" in pod "{self.name}" is waiting to start: {reason}'
                )
        else:
            cid = st.container_id
        return self.logs.get(cid)

    def exec_env(self, name: str) -> tuple[dict[str, str], Path]:
        spec, _ = self.specs[name]
        self.pod_dir.mkdir(parents=True, exist_ok=True)
        base = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(self.pod_dir),
            "HOSTNAME": self.name,
        }
        env = container_env(spec, base)
        workdir = spec.get("workingDir")
        cwd = Path(workdir) if workdir and Path(workdir).is_dir() else self.pod_dir
        return env, cwd


async def delete_pod(client: KubeClient, namespace: str, name: str, uid: str) -> None:
    body = {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "gracePeriodSeconds": 0,
        "preconditions": {"uid": uid},
    }
    try:
        await client.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}", body=body)
    except ApiError as exc:
        if exc.status not in (404, 409):
            raise
