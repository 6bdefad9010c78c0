"""Flood: N bare pods created at once by a fast client (the bench's aiohttp, --concurrency requests in
flight; no ReplicaSet, so kube-controller-manager does not pace it): time from the first create to all
Running, for the VK under test and for vanilla (the same pods created on the pool directly).

    python -m bench.flood --sizes 1000,5000 [--impl vkbridge|liqo|vanilla] [--with-vanilla] [--isolate]

The client's own speed is recorded (creates answered per second), so a slow bench shows as such.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from bench.harness import drain, nodes_for, parse_vanilla_args, run_figures, testbed_for, workspace
from bench.kubeapi import FirstSeen, watch_phase
from bench.load import Creations, all_at_once
from bench.measure import cpu_delta, loadavg, sched_delta
from bench.report import say, table, write_results, yes_no
from bench.testbed import Testbed
from e2e.waiting import wait_until


def flood(tb: Testbed, n: int, args: argparse.Namespace, vanilla: bool) -> dict[str, Any]:
    with tb.shared_for(vanilla):
        return _flood(tb, n, args, vanilla)


def _flood(tb: Testbed, n: int, args: argparse.Namespace, vanilla: bool) -> dict[str, Any]:
    mode = "vanilla" if vanilla else tb.opts.impl
    plane, ns, remote, slug = workspace(tb, f"flood-{mode}-{n}-{int(time.time()) % 100000}", vanilla)
    running = FirstSeen()
    watch = watch_phase(tb.api(plane.name), tb.loop, f"/api/v1/namespaces/{ns}/pods", running)
    time.sleep(1.0)
    made = Creations()
    load0, cpu0, sched0 = loadavg(), tb.cpu_snapshot(), tb.sched_snapshot()
    say(f"flood {mode}: {n} pods at once ({args.concurrency} in flight), isolated={yes_no(tb.isolated)}")
    t0 = time.monotonic()
    tb.run(all_at_once(tb.api(plane.name), ns, slug, n, args.concurrency, made), timeout=n * 2 + 60)
    created_s = time.monotonic() - t0
    ok = True
    try:
        wait_until(lambda: len(running) >= n, max(120.0, n * args.timeout_per_pod), f"{n} pods Running", 0.2)
    except TimeoutError as err:
        say(f"{err} ({len(running)}/{n})")
        ok = False
    cpu, sched = cpu_delta(cpu0, tb.cpu_snapshot()), sched_delta(sched0, tb.sched_snapshot())
    load1 = loadavg()
    watch.cancel()
    out = {
        **run_figures(mode, n, running, t0, ok, cpu, sched),
        "isolated": tb.isolated,
        "all_created_s": round(created_s, 2),
        "achieved_create_rate": made.answered_rate(),
        "started_create_rate": made.achieved_rate(),
        "error_count": len(made.errors),
        "errors": made.errors[:20],
        "loadavg_before": load0,
        "loadavg_after": load1,
    }
    say(f"flood {mode} N={n}: all Running in {out['seconds']}s (created in {created_s:.1f}s); draining")
    out["drain_seconds"] = drain(tb, plane, ns, remote, timeout=max(300.0, n * 0.3))
    tb.delete_namespace(plane, ns, wait=False)
    return out


def main(argv: list[str] | None = None, tb: Testbed | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.flood", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000", help="comma-separated N (e.g. 1000,5000)")
    ap.add_argument("--concurrency", type=int, default=100, help="create requests in flight")
    ap.add_argument("--timeout-per-pod", type=float, default=0.3, help="seconds per pod (at least 120 s)")
    args, modes = parse_vanilla_args(ap, argv)
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    with testbed_for(args, tb, nodes_for(max(sizes))) as tb:
        run = tb.describe()
        runs = [flood(tb, n, args, vanilla) for n in sizes for vanilla in modes]
        run.update(tb.vk_at_end())
    print()
    rows = [[r["mode"], yes_no(r["isolated"]), r["n"], r["seconds"], r["timeline"]["t50_s"],
             r["timeline"]["t90_s"], r["all_created_s"], r["achieved_create_rate"], r["error_count"],
             f"{r['loadavg_before'][0]:g}->{r['loadavg_after'][0]:g}"] for r in runs]  # fmt: skip
    print(table(["mode", "isolated", "N", "all Running s", "t50 s", "t90 s", "created in s", "answered/s",
                 "errors", "load1"], rows))  # fmt: skip
    path = write_results(
        "flood", {"args": vars(args) | {"workdir": str(args.workdir)}, **run, "runs": runs},
    )  # fmt: skip
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
