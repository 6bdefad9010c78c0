"""Follows the client CA kube-apiserver's kubelet client certificate chains to, without a restart.

A kubelet reloads its ``clientCAFile`` when the file changes; ours comes from the ConfigMap
``kube-system/extension-apiserver-authentication`` (key ``client-ca-file``), so it is watched (a
one-object list+watch cache, on the loop like every other) and each new bundle is handed to
``apply``. A deleted ConfigMap or an empty key keeps the CA in use, as a kubelet keeps the last
good file content.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from vkbridge.kube.cache import Cache, EventType
from vkbridge.kube.client import CONFIGMAPS, KubeClient
from vkbridge.logs import get_logger

__all__ = ["CLIENT_CA_CONFIGMAP", "CLIENT_CA_KEY", "CLIENT_CA_NAMESPACE", "ClientCAFollower"]

log = get_logger("vkbridge.kubeletapi.clientca")

CLIENT_CA_NAMESPACE: Final = "kube-system"
CLIENT_CA_CONFIGMAP: Final = "extension-apiserver-authentication"
CLIENT_CA_KEY: Final = "client-ca-file"


class ClientCAFollower:
    def __init__(
        self,
        home: KubeClient,
        apply: Callable[[bytes], object],
        *,
        namespace: str = CLIENT_CA_NAMESPACE,
        name: str = CLIENT_CA_CONFIGMAP,
        inactivity_timeout: float = 60.0,
    ) -> None:
        self._apply = apply
        self.ref = f"{namespace}/{name}"
        self.cache = Cache(
            home,
            CONFIGMAPS,
            namespace,
            field_selector=f"metadata.name={name}",
            name="consumer/client-ca",
            inactivity_timeout=inactivity_timeout,
        )
        self.cache.subscribe(self._on_change)

    async def run(self) -> None:
        """Until cancelled (the cache retries with a capped backoff and logs why)."""
        await self.cache.run()

    def _on_change(self, _type: EventType, _old: Any, new: Any) -> None:
        if new is None:
            log.warning("kubelet client CA ConfigMap deleted; keeping the CA in use", configmap=self.ref)
            return
        ca = (new.get("data") or {}).get(CLIENT_CA_KEY)
        if not isinstance(ca, str) or not ca.strip():
            log.warning(
                "kubelet client CA ConfigMap has no client CA; keeping the CA in use",
                configmap=self.ref,
                key=CLIENT_CA_KEY,
            )
            return
        self._apply(ca.encode())
