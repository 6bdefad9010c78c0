"""Memory and CPU of the vkbridge process as the number of reflected pods grows (default 1,000, 5,000,
10,000): one offloaded Deployment scaled step by step; at each plateau (all Running at home, then a
settle time) the RSS of vkbridge (and of every other process, for context), and the CPU seconds vkbridge
spent per 1,000 pods reflected during the step.

    python -m bench.memory [--steps 1000,5000,10000] [--kcm-qps 100]

The controller-managers' client QPS is raised by default (--kcm-qps; Kubernetes' default is 20) only so
that 10,000 pods exist sooner: it changes nothing vkbridge does per pod. Target (DESIGN §5): <= 150 MB
RSS at 10,000 pods.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from bench.harness import drain, nodes_for, parse_vk_args, testbed_for
from bench.kubeapi import FirstSeen, watch_phase
from bench.load import deployment
from bench.measure import cpu_delta, loadavg, sched_delta
from bench.pyspy import PySpy, profile_of
from bench.report import TARGETS, say, table, write_results, yes_no
from bench.testbed import Testbed
from bench.traced import TracedVkbridge
from e2e.fixtures_pool import SLUG
from e2e.waiting import wait_until


def _at_least(seen: FirstSeen, n: int) -> Callable[[], bool]:
    return lambda: len(seen) >= n


def main(argv: list[str] | None = None, tb: Testbed | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.memory", description=__doc__.splitlines()[0])
    ap.add_argument("--steps", default="1000,5000,10000", help="reflected pod counts to measure at")
    ap.add_argument("--settle", type=float, default=20.0, help="seconds at each plateau before sampling")
    ap.add_argument("--step-timeout", type=float, default=1800.0, help="max seconds to reach a step")
    ap.add_argument(
        "--tracemalloc", action="store_true", help="vkbridge under tracemalloc: top allocation sites per step"
    )
    ap.add_argument("--kcm-qps", type=int, default=100, help="controller-manager client QPS (0: default 20)")
    args = parse_vk_args(ap, argv, "memory measures a VK")
    steps = sorted(int(s) for s in args.steps.split(",") if s.strip())
    if args.tracemalloc and args.impl != "vkbridge":
        ap.error("--tracemalloc runs vkbridge (Python) only")
    rows: list[dict[str, Any]] = []
    extra = {"kcm_qps": args.kcm_qps or None, "tracemalloc": args.tracemalloc}
    with testbed_for(args, tb, nodes_for(steps[-1]), **extra) as tb:
        assert tb.vk is not None
        run = tb.describe()
        ns = f"mem-{int(time.time()) % 100000}"
        remote = tb.offloaded_namespace(ns)
        running = FirstSeen()
        watch_phase(tb.api("consumer"), tb.loop, f"/api/v1/namespaces/{ns}/pods", running)
        body = deployment("mem", 0, SLUG)
        tb.run(tb.api("consumer").request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body))
        time.sleep(args.settle)
        idle: dict[str, Any] = {
            "pods": 0,
            "vk_rss_mb": tb.vk_rss_mb(),
            "vk_hwm_mb": tb.vk_hwm_mb(),
            "rss_mb": tb.rss_snapshot(),
            "loadavg": loadavg(),
        }
        say(f"idle vkbridge RSS {idle['vk_rss_mb']} MB")
        prev = 0
        profile_dir = tb.work.parent / "bench-profiles"
        for step in steps:
            say(f"scaling to {step} reflected pods")
            spy = PySpy(tb.vk.pid, profile_dir / f"memory-{step}.txt").start() if args.profile else None
            cpu0, sched0 = tb.cpu_snapshot(), tb.sched_snapshot()
            load0 = loadavg()
            t0 = time.monotonic()
            tb.run(
                tb.api("consumer").request(
                    "PATCH", f"/apis/apps/v1/namespaces/{ns}/deployments/mem",
                    {"spec": {"replicas": step}}, content_type="application/merge-patch+json",
                )
            )  # fmt: skip
            reached = True
            try:
                wait_until(_at_least(running, step), args.step_timeout, f"{step} pods Running", 1.0)
            except TimeoutError as err:
                say(f"{err}: {len(running)} Running")
                reached = False
            took = time.monotonic() - t0
            cpu = cpu_delta(cpu0, tb.cpu_snapshot())
            sched = sched_delta(sched0, tb.sched_snapshot())
            profile = profile_of(spy)
            cpu_settle0 = tb.vk_cpu()
            time.sleep(args.settle)
            idle_cpu = (tb.vk_cpu() - cpu_settle0) / args.settle
            have = len(running)
            snapshot = None
            if isinstance(tb.vk, TracedVkbridge):
                snapshot = tb.vk.snapshot(f"pods-{have}")
                say(f"tracemalloc: {snapshot.read_text().splitlines()[0]} ({snapshot})")
            added = max(1, have - prev)
            row = {
                "pods": have,
                "target_pods": step,
                "reached": reached,
                "seconds_to_reach": round(took, 1),
                "vk_rss_mb": tb.vk_rss_mb(),
                "vk_hwm_mb": tb.vk_hwm_mb(),
                "vk_cpu_seconds": cpu.get("vk", 0.0),
                "vk_cpu_seconds_per_1000_pods": round(cpu.get("vk", 0.0) / added * 1000, 2),
                "vk_cpu_cores_at_rest": round(idle_cpu, 3),
                "cpu_seconds": cpu,
                "sched": sched,
                "rss_mb": tb.rss_snapshot(),
                "loadavg": loadavg(),
                "loadavg_before": load0,
                "profile": profile,
                "tracemalloc": snapshot.read_text() if snapshot else None,
            }
            rows.append(row)
            per_1k = row["vk_cpu_seconds_per_1000_pods"]
            say(f"{have} pods: {run['impl']} RSS {row['vk_rss_mb']} MB, {per_1k} CPU s per 1,000 pods")
            prev = have
            if not reached or not tb.vk.alive():
                break
        log_errors = tb.vk_error_lines()
        say("cleaning up")
        drain(tb, tb.consumer, ns, remote, timeout=max(300.0, steps[-1] * 0.3), deployment="mem")
        tb.delete_namespace(tb.consumer, ns, wait=False)
    print()
    headers = [
        "pods",
        "reached in s",
        "vk RSS MB",
        "vk peak MB",
        "vk CPU s/1k pods",
        "vk cores at rest",
        "load1",
    ]
    lines = [[0, None, idle["vk_rss_mb"], idle["vk_hwm_mb"], None, None, idle["loadavg"][0]]]
    for r in rows:
        lines.append(
            [r["pods"], r["seconds_to_reach"], r["vk_rss_mb"], r["vk_hwm_mb"],
             r["vk_cpu_seconds_per_1000_pods"], r["vk_cpu_cores_at_rest"], r["loadavg"][0]]
        )  # fmt: skip
    print(table(headers, lines))
    at_10k = next((r["vk_rss_mb"] for r in rows if r["pods"] >= 10000), None)
    target = TARGETS["rss_mb_at_10000"]
    met = None if at_10k is None else at_10k <= target
    word = "not measured (10,000 pods not reached)" if met is None else ("MET" if met else "MISSED")
    print(f"\ntarget RSS <= {target:g} MB at 10,000 pods: {word}")
    print(f"{run['impl']} isolated={yes_no(run['isolated'])}, {log_errors} error lines in its log")
    path = write_results(
        "memory",
        {
            "args": vars(args) | {"workdir": str(args.workdir)},
            **run,
            "idle": idle,
            "steps": rows,
            "target_mb": target,
            "met": met,
            "vk_error_lines": log_errors,
        },
    )
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
