"""Issue 35 item 9 end to end: the engine's gauge loop drops a resource the grant no longer lists."""

from __future__ import annotations

import asyncio

from e2e.waiting import eventually
from reflectors.engine import ReflectionEngine
from tests.support.fakeapi import FakeApi
from tests.support.reflection import reflection_context
from vkbridge.grant import Admission, Grant

GPU = "nvidia.com/gpu"


async def test_the_engine_drops_the_gauges_of_a_withdrawn_gpu_grant() -> None:
    ctx = reflection_context(FakeApi("consumer"), FakeApi("pool"))
    engine = ReflectionEngine(ctx, Admission(Grant.from_resource_list({"cpu": "2", GPU: "2", "pods": "10"})))
    registry = ctx.metrics.registry

    def granted(resource: str) -> float | None:
        return registry.get_sample_value("vkbridge_grant_resources", {"resource": resource})

    for grant, gpu in (({"cpu": "2", GPU: "2", "pods": "10"}, 2.0), ({"cpu": "2", "pods": "10"}, None)):
        engine.set_grant(grant)
        loop = asyncio.create_task(engine._gauges_loop())
        try:
            await eventually(lambda: granted("cpu") == 2.0, 2.0, "one round of the gauge loop")
            await asyncio.sleep(0.05)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
        assert granted(GPU) == gpu
        assert registry.get_sample_value("vkbridge_grant_used_resources", {"resource": GPU}) == (
            None if gpu is None else 0.0
        )
