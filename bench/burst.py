"""Burst: a Deployment of N pods scaled at once; time from creation to all Running in the consumer
through the VK under test, against "vanilla": the same Deployment applied directly on the pool.

    python -m bench.burst --sizes 100,1000,5000 [--repeat 1] [--order vanilla-first] [--impl vkbridge|liqo]

Both paths are paced by kube-controller-manager's ReplicaSet controller (~20 pods/s): for a burst that is
not, see bench.flood.

Target (DESIGN §5): ratio <= 1.15 at 1,000 pods.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from bench.harness import drain, nodes_for, parse_vk_args, run_figures, testbed_for, watch_reflection
from bench.kubeapi import FirstSeen, watch_phase
from bench.load import deployment
from bench.measure import cpu_delta, loadavg, percentile, sched_delta
from bench.pyspy import PySpy, profile_of
from bench.report import TARGETS, say, table, write_results, yes_no
from bench.scrape import vk_counters, vk_metrics_text
from bench.testbed import Testbed
from e2e.fixtures_pool import SLUG
from e2e.waiting import wait_until


def run_vanilla(tb: Testbed, n: int, tag: str, timeout: float) -> dict[str, Any]:
    """The same Deployment straight on the pool: its controller-manager, scheduler and fake kubelets."""
    ns = f"vanilla-{n}-{tag}"
    tb.create_namespace(tb.pool, ns)
    running = FirstSeen()
    watch = watch_phase(tb.api("pool"), tb.loop, f"/api/v1/namespaces/{ns}/pods", running)
    time.sleep(0.5)  # the watch is listed and open before the first pod exists
    cpu0, sched0 = tb.cpu_snapshot(), tb.sched_snapshot()
    t0 = time.monotonic()
    body = deployment("burst", n, None)
    tb.run(tb.api("pool").request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", body))
    ok = _wait_all(running, n, timeout, f"{n} vanilla pods Running")
    cpu = cpu_delta(cpu0, tb.cpu_snapshot())
    out = run_figures("vanilla", n, running, t0, ok, cpu, sched_delta(sched0, tb.sched_snapshot()))
    watch.cancel()
    say(f"vanilla N={n}: {_secs(out['seconds'])}; cleaning up")
    out["cleanup_seconds"] = drain(tb, tb.pool, ns, None, deployment="burst")
    tb.delete_namespace(tb.pool, ns, wait=False)
    return out


def run_reflected(tb: Testbed, n: int, tag: str, timeout: float, profile_dir: Path | None) -> dict[str, Any]:
    ns = f"burst-{n}-{tag}"
    remote = tb.offloaded_namespace(ns)
    running, bound = FirstSeen(), FirstSeen()
    shadows, remote_running = FirstSeen(), FirstSeen()
    watches = watch_reflection(tb, ns, remote, running, bound, shadows, remote_running)
    time.sleep(0.5)
    spy = PySpy(tb.vk.pid, profile_dir / f"burst-{n}-{tag}.txt").start() if tb.vk and profile_dir else None
    rss0, cpu0, sched0 = tb.vk_rss_mb(), tb.cpu_snapshot(), tb.sched_snapshot()
    counters0 = _counters(tb)
    t0 = time.monotonic()
    tb.run(
        tb.api("consumer").request(
            "POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("burst", n, SLUG)
        )
    )
    ok = _wait_all(running, n, timeout, f"{n} reflected pods Running at home")
    cpu = cpu_delta(cpu0, tb.cpu_snapshot())
    figures = run_figures("reflected", n, running, t0, ok, cpu, sched_delta(sched0, tb.sched_snapshot()))
    counters = {k: round(v - counters0.get(k, 0.0), 3) for k, v in _counters(tb).items()}
    rss1 = tb.vk_rss_mb()
    profile = profile_of(spy)
    for w in watches:
        w.cancel()
    say(f"{tb.opts.impl} N={n}: {_secs(figures['seconds'])}; cleaning up")
    t_clean = time.monotonic()
    tb.run(tb.api("consumer").request("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/burst"))
    try:
        wait_until(
            lambda: tb.count_pods(tb.consumer, ns) == 0 and tb.count_pods(tb.pool, remote) == 0,
            max(300.0, n * 0.3), "the burst's pods to be gone on both sides", 2.0,
        )  # fmt: skip
        pods_gone = round(time.monotonic() - t_clean, 1)
    except TimeoutError:
        pods_gone = None
    tb.delete_namespace(tb.consumer, ns, wait=False)
    vk_cpu = cpu.get("vk", 0.0)
    return {
        **figures,
        "shadowpods_all_created_s": round(shadows.times()[-1] - t0, 2) if len(shadows) >= n else None,
        "remote_all_running_s": (
            round(remote_running.times()[-1] - t0, 2) if len(remote_running) >= n else None
        ),
        "bound_all_s": round(bound.times()[-1] - t0, 2) if len(bound) >= n else None,
        "vk_cpu_seconds_per_1000_pods": round(vk_cpu / n * 1000, 2),
        "vk_rss_mb_before_after": [rss0, rss1],
        "vk_metrics_delta": counters or None,
        "pods_gone_after_delete_s": pods_gone,
        "profile": profile,
    }


def _counters(tb: Testbed) -> dict[str, float]:
    text = vk_metrics_text(tb.vk.opts.metrics_port) if tb.vk else None
    return vk_counters(text) if text else {}


def _wait_all(seen: FirstSeen, n: int, timeout: float, what: str) -> bool:
    try:
        wait_until(lambda: len(seen) >= n, timeout, what, 0.1)
        return True
    except TimeoutError as err:
        say(f"{err} ({len(seen)}/{n})")
        return False


def main(argv: list[str] | None = None, tb: Testbed | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.burst", description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="100,1000,5000", help="comma-separated burst sizes")
    ap.add_argument("--repeat", type=int, default=1, help="runs per size and mode")
    ap.add_argument("--order", choices=("vanilla-first", "reflected-first"), default="vanilla-first")
    ap.add_argument("--timeout-per-pod", type=float, default=0.5, help="seconds per pod (at least 300 s)")
    args = parse_vk_args(ap, argv, "burst compares a VK with vanilla")
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    runs: list[dict[str, Any]] = []
    with testbed_for(args, tb, nodes_for(max(sizes))) as tb:
        run = tb.describe()
        profile_dir = (tb.work.parent / "bench-profiles") if args.profile and PySpy.available() else None
        for n in sizes:
            timeout = max(300.0, n * args.timeout_per_pod)
            for rep in range(args.repeat):
                tag = f"{rep}{int(time.time()) % 100000}"
                modes = (
                    ["vanilla", "reflected"] if args.order == "vanilla-first" else ["reflected", "vanilla"]
                )
                for mode in modes:
                    load = loadavg()
                    say(f"burst N={n} rep {rep + 1}/{args.repeat}: {mode}")
                    if mode == "vanilla":
                        r = run_vanilla(tb, n, tag, timeout)
                    else:
                        r = run_reflected(tb, n, tag, timeout, profile_dir)
                    r["rep"] = rep
                    r["loadavg_before"] = load
                    r["loadavg_after"] = loadavg()
                    runs.append(r)
        vk_log = tb.vk.log_path if tb.vk else None
        errors = tb.vk_error_lines()
    summary = summarize(runs, sizes)
    at_1000 = next((s["ratio"] for s in summary if s["n"] == 1000), None)
    verdict = None if at_1000 is None else at_1000 <= TARGETS["burst_ratio_at_1000"]
    path = write_results(
        "burst",
        {
            "args": vars(args) | {"workdir": str(args.workdir)},
            **run,
            "summary": summary,
            "runs": runs,
            "target": {"ratio_at_1000_max": TARGETS["burst_ratio_at_1000"], "met": verdict},
            "vk_log": str(vk_log),
            "vk_error_lines": errors,
        },
    )
    print()
    print(
        table(
            [
                "N",
                "vanilla s",
                f"{run['impl']} s",
                "ratio",
                "vk t50 s",
                "vk t90 s",
                "vk CPU s/1k",
                "vk wait/cpu",
                "load1",
            ],
            [
                [
                    s["n"],
                    s["vanilla_s"],
                    s["vk_s"],
                    s["ratio"],
                    s["vk_t50_s"],
                    s["vk_t90_s"],
                    s["vk_cpu_per_1000"],
                    s["vk_runqueue_wait_per_cpu_s"],
                    s["load1"],
                ]
                for s in summary
            ],
        )
    )
    print(f"\ntarget ratio <= {TARGETS['burst_ratio_at_1000']} at N=1000: {_verdict(verdict)}")
    print(f"{run['impl']} isolated={yes_no(run['isolated'])}, {errors} error lines in its log")
    print(f"results: {path}")
    return 0


def summarize(runs: list[dict[str, Any]], sizes: list[int]) -> list[dict[str, Any]]:
    out = []
    for n in sizes:
        van = [r["seconds"] for r in runs if r["n"] == n and r["mode"] == "vanilla" and r["seconds"]]
        vk = [r for r in runs if r["n"] == n and r["mode"] == "reflected"]
        vks = [r["seconds"] for r in vk if r["seconds"]]
        v_med, k_med = percentile(van, 50), percentile(vks, 50)
        best = vk[0] if vk else {}
        out.append(
            {
                "n": n,
                "vanilla_s": v_med,
                "vk_s": k_med,
                "ratio": round(k_med / v_med, 3) if v_med and k_med else None,
                "vk_t50_s": (best.get("timeline") or {}).get("t50_s"),
                "vk_t90_s": (best.get("timeline") or {}).get("t90_s"),
                "vk_cpu_per_1000": best.get("vk_cpu_seconds_per_1000_pods"),
                "load1": (best.get("loadavg_before") or [None])[0],
                "loadavg_before": best.get("loadavg_before"),
                "loadavg_after": best.get("loadavg_after"),
                "vk_runqueue_wait_per_cpu_s": _wait_ratio(best),
            }
        )
    return out


def _wait_ratio(run: dict[str, Any]) -> float | None:
    """Seconds the VK waited for a CPU per second it ran (0 on an idle machine)."""
    s = (run.get("sched") or {}).get("vk") or {}
    on, wait = s.get("on_cpu_s"), s.get("runqueue_wait_s")
    return round(wait / on, 1) if on and wait is not None else None


def _secs(v: float | None) -> str:
    return "TIMEOUT" if v is None else f"{v:.1f}s"


def _verdict(v: bool | None) -> str:
    return "not measured" if v is None else ("MET" if v else "MISSED")


if __name__ == "__main__":
    sys.exit(main())
