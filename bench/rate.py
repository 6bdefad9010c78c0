"""Highest sustainable pod rate: bare pods created by the bench itself (no ReplicaSet pacing) at a rising
rate, each step for a fixed duration, until create -> local Running p99 passes 5 s (the Kubernetes
pod-startup SLO) or errors appear; the highest rate that held is the figure.

    python -m bench.rate [--impl vkbridge|liqo|vanilla] [--rates 5,10,20,40,80,160] [--step 20] [--isolate]

--impl vkbridge|liqo: pods created in an offloaded consumer namespace, through the VK; --impl vanilla: the
same pods created on the pool directly (its scheduler and fake workers), so the testbed's own ceiling shows.
--with-vanilla runs the vanilla steps too, first, on the same testbed. --impl vanilla --with-pool-path
adds the pool path without a VK ("pool-path"): the bench creates the ShadowPods a VK would send, in an
offloaded namespace, and times create -> pool pod Running; the pool's webhooks and the emulator's ShadowPod
controller are then on the path, so no VK can hold a higher rate on this testbed than this mode.
Each step's pods are deleted (and gone on both sides) before the next. The client is checked, not trusted:
each step records the create rate the API server answered; below 90% of the asked rate the step is marked
client-limited and stepping stops.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.harness import drain, nodes_for, parse_vanilla_args, testbed_for, watch_reflection, workspace
from bench.kubeapi import FirstSeen, watch_phase
from bench.load import Creations, paced
from bench.measure import cpu_delta, distribution_ms, loadavg, percentile, sched_delta
from bench.report import say, table, write_results, yes_no
from bench.testbed import Testbed
from e2e.fixtures_pool import CONSUMER_ID
from e2e.waiting import wait_until

SLO_S = 5.0


def step_verdict(p99_s: float, errors: int, achieved: float | None, rate: float) -> str:
    """holds | slow (p99 over the SLO) | errors | client-limited (the bench did not reach the rate)."""
    if errors:
        return "errors"
    if achieved is None or achieved < 0.9 * rate:
        return "client-limited"
    return "holds" if p99_s <= SLO_S else "slow"


def all_seen(seen: FirstSeen, names: set[str]) -> Callable[[], bool]:
    return lambda: all(n in seen.at for n in names)


def highest_held(steps: list[dict[str, Any]]) -> float | None:
    """The highest rate of the unbroken run of held steps from the first (None: not even the first)."""
    best = None
    for s in steps:
        if s["verdict"] != "holds":
            break
        best = s["rate"]
    return best


POOL_PATH = "pool-path"


def rate_modes(impl: str, vanilla_modes: list[bool], pool_path: bool) -> list[str]:
    """The runs in order: vanilla's first (True in ``vanilla_modes``), then the VK's, then the pool path."""
    return [("vanilla" if v else impl) for v in vanilla_modes] + ([POOL_PATH] if pool_path else [])


def run_steps(tb: Testbed, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    """``mode``: "vanilla", POOL_PATH (both without a VK), or the testbed's impl."""
    with tb.shared_for(mode in ("vanilla", POOL_PATH)):
        return _run_steps(tb, args, mode)


def _run_steps(tb: Testbed, args: argparse.Namespace, mode: str) -> dict[str, Any]:
    vanilla, pool_path = mode == "vanilla", mode == POOL_PATH
    name = f"rate-{mode}-{int(time.time()) % 100000}"
    if pool_path:
        plane, ns, remote, slug = tb.pool, tb.offloaded_namespace(name), None, None
    else:
        plane, ns, remote, slug = workspace(tb, name, vanilla)
    running, bound, shadows, remote_running = FirstSeen(), FirstSeen(), FirstSeen(), FirstSeen()
    if vanilla or pool_path:
        watches = [watch_phase(tb.api("pool"), tb.loop, f"/api/v1/namespaces/{ns}/pods", running)]
    else:
        assert remote is not None
        watches = watch_reflection(tb, ns, remote, running, bound, shadows, remote_running)
    time.sleep(1.0)
    steps: list[dict[str, Any]] = []
    for rate in [float(r) for r in args.rates.split(",") if r.strip()]:
        made = Creations()
        total = int(rate * args.step)
        load0, cpu0, sched0 = loadavg(), tb.cpu_snapshot(), tb.sched_snapshot()
        say(f"rate {mode}: {rate:g} pods/s for {args.step:g}s ({total} pods), isolated={yes_no(tb.isolated)}")
        job = tb.loop.submit(paced(tb.api(plane.name), ns, slug, rate, args.step, 0, made, f"r{rate:g}-",
                                   CONSUMER_ID if pool_path else None))  # fmt: skip
        job.result(timeout=args.step + 120)
        names = set(made.sent)
        with contextlib.suppress(TimeoutError):
            wait_until(all_seen(running, names), args.settle, "the step's pods Running", 0.2)
        cpu, sched = cpu_delta(cpu0, tb.cpu_snapshot()), sched_delta(sched0, tb.sched_snapshot())
        e2e = [running.at[n] - made.sent[n] if n in running.at else math.inf for n in names]
        p99 = percentile(e2e, 99) or math.inf
        achieved = made.achieved_rate()
        verdict = step_verdict(p99, len(made.errors), achieved, rate)
        step = {
            "rate": rate,
            "pods": total,
            "achieved_create_rate": achieved,
            "answered_create_rate": made.answered_rate(),
            "not_running": sum(1 for v in e2e if v == math.inf),
            "create_to_running": distribution_ms([v for v in e2e if v != math.inf]),
            "create_to_running_p99_ms": None if p99 == math.inf else round(p99 * 1000, 1),
            "errors": made.errors[:20],
            "error_count": len(made.errors),
            "verdict": verdict,
            "loadavg_before": load0,
            "loadavg_after": loadavg(),
            "cpu_seconds": cpu,
            "sched": sched,
        }
        if remote is not None:
            step["outbound"] = distribution_ms([shadows.at[n] - bound.at[n] for n in names
                                                if n in shadows.at and n in bound.at])  # fmt: skip
            step["inbound"] = distribution_ms([running.at[n] - remote_running.at[n] for n in names
                                               if n in running.at and n in remote_running.at])  # fmt: skip
        step["drain_seconds"] = drain(tb, plane, ns, remote, shadows=pool_path)
        steps.append(step)
        p99_ms = step["create_to_running_p99_ms"]
        say(f"rate {mode} {rate:g}/s: p99 {p99_ms} ms, started {achieved}/s, {verdict}")
        if verdict != "holds":
            break
    for w in watches:
        w.cancel()
    if pool_path:
        tb.delete_namespace(tb.consumer, name, wait=False)  # its offloading takes the remote one along
    else:
        tb.delete_namespace(plane, ns, wait=False)
    return {"mode": mode, "isolated": tb.isolated, "steps": steps,
            "highest_rate": highest_held(steps)}  # fmt: skip


def main(argv: list[str] | None = None, tb: Testbed | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.rate", description=__doc__.splitlines()[0])
    ap.add_argument("--rates", default="5,10,20,40,80,160", help="pods/s, one step each, in order")
    ap.add_argument("--step", type=float, default=20.0, help="seconds of creation per step")
    ap.add_argument("--settle", type=float, default=15.0, help="max seconds after a step for its pods to run")
    ap.add_argument(
        "--with-pool-path", action="store_true",
        help="with --impl vanilla: also the pool path without a VK (ShadowPods created by the bench)",
    )  # fmt: skip
    args, vanilla_modes = parse_vanilla_args(ap, argv)
    if args.with_pool_path and args.impl != "vanilla":
        ap.error("--with-pool-path needs --impl vanilla: a running VK would own the bench's ShadowPods")
    modes = rate_modes(args.impl, vanilla_modes, args.with_pool_path)
    top = max(float(r) for r in args.rates.split(",") if r.strip())
    with testbed_for(args, tb, nodes_for(int(top * args.step))) as tb:
        run = tb.describe()
        results = [run_steps(tb, args, mode) for mode in modes]
        run.update(tb.vk_at_end())
    print()
    rows = [
        [r["mode"], yes_no(r["isolated"]), s["rate"], s["pods"], s["achieved_create_rate"],
         s["answered_create_rate"], s["create_to_running"]["p50_ms"], s["create_to_running_p99_ms"],
         s["not_running"], s["error_count"], s["verdict"],
         f"{s['loadavg_before'][0]:g}->{s['loadavg_after'][0]:g}"]
        for r in results for s in r["steps"]
    ]  # fmt: skip
    headers = ["mode", "isolated", "pods/s", "pods", "started/s", "answered/s", "p50 ms", "p99 ms",
               "not Running", "errors", "verdict", "load1"]  # fmt: skip
    print(table(headers, rows))
    path = write_results(
        "rate",
        {"args": vars(args) | {"workdir": str(args.workdir)}, **run, "slo_s": SLO_S, "results": results},
    )  # fmt: skip
    print(f"results: {path}")
    for r in results:
        best = "none" if r["highest_rate"] is None else f"{r['highest_rate']:g}/s"
        print(f"rate highest sustainable {best} impl={r['mode']} isolated={yes_no(r['isolated'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
