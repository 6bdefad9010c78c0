"""What every benchmark script shares on top of the Testbed: the common flags, a testbed for a script
(its own, or bench.run_all's), the namespace to work in (offloaded, or on the pool for vanilla), the
reflection watches, and the drain between two measurements.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from bench.kubeapi import FirstSeen, watch_phase
from bench.load import delete_pods
from bench.measure import timeline
from bench.report import say
from bench.testbed import IMPLS, NODE_PODS, Testbed, TestbedOptions
from e2e.controlplane import ControlPlane
from e2e.fixtures_pool import SLUG
from e2e.waiting import wait_until


def nodes_for(pods: int) -> int:
    """Fake pool workers for a number of pods (1,000 each), with one spare, at least two."""
    return max(2, math.ceil(pods / (NODE_PODS * 0.9)) + 1)


def common_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workdir", type=Path, default=None, help="where the planes live (default: $TMPDIR)")
    p.add_argument(
        "--keep", action="store_true", help="at the end, keep the testbed up until Ctrl-C (to inspect it)"
    )
    p.add_argument("--impl", choices=IMPLS, default="vkbridge", help="the virtual kubelet under test")
    p.add_argument(
        "--isolate", action="store_true", help="the VK on a core of its own, everything else on the others"
    )
    p.add_argument("--profile", action="store_true", help="py-spy record the VK during the measurement")
    p.add_argument(
        "--vk-arg",
        action="append",
        default=[],
        help="extra vkbridge flag (repeat): --vk-arg=--client-qps=200",
    )
    p.add_argument("--pod-workers", type=int, default=10, help="vkbridge --pod-reflection-workers")
    p.add_argument(
        "--kubelet-events",
        choices=("warnings", "all"),
        default="warnings",
        help="Events the fake pool workers post: all = a real kubelet's (Pulled/Created/Started per "
        "container), which the VK watches and copies home; warnings (default) keeps the testbed lighter",
    )


def parse_vk_args(ap: argparse.ArgumentParser, argv: list[str] | None, measures: str) -> argparse.Namespace:
    """argv parsed with the common flags, for a script that measures a VK (``measures`` says what it
    does with one): --impl vanilla, which has none, is refused."""
    common_args(ap)
    args = ap.parse_args(argv)
    if args.impl == "vanilla":
        ap.error(f"{measures}: --impl vkbridge or liqo")
    return args


def watch_reflection(
    tb: Testbed, ns: str, remote: str, running: FirstSeen, bound: FirstSeen, shadows: FirstSeen,
    remote_running: FirstSeen,
) -> list[Future[None]]:  # fmt: skip
    """The three watches a reflected pod's journey is timed by: local pods (bound, Running), ShadowPods
    (created) and remote pods (Running)."""
    return [
        watch_phase(tb.api("consumer"), tb.loop, f"/api/v1/namespaces/{ns}/pods", running, bound=bound),
        watch_phase(
            tb.api("pool"),
            tb.loop,
            f"/apis/offloading.liqo.io/v1beta1/namespaces/{remote}/shadowpods",
            FirstSeen(),
            added=shadows,
        ),
        watch_phase(tb.api("pool"), tb.loop, f"/api/v1/namespaces/{remote}/pods", remote_running),
    ]


def run_figures(
    mode: str, n: int, running: FirstSeen, t0: float, ok: bool, cpu: dict[str, float], sched: dict[str, Any]
) -> dict[str, Any]:
    """What every burst and flood run reports the same way: seconds from ``t0`` until all ``n`` pods
    ran (None when they did not: ``ok`` false), when each share did, and the CPU and run-queue time."""
    return {
        "mode": mode,
        "n": n,
        "seconds": round(running.times()[-1] - t0, 2) if ok else None,
        "running": len(running),
        "timeline": timeline(running.times(), t0, n),
        "cpu_seconds": cpu,
        "cpu_seconds_total": round(sum(cpu.values()), 1),
        "sched": sched,
    }


def parse_vanilla_args(
    ap: argparse.ArgumentParser, argv: list[str] | None
) -> tuple[argparse.Namespace, list[bool]]:
    """argv parsed with the common flags and --with-vanilla, for a script that also measures vanilla
    (rate, flood); with the runs to make, vanilla first (True): only vanilla for --impl vanilla, both
    with --with-vanilla, else only the VK's. --isolate pins a VK, so not vanilla."""
    ap.add_argument(
        "--with-vanilla", action="store_true", help="also the vanilla runs (first), on the same testbed"
    )
    common_args(ap)
    args = ap.parse_args(argv)
    if args.impl == "vanilla" and args.isolate:
        ap.error("--isolate pins a VK: vanilla has none (run it shared)")
    modes = [True] if args.impl == "vanilla" else ([True, False] if args.with_vanilla else [False])
    return args, modes


@contextlib.contextmanager
def testbed_for(args: argparse.Namespace, tb: Testbed | None, nodes: int, **extra: Any) -> Iterator[Testbed]:
    """The caller's testbed when given (bench.run_all runs several benchmarks on one), else a fresh one
    from the common flags, torn down at the end."""
    if tb is not None:
        yield tb
        return
    opts = TestbedOptions(
        nodes=nodes, impl=args.impl, isolate=args.isolate, workdir=args.workdir, keep=args.keep,
        vk_args=args.vk_arg, pod_workers=args.pod_workers, kubelet_events=args.kubelet_events, **extra,
    )  # fmt: skip
    with Testbed(opts) as fresh:
        yield fresh


def drain(
    tb: Testbed, plane: ControlPlane, ns: str, remote: str | None, timeout: float = 300, deployment: str = "",
    shadows: bool = False,
) -> float | None:  # fmt: skip
    """Delete every pod of `ns` (through its Deployment when given, through its ShadowPods with `shadows`,
    else directly) and wait until none is left there (nor in `remote` on the pool); seconds (None on
    timeout)."""
    t0 = time.monotonic()
    if deployment:
        path = f"/apis/apps/v1/namespaces/{ns}/deployments/{deployment}?propagationPolicy=Background"
        tb.run(tb.api(plane.name).request("DELETE", path))
    else:
        tb.run(delete_pods(tb.api(plane.name), ns, shadows))

    def gone() -> bool:
        if remote is not None and tb.vk is not None and not tb.vk.alive():
            raise RuntimeError(f"{tb.opts.impl} exited: nobody deletes the pods of {ns} (see its log)")
        return tb.count_pods(plane, ns) == 0 and (remote is None or tb.count_pods(tb.pool, remote) == 0)

    try:
        wait_until(gone, timeout, f"the pods of {ns} to be gone", 1.0)
    except (TimeoutError, RuntimeError) as err:
        say(str(err))
        return None
    return round(time.monotonic() - t0, 1)


def workspace(tb: Testbed, name: str, vanilla: bool) -> tuple[ControlPlane, str, str | None, str | None]:
    """(plane to create on, namespace, remote namespace, slug) for reflected pods or for the vanilla twin."""
    if vanilla:
        tb.create_namespace(tb.pool, name)
        return tb.pool, name, None, None
    return tb.consumer, name, tb.offloaded_namespace(name), SLUG
