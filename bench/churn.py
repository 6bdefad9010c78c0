"""Steady churn: pods created at a fixed rate (default 20/s for 2 minutes, each deleted after a lifetime),
and the latency vkbridge adds per pod, from our own watches on both API servers:

- outbound: local pod bound (spec.nodeName seen) -> ShadowPod ADDED on the pool;
- inbound: remote pod Running -> local pod Running.

    python -m bench.churn [--rate 20] [--duration 120] [--lifetime 30] [--impl vkbridge|liqo] [--isolate]
    python -m bench.churn --quick        # 20 pods/s for 30 s

Target (DESIGN §5): p99 <= 100 ms for both. The last line printed is always
`churn p99 outbound <ms> ms inbound <ms> ms at <rate>/s isolated=<yes|no>`.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Mapping
from typing import Any

from bench.harness import drain, nodes_for, parse_vk_args, testbed_for, watch_reflection
from bench.kubeapi import FirstSeen
from bench.load import Creations, paced
from bench.measure import cpu_delta, distribution_ms, loadavg, sched_delta
from bench.pyspy import PySpy, profile_of
from bench.report import TARGETS, churn_line, say, table, write_results, yes_no
from bench.scrape import histogram_from_text, vk_counters, vk_log_outbound, vk_metrics_text
from bench.testbed import Testbed
from e2e.fixtures_pool import SLUG
from e2e.waiting import wait_until


def latencies(a: Mapping[str, float], b: Mapping[str, float], names: set[str]) -> list[float]:
    """b - a for every name stamped in both (seconds)."""
    return [b[n] - a[n] for n in names if n in a and n in b]


def main(argv: list[str] | None = None, tb: Testbed | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.churn", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="30 s of creation, lifetime 15 s, settle 30 s")
    ap.add_argument("--rate", type=float, default=20.0, help="pods created per second")
    ap.add_argument("--duration", type=float, default=120.0, help="seconds of creation")
    ap.add_argument(
        "--lifetime", type=float, default=30.0, help="seconds before each pod is deleted (0: never)"
    )
    ap.add_argument("--settle", type=float, default=60.0, help="max seconds to wait for the last pods")
    args = parse_vk_args(ap, argv, "churn measures what a VK adds")
    if args.quick:
        args.duration, args.lifetime, args.settle = 30.0, 15.0, 30.0
    total = int(args.rate * args.duration)
    live = total if args.lifetime <= 0 else int(args.rate * args.lifetime) + 1
    made = Creations()
    sent, errors = made.sent, made.errors
    bound, running, shadows, remote_running = FirstSeen(), FirstSeen(), FirstSeen(), FirstSeen()
    with testbed_for(args, tb, nodes_for(live)) as tb:
        assert tb.vk is not None
        run = tb.describe()
        ns = f"churn-{int(time.time()) % 100000}"
        remote = tb.offloaded_namespace(ns)
        watches = watch_reflection(tb, ns, remote, running, bound, shadows, remote_running)
        time.sleep(1.0)
        profile_dir = tb.work.parent / "bench-profiles"
        spy = PySpy(tb.vk.pid, profile_dir / f"churn-{ns}.txt").start() if args.profile else None
        load0 = loadavg()
        cpu0, sched0 = tb.cpu_snapshot(), tb.sched_snapshot()
        say(f"churn: {args.rate:g} pods/s for {args.duration:g}s ({total} pods), lifetime {args.lifetime:g}s")
        t0 = time.monotonic()
        job = tb.loop.submit(
            paced(tb.api("consumer"), ns, SLUG, args.rate, args.duration, args.lifetime, made)
        )
        wait_until(lambda: len(sent) >= total, args.duration + 60, "the creations to be sent", 0.5)
        created_in = time.monotonic() - t0
        load_mid = loadavg()
        achieved, answered = made.achieved_rate(), made.answered_rate()
        # Every pod should reach Running before its deletion; give the tail a bounded wait.
        try:
            wait_until(lambda: len(running) >= total, args.settle, "the last pods to run at home", 0.5)
        except TimeoutError as err:
            say(f"{err}: {len(running)}/{total} Running at home")
        cpu = cpu_delta(cpu0, tb.cpu_snapshot())
        sched = sched_delta(sched0, tb.sched_snapshot())
        profile = profile_of(spy)
        metrics_text = vk_metrics_text(tb.vk.opts.metrics_port)
        try:
            job.result(timeout=args.lifetime + 120)
        except Exception as err:
            errors.append(f"pacer: {err}")
        for w in watches:
            w.cancel()
        vk_outbound_log = vk_log_outbound(tb.vk.log_text(), ns)
        rss = tb.vk_rss_mb()
        run.update(tb.vk_at_end())
        load_after = loadavg()
        say("cleaning up")
        cleanup = drain(tb, tb.consumer, ns, remote)
        tb.delete_namespace(tb.consumer, ns, wait=False)
    names = set(sent)
    outbound = latencies(bound.at, shadows.at, names)
    inbound = latencies(remote_running.at, running.at, names)
    rows = {
        "outbound: bound -> ShadowPod created (watch)": distribution_ms(outbound),
        "inbound: remote Running -> local Running (watch)": distribution_ms(inbound),
        "outbound per vkbridge log (first handle -> created)": distribution_ms(vk_outbound_log),
        "context: create sent -> local bound": distribution_ms(latencies(sent, bound.at, names)),
        "context: ShadowPod -> remote Running (pool side)": distribution_ms(
            latencies(shadows.at, remote_running.at, names)
        ),
        "context: create sent -> local Running (end to end)": distribution_ms(
            latencies(sent, running.at, names)
        ),
    }
    print()
    print(
        table(
            ["latency", "n", "p50 ms", "p90 ms", "p99 ms", "max ms"],
            [[k, v["count"], v["p50_ms"], v["p90_ms"], v["p99_ms"], v["max_ms"]] for k, v in rows.items()],
        )
    )
    target = TARGETS["latency_p99_ms"]
    verdicts = {
        k: (None if v["p99_ms"] is None else v["p99_ms"] <= target)
        for k, v in rows.items()
        if k.startswith(("outbound:", "inbound:"))
    }
    for k, v in verdicts.items():
        word = "-" if v is None else ("MET" if v else "MISSED")
        print(f"target p99 <= {target:g} ms, {k.split(':')[0]}: {word}")
    vk_hist: dict[str, Any] = {"available": metrics_text is not None}
    if metrics_text is not None:
        vk_hist["counters"] = vk_counters(metrics_text)
        for direction in ("outbound", "inbound"):
            vk_hist[direction] = histogram_from_text(
                metrics_text, "vkbridge_reflection_latency_seconds", "direction", direction
            )
    else:
        print(f"{run['impl']} /metrics did not answer: figures above come from the bench's own watches")
    vk_cpu = cpu.get("vk", 0.0)
    per_1000 = vk_cpu / max(1, len(sent)) * 1000
    print(f"created {len(sent)} pods in {created_in:.1f}s ({achieved} started/s, {answered} answered/s), "
          f"{len(errors)} errors; {run['vk_error_lines']} error lines in the {run['impl']} log")  # fmt: skip
    print(f"{run['impl']} CPU {vk_cpu:.1f}s ({per_1000:.1f}s per 1,000 pods), RSS {rss} MB")
    vs = sched.get("vk", {})
    on_cpu, waited = vs.get("on_cpu_s"), vs.get("runqueue_wait_s")
    print(f"load {load0} -> {load_mid} -> {load_after}; {run['impl']} on a CPU {on_cpu}s, waiting for one "
          f"{waited}s; isolated={yes_no(run['isolated'])}")  # fmt: skip
    path = write_results(
        "churn",
        {
            "args": vars(args) | {"workdir": str(args.workdir)},
            **run,
            "pods_created": len(sent),
            "achieved_create_rate": achieved,
            "answered_create_rate": answered,
            "creation_seconds": round(created_in, 1),
            "errors": errors[:50],
            "error_count": len(errors),
            "latencies": rows,
            "target_p99_ms": target,
            "met": verdicts,
            "vkbridge_metrics_histogram": vk_hist,
            "cpu_seconds": cpu,
            "sched": sched,
            "vk_cpu_seconds_per_1000_pods": round(vk_cpu / max(1, len(sent)) * 1000, 2),
            "vk_rss_mb": rss,
            "loadavg_before": load0,
            "loadavg_during": load_mid,
            "loadavg_after": load_after,
            "cleanup_seconds": cleanup,
            "profile": profile,
            "raw": {
                "outbound_s": sorted(round(x, 4) for x in outbound),
                "inbound_s": sorted(round(x, 4) for x in inbound),
            },
        },
    )
    if run.get("vk_alive_at_end") is False:
        print(f"{run['impl']} EXITED during the run: its figures are partial (see its log)")
    print(f"results: {path}")
    out_p99 = rows["outbound: bound -> ShadowPod created (watch)"]["p99_ms"]
    in_p99 = rows["inbound: remote Running -> local Running (watch)"]["p99_ms"]
    print(churn_line(out_p99, in_p99, args.rate, run["isolated"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
