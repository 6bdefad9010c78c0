"""The two control planes of every integration test: the consumer cluster and the pool cluster."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from e2e.binaries import find_binaries
from e2e.controlplane import ControlPlane
from e2e.liqo_chart import liqo_crds_dir

log = logging.getLogger(__name__)

CONSUMER_SERVICE_CIDR = "10.100.0.0/24"
POOL_SERVICE_CIDR = "10.110.0.0/24"


@dataclass
class Planes:
    consumer: ControlPlane
    pool: ControlPlane
    startup_seconds: float = 0.0

    def stop(self) -> None:
        """Stop both planes concurrently (each takes a few seconds to shut down cleanly)."""
        with ThreadPoolExecutor(2) as ex:
            for f in [ex.submit(p.stop) for p in (self.consumer, self.pool)]:
                f.result()

    def keep(self) -> None:
        self.consumer.keep()
        self.pool.keep()

    def __enter__(self) -> Planes:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_planes(
    base_dir: Path | None = None, grace: str = "20s", timeout: float = 180, crds: bool = True,
    extra_args: Mapping[str, Mapping[str, Sequence[str]]] | None = None,
) -> Planes:  # fmt: skip
    """Start consumer and pool in parallel threads, install the Liqo CRDs on both; all or nothing.

    ``extra_args``: per plane name ("consumer", "pool"), per component, arguments to add (e.g. audit)."""
    t0 = time.monotonic()
    bins = find_binaries()  # once, before the threads: a missing binary triggers a single build
    if crds:
        liqo_crds_dir()  # likewise: a missing chart is fetched once
    extra = extra_args or {}
    planes = Planes(
        consumer=ControlPlane(
            "consumer", base_dir=base_dir, service_cidr=CONSUMER_SERVICE_CIDR, grace=grace, bins=bins,
            extra_args=extra.get("consumer"),
        ),
        pool=ControlPlane(
            "pool", base_dir=base_dir, service_cidr=POOL_SERVICE_CIDR, grace=grace, bins=bins,
            extra_args=extra.get("pool"),
        ),
    )  # fmt: skip
    try:
        with ThreadPoolExecutor(2) as ex:
            futures = [ex.submit(_bring_up, p, timeout, crds) for p in (planes.consumer, planes.pool)]
            for f in futures:
                f.result()
    except BaseException:
        planes.stop()
        raise
    planes.startup_seconds = time.monotonic() - t0
    log.info(
        "planes up in %.1fs: consumer %s, pool %s",
        planes.startup_seconds,
        planes.consumer.url,
        planes.pool.url,
    )
    return planes


def _bring_up(plane: ControlPlane, timeout: float, crds: bool) -> None:
    plane.start(timeout=timeout, crds=crds)
