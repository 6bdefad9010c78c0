"""What every emulated controller shares: configuration, the two API clients, the pool CA, the caches."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from dataclasses import dataclass, field

from . import names as n
from .certs import Signer
from .kube import Kube, Obj, api_path
from .runtime import Informer, forget_errors

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Config:
    consumer_id: str
    slug: str
    cert_lifetime: dt.timedelta = dt.timedelta(days=365)
    propagate_kubeconfig: bool = True
    # Pool API server URL written into authParams.apiServer (what a consumer would dial).
    api_server_url: str = ""
    webhook_port: int = 0
    shadowpod_workers: int = 4

    @property
    def consumer_tenant(self) -> str:
        return n.consumer_tenant_ns(self.slug)

    @property
    def pool_tenant(self) -> str:
        return n.pool_tenant_ns(self.consumer_id)


@dataclass
class Env:
    cfg: Config
    consumer: Kube
    pool: Kube
    signer: Signer
    # The consumer plane's CA: signs the serving certificate of the consumer pod webhook.
    consumer_signer: Signer | None = None
    _informers: dict[tuple[str, str, str | None], Informer] = field(default_factory=dict)

    def informer(self, kube: Kube, path: str, *, label_selector: str | None = None) -> Informer:
        """One shared cache per (cluster, collection, selector)."""
        k = (kube.name, path, label_selector)
        if k not in self._informers:
            self._informers[k] = Informer(
                kube, path, label_selector=label_selector, name=f"{kube.name}:{path}?{label_selector or ''}"
            )
        return self._informers[k]

    def replicated(self, gv: str, plural: str) -> Informer:
        """The copies the CRD replicator keeps in the pool tenant namespace (what Liqo's provider watches)."""
        path = api_path(gv, plural, self.cfg.pool_tenant)
        return self.informer(self.pool, path, label_selector=f"{n.REPLICATION_STATUS}=true")

    @property
    def informers(self) -> list[Informer]:
        return list(self._informers.values())

    def event(self, kube: Kube, obj: Obj, reason: str, message: str, *, warning: bool = False) -> None:
        """Record a core/v1 Event about obj, fire-and-forget (never holds secret material)."""
        md = obj["metadata"]
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        body = {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{md['name']}.", "namespace": md.get("namespace") or "default"},
            "involvedObject": {
                "apiVersion": obj.get("apiVersion", ""),
                "kind": obj.get("kind", ""),
                "name": md["name"],
                "namespace": md.get("namespace", ""),
                "uid": md.get("uid", ""),
            },
            "reason": reason,
            "message": message,
            "type": "Warning" if warning else "Normal",
            "source": {"component": "liqo-emulator"},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        path = api_path("v1", "events", md.get("namespace") or "default")
        task = asyncio.get_running_loop().create_task(forget_errors(kube.create(path, body)))
        _pending_events.add(task)
        task.add_done_callback(_pending_events.discard)


_pending_events: set[asyncio.Task[object]] = set()
