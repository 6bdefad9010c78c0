"""Every benchmark in turn (each on a fresh testbed), then one summary table against DESIGN §5 targets.

    python -m bench.run_all [--quick] [--burst-sizes 100,1000,5000] [--memory-steps 1000,5000,10000]

--quick: small sizes (burst 100, churn 30 s, 200 API-call pods, memory 1,000) to check the harness.
Writes bench/results/all-<timestamp>.json with the paths of the individual result files.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import apicalls, burst, churn, memory
from bench.common import RESULTS_DIR, TARGETS, loadavg, say, table, write_results


def newest(name: str, since: float) -> Path | None:
    files = [p for p in RESULTS_DIR.glob(f"{name}-*.json") if p.stat().st_mtime >= since]
    return max(files, key=lambda p: p.stat().st_mtime) if files else None


def run(name: str, fn: Callable[[list[str]], int], argv: list[str]) -> dict[str, Any] | None:
    say(f"=== {name} {' '.join(argv)}")
    t0 = time.time()
    try:
        fn(argv)
    except Exception as err:  # one failed benchmark must not hide the others' figures
        say(f"{name} failed: {type(err).__name__}: {err}")
        return {"error": f"{type(err).__name__}: {err}"}
    path = newest(name, t0)
    if path is None:
        return None
    doc: dict[str, Any] = json.loads(path.read_text())
    doc["_path"] = str(path)
    return doc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--burst-sizes", default="100,1000,5000")
    ap.add_argument("--memory-steps", default="1000,5000,10000")
    ap.add_argument("--apicall-pods", type=int, default=500)
    ap.add_argument("--churn-duration", type=float, default=120.0)
    ap.add_argument("--profile", action="store_true", help="py-spy vkbridge in burst, churn and memory")
    ap.add_argument("--skip", default="", help="comma-separated: burst,churn,apicalls,memory")
    args = ap.parse_args(argv)
    if args.quick:
        args.burst_sizes, args.memory_steps, args.apicall_pods, args.churn_duration = "100", "1000", 200, 30.0
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    prof = ["--profile"] if args.profile else []
    plan: list[tuple[str, Callable[[list[str]], int], list[str]]] = [
        ("burst", burst.main, ["--sizes", args.burst_sizes, *prof]),
        ("churn", churn.main, ["--duration", str(args.churn_duration), *prof]),
        ("apicalls", apicalls.main, ["--pods", str(args.apicall_pods)]),
        ("memory", memory.main, ["--steps", args.memory_steps, *prof]),
    ]
    docs: dict[str, dict[str, Any] | None] = {}
    for name, fn, bench_argv in plan:
        if name not in skip:
            docs[name] = run(name, fn, bench_argv)
    rows = headline(docs)
    print()
    print(table(["figure", "value", "target", "verdict", "load1"], rows))
    path = write_results(
        "all",
        {
            "args": vars(args),
            "loadavg_at_end": loadavg(),
            "headline": [
                dict(zip(["figure", "value", "target", "verdict", "load1"], r, strict=True)) for r in rows
            ],
            "files": {k: (v or {}).get("_path") for k, v in docs.items()},
        },
    )
    print(f"results: {path}")
    return 0


def headline(docs: dict[str, dict[str, Any] | None]) -> list[list[object]]:
    rows: list[list[object]] = []

    def verdict(ok: bool | None) -> str:
        return "-" if ok is None else ("MET" if ok else "MISSED")

    b = docs.get("burst") or {}
    for s in b.get("summary") or []:
        ok = None if s["n"] != 1000 or s["ratio"] is None else s["ratio"] <= TARGETS["burst_ratio_at_1000"]
        rows.append([f"burst ratio N={s['n']}", s["ratio"], "<= 1.15 at 1000", verdict(ok), s["load1"]])
    c = docs.get("churn") or {}
    for key, lat in (c.get("latencies") or {}).items():
        if key.startswith(("outbound:", "inbound:")):
            ok = None if lat["p99_ms"] is None else lat["p99_ms"] <= TARGETS["latency_p99_ms"]
            rows.append([f"churn p99 ms, {key.split(':')[0]}", lat["p99_ms"], "<= 100", verdict(ok),
                         (c.get("loadavg_during") or [None])[0]])  # fmt: skip
    a = (docs.get("apicalls") or {}).get("headline") or {}
    if a:
        rows.append(
            ["vkbridge writes per pod", a["vkbridge_writes_per_pod"], "<= 3", verdict(a["met"]), None]
        )
        rows.append(["everyone's writes per pod (both servers)", a["everyone_writes_per_pod_reflected"], "-",
                     "-", None])  # fmt: skip
    m = docs.get("memory") or {}
    for s in m.get("steps") or []:
        ok = (s["vk_rss_mb"] <= TARGETS["rss_mb_at_10000"]) if s["pods"] >= 10000 else None
        rows.append([f"vkbridge RSS MB at {s['pods']} pods", s["vk_rss_mb"], "<= 250 at 10000", verdict(ok),
                     s["loadavg"][0]])  # fmt: skip
        cpu = s["vk_cpu_seconds_per_1000_pods"]
        rows.append([f"vkbridge CPU s per 1,000 pods (to {s['pods']})", cpu, "-", "-", s["loadavg"][0]])
    for name, doc in docs.items():
        if doc and "error" in doc:
            rows.append([f"{name} FAILED", doc["error"][:60], "-", "-", None])
    return rows


if __name__ == "__main__":
    sys.exit(main())
