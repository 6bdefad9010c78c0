"""A kubelet serving CSR that is never approved is given up and asked anew, as client-go's certificate
manager does after 15 minutes (issue 35, confirm or refute). The home API is in memory: it stores CSRs,
names them from ``generateName``, and its watches stay quiet (nobody approves)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from e2e.waiting import eventually
from vkbridge.credentials import serving
from vkbridge.credentials.serving import ServingCertificateManager
from vkbridge.kube.client import CERTIFICATESIGNINGREQUESTS, ApiError, Resource

Obj = dict[str, Any]


class QuietHome:
    """CSRs are created and read; nobody approves them, so every watch is silent until closed."""

    def __init__(self) -> None:
        self.csrs: dict[str, Obj] = {}
        self._n = itertools.count(1)

    async def create(self, resource: Resource, body: Obj, namespace: str | None = None, **_kw: Any) -> Obj:
        assert resource is CERTIFICATESIGNINGREQUESTS
        n = next(self._n)
        meta = {
            **body["metadata"],
            "name": f"{body['metadata']['generateName']}{n}",
            "resourceVersion": str(n),
        }
        self.csrs[meta["name"]] = {**body, "metadata": meta}
        return self.csrs[meta["name"]]

    async def get(self, resource: Resource, name: str, namespace: str | None = None, **_kw: Any) -> Obj:
        if name not in self.csrs:
            raise ApiError(404, "NotFound", f"csr {name!r} not found")
        return self.csrs[name]

    async def watch(
        self, resource: Resource, namespace: str | None = None, **_kw: Any
    ) -> AsyncGenerator[Obj]:
        await asyncio.Event().wait()  # silent until the caller's bound ends it
        yield {}


async def test_a_serving_csr_never_approved_is_given_up_and_a_new_one_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(serving, "CSR_WAIT_TIMEOUT", 0.3, raising=False)  # 15 minutes in production
    home = QuietHome()
    mgr = ServingCertificateManager(
        home,  # type: ignore[arg-type]
        node_name="vk",
        node_ip="10.0.0.1",
        wait_log_interval=0.1,
        retry_base=0.01,
        retry_cap=0.05,
    )
    task = asyncio.create_task(mgr.run())
    try:
        await eventually(lambda: len(home.csrs) >= 2, 3.0, "a second CSR after the first timed out")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    first, second = list(home.csrs)[:2]
    assert first != second and home.csrs[first]["spec"]["request"] != home.csrs[second]["spec"]["request"]
    assert mgr.current_keypair() is None  # nothing issued: nothing served


def test_the_default_wait_for_approval_is_client_gos_fifteen_minutes() -> None:
    assert serving.CSR_WAIT_TIMEOUT == 15 * 60
