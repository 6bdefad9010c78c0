"""Where a kubelet stream request goes on the pool: route parsing, namespace mapping, and the dial.

Both fronts (SPDY and WebSocket) dial the pool *before* accepting the upgrade, so a missing pod or a
refused stream becomes an ordinary HTTP error the API server shows to the user, not a broken stream.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from vkbridge.kube.client import PODS, ApiError, KubeClient
from vkbridge.kubeletapi.streams.channels import StreamOptions
from vkbridge.kubeletapi.streams.pooldial import GENERIC_REFUSAL, PoolDialer
from vkbridge.kubeletapi.streams.poolstream import DialError, PoolStream
from vkbridge.logs import get_logger

__all__ = ["StreamRoute", "StreamService", "not_reflected", "stream_route"]

log = get_logger("vkbridge.kubeletapi.streams")

StreamKind = Literal["exec", "attach", "portforward"]
_PREFIXES: dict[str, StreamKind] = {"exec": "exec", "attach": "attach", "portForward": "portforward"}


@dataclass(frozen=True)
class StreamRoute:
    kind: StreamKind
    namespace: str
    pod: str
    container: str = ""  # empty for port-forward
    uid: str = ""  # the pod UID when the path names one


def stream_route(path: str) -> StreamRoute | None:
    """``/exec|attach/{ns}/{pod}[/{uid}]/{container}`` and ``/portForward/{ns}/{pod}[/{uid}]``."""
    segs = path.split("/")
    if len(segs) < 4 or segs[0] != "" or segs[1] not in _PREFIXES or any(not s for s in segs[2:]):
        return None
    kind = _PREFIXES[segs[1]]
    rest = segs[2:]
    if kind == "portforward":
        if len(rest) not in (2, 3):
            return None
        return StreamRoute(kind, rest[0], rest[1], uid=rest[2] if len(rest) == 3 else "")
    if len(rest) not in (3, 4):
        return None
    return StreamRoute(kind, rest[0], rest[1], rest[-1], uid=rest[2] if len(rest) == 4 else "")


def not_reflected(namespace: str, pod: str) -> str:
    return f'pods "{pod}" not found: namespace "{namespace}" is not reflected to the pool by this node'


class StreamService:
    """Opens exec/attach streams on the pool for local pods."""

    def __init__(
        self, pool: KubeClient, dialer: PoolDialer, remote_namespace: Callable[[str], str | None]
    ) -> None:
        self._pool = pool
        self._dialer = dialer
        self._remote_namespace = remote_namespace

    async def open(self, route: StreamRoute, opts: StreamOptions) -> PoolStream:
        """An open exec/attach session on the pool (WebSocket v5, or SPDY); DialError with an HTTP status.

        Port-forward never comes here: the server relays it pair by pair (portforward.py).
        """
        remote = self._remote_namespace(route.namespace)
        if remote is None:
            raise DialError(404, not_reflected(route.namespace, route.pod))
        path = PODS.path(remote, route.pod, route.kind)
        try:
            return await self._dialer.open(path, opts.pool_params(route.container), opts)
        except DialError as exc:
            if 400 <= exc.status < 500 and exc.message.startswith(GENERIC_REFUSAL):
                raise await self._diagnose(remote, route, exc) from None
            raise

    async def _diagnose(self, remote: str, route: StreamRoute, err: DialError) -> DialError:
        """aiohttp drops a WebSocket refusal's body; rebuild a useful message from the pool's pod."""
        try:
            pod = await self._pool.get(PODS, route.pod, remote)
        except ApiError as exc:
            if exc.not_found:
                return DialError(404, f'pods "{route.pod}" not found')
            return err
        spec = pod.get("spec") or {}
        names = [c.get("name") for key in ("containers", "initContainers", "ephemeralContainers")
                 for c in spec.get(key) or []]  # fmt: skip
        if route.container not in names:
            return DialError(400, f"container {route.container} is not valid for pod {route.pod}")
        statuses = (pod.get("status") or {}).get("containerStatuses") or []
        state = next((s.get("state") or {} for s in statuses if s.get("name") == route.container), {})
        if "running" not in state:
            return DialError(400, f'container "{route.container}" in pod "{route.pod}" is not running')
        log.warning("the pool refused a stream", pod=f"{remote}/{route.pod}", error=err.message)
        return err
