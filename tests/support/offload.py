"""One offloaded namespace pair on the session's planes: what most pod-reflection integration tests start
from, with the steps they all take (make a pool pod at home, wait for it to run, look at its copies)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import (
    events_for,
    get,
    must,
    node_pods_active,
    phase,
    pod_path,
    pool_pod,
    shadow_path,
    wait_until,
)


def wait_node_idle(consumer: ControlPlane, node: str) -> None:
    """Wait (90 s) until no pod of earlier tests runs on ``node``: their namespaces go away slowly, and a
    test that fills the grant or the pool quota must have them to itself."""
    wait_until(
        lambda: not node_pods_active(consumer, node), 90, "earlier tests' pods to be gone", interval=0.5
    )


@dataclass(frozen=True)
class Offload:
    """The session's consumer, pool, peering and vkbridge, and a fresh consumer namespace ``ns`` offloaded
    to ``remote_ns`` on the pool."""

    consumer: ControlPlane
    pool: ControlPlane
    bundle: Bundle
    vkbridge: VkbridgeProcess
    ns: str
    remote_ns: str

    def pod(self, name: str, **spec: Any) -> dict[str, Any]:
        """A pod that opts in to our pool (``spec``: the keywords of ``pool_pod``)."""
        return pool_pod(self.bundle.slug, name, **spec)

    def create(self, name: str, **spec: Any) -> dict[str, Any]:
        """Create ``self.pod(name, **spec)`` at home; the object the API server returned."""
        return self.post(self.pod(name, **spec))

    def post(self, pod: dict[str, Any]) -> dict[str, Any]:
        return must(self.consumer, "POST", pod_path(self.ns), pod)

    def run(self, name: str, **spec: Any) -> None:
        """Create the pod at home and wait (30 s) until it Runs there, i.e. on the pool too."""
        self.create(name, **spec)
        self.wait_running(name)

    def wait_running(self, name: str, seconds: float = 30) -> None:
        wait_until(lambda: self.running(name), seconds, f"{name} Running at home")

    def phase(self, name: str) -> str | None:
        return phase(self.consumer, self.ns, name)

    def running(self, name: str) -> bool:
        return self.phase(name) == "Running"

    def local(self, name: str) -> dict[str, Any] | None:
        return get(self.consumer, pod_path(self.ns, name))

    def remote(self, name: str) -> dict[str, Any] | None:
        """The pool's pod for our pod ``name`` (None while there is none)."""
        return get(self.pool, pod_path(self.remote_ns, name))

    def shadow(self, name: str) -> dict[str, Any] | None:
        """Our pod's ShadowPod on the pool (None while there is none)."""
        return get(self.pool, shadow_path(self.remote_ns, name))

    def events(self, name: str) -> list[dict[str, Any]]:
        """The consumer's Events about object ``name`` of our namespace."""
        return events_for(self.consumer, self.ns, name)

    def warning(self, name: str, text: str) -> dict[str, Any] | None:
        """The first Warning Event on object ``name`` whose message contains ``text``, if any."""
        return next((e for e in self.events(name) if e["type"] == "Warning" and text in e["message"]), None)

    def remote_events(self, name: str) -> list[dict[str, Any]]:
        """The pool's Events about object ``name`` of the remote namespace."""
        return events_for(self.pool, self.remote_ns, name)

    def delete(self, name: str, body: Any = None) -> None:
        must(self.consumer, "DELETE", pod_path(self.ns, name), body)

    def delete_shadow(self, name: str, body: Any = None) -> None:
        """Delete our pod's ShadowPod on the pool behind vkbridge's back."""
        must(self.pool, "DELETE", shadow_path(self.remote_ns, name), body)
