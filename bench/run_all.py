"""Every benchmark for one or both implementations, then a summary against DESIGN §5 and, for
`--impl both`, the side-by-side table (markdown) of bench/README.md.

    python -m bench.run_all --impl both --isolation both     # the comparative run (see bench/README.md)
    python -m bench.run_all --impl vkbridge --isolate        # one impl, VK on a core of its own
    python -m bench.run_all --quick                          # the smallest sizes, to check the harness

One testbed per implementation runs churn, rate, flood, burst and memory in turn (each cleans up after
itself); apicalls gets a testbed of its own (its API servers write an audit log). With `--isolation both`
the isolation-sensitive ones (churn, rate, flood) run shared, then isolated, on the same testbed; burst,
memory and apicalls run once, in the first mode. Vanilla (pods on the pool directly) runs once, shared, on
the first implementation's testbed. Writes bench/results/all-<timestamp>.json (every figure's file) and,
with two implementations, bench/results/side-by-side-<timestamp>.md.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench import apicalls, burst, churn, flood, memory, rate
from bench.harness import nodes_for
from bench.measure import loadavg
from bench.report import RESULTS_DIR, TARGETS, say, table, write_results, yes_no
from bench.sidebyside import side_by_side
from bench.testbed import Testbed, TestbedOptions

Main = Callable[[list[str], Testbed | None], int]
Doc = dict[str, Any]


def newest(name: str, since: float) -> Path | None:
    files = [p for p in RESULTS_DIR.glob(f"{name}-*.json") if p.stat().st_mtime >= since]
    return max(files, key=lambda p: p.stat().st_mtime) if files else None


def run(name: str, fn: Main, argv: list[str], tb: Testbed | None) -> Doc:
    say(f"=== {name} {' '.join(argv)}")
    t0 = time.time()
    try:
        fn(argv, tb)
    except Exception as err:  # one failed benchmark must not hide the others' figures
        say(f"{name} failed: {type(err).__name__}: {err}")
        return {"error": f"{type(err).__name__}: {err}"}
    path = newest(name, t0)
    if path is None:
        return {"error": "no result file"}
    doc: Doc = json.loads(path.read_text())
    doc["_path"] = str(path)
    return doc


def sizes(args: argparse.Namespace) -> dict[str, list[str]]:
    """Each benchmark's own flags for this run (the full sizes fit ~20 min for both impls, both modes)."""
    if args.quick:
        return {
            "churn": ["--rate", "20", "--duration", "20", "--lifetime", "10", "--settle", "20"],
            "rate": ["--rates", "5,10", "--step", "10", "--settle", "10"],
            "flood": ["--sizes", "50"],
            "burst": ["--sizes", "50"],
            "memory": ["--steps", "200", "--settle", "5"],
            "apicalls": ["--pods", "50", "--settle", "5"],
        }
    return {
        "churn": [
            "--rate",
            "20",
            "--duration",
            str(args.churn_duration),
            "--lifetime",
            "20",
            "--settle",
            "30",
        ],
        "rate": ["--rates", args.rates, "--step", str(args.rate_step), "--settle", "10"],
        "flood": ["--sizes", args.flood_sizes],
        "burst": ["--sizes", args.burst_sizes],
        "memory": ["--steps", args.memory_steps],
        "apicalls": ["--pods", str(args.apicall_pods), "--no-delete"],
    }


def run_plan(
    tb: Testbed, plan: list[tuple[str, Main, bool]], modes: list[bool], skip: set[str], common: list[str],
    flags: dict[str, list[str]], vanilla: bool, docs: dict[str, Doc],
) -> None:  # fmt: skip
    """The testbed's benchmarks: the isolation-sensitive ones in every mode, the others in the first."""
    for i, iso in enumerate(modes):
        tb.set_isolation(iso)
        for name, fn, sensitive in plan:
            if name in skip or (not sensitive and i > 0):
                continue
            tb.revive_vk()  # a VK that died in the last benchmark must not void the next ones
            extra = ["--with-vanilla"] if vanilla and i == 0 and name in ("rate", "flood") else []
            docs[f"{name}/{yes_no(iso)}"] = run(name, fn, [*common, *flags[name], *extra], tb)


def run_impl(impl: str, modes: list[bool], args: argparse.Namespace, vanilla: bool) -> dict[str, Doc]:
    """Every benchmark for one implementation; keys "<bench>/<yes|no>" (isolated)."""
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    flags = sizes(args)
    common = ["--impl", impl, *(["--profile"] if args.profile else [])]
    docs: dict[str, Doc] = {}
    plan: list[tuple[str, Main, bool]] = [("churn", churn.main, True), ("rate", rate.main, True),
                                          ("flood", flood.main, True), ("burst", burst.main, False),
                                          ("memory", memory.main, False)]  # fmt: skip
    if any(name not in skip for name, _, _ in plan):
        opts = TestbedOptions(nodes=nodes_for(args.max_live), impl=impl, isolate=modes[0],
                              workdir=args.workdir)  # fmt: skip
        try:
            with Testbed(opts) as tb:
                run_plan(tb, plan, modes, skip, common, flags, vanilla, docs)
        except Exception as err:  # the other impl's figures still count
            say(f"{impl} testbed failed: {type(err).__name__}: {str(err)[:300]}")
            docs[f"testbed/{yes_no(modes[0])}"] = {"error": f"{type(err).__name__}: {str(err)[:200]}"}
    if "apicalls" not in skip:
        pin = ["--isolate"] if modes[0] else []
        docs[f"apicalls/{yes_no(modes[0])}"] = run("apicalls", apicalls.main,
                                                   [*common, *pin, *flags["apicalls"]], None)  # fmt: skip
    return docs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.run_all", description=__doc__.splitlines()[0])
    ap.add_argument("--impl", choices=("vkbridge", "liqo", "both"), default="vkbridge")
    ap.add_argument("--isolation", choices=("no", "yes", "both"), default="no",
                    help="the VK on a core of its own: no, yes, or both (shared first)")  # fmt: skip
    ap.add_argument(
        "--isolate", dest="isolation", action="store_const", const="yes", help="= --isolation yes"
    )
    ap.add_argument("--quick", action="store_true", help="the smallest sizes, to check the harness")
    ap.add_argument("--churn-duration", type=float, default=30.0)
    ap.add_argument("--rates", default="5,10,20,40,80")
    ap.add_argument("--rate-step", type=float, default=10.0)
    ap.add_argument("--flood-sizes", default="1000")
    ap.add_argument("--burst-sizes", default="100")
    ap.add_argument("--memory-steps", default="1000")
    ap.add_argument("--apicall-pods", type=int, default=200)
    ap.add_argument("--profile", action="store_true", help="py-spy the VK in burst, churn and memory")
    ap.add_argument("--skip", default="", help="comma-separated: churn,rate,flood,burst,memory,apicalls")
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)
    counts = ",".join((args.flood_sizes, args.memory_steps, args.burst_sizes)).split(",")
    top_rate = max(float(r) for r in args.rates.split(","))
    args.max_live = (
        1000 if args.quick else max([int(c) for c in counts if c] + [int(top_rate * args.rate_step)])
    )
    impls = ["vkbridge", "liqo"] if args.impl == "both" else [args.impl]
    modes = {"no": [False], "yes": [True], "both": [False, True]}[args.isolation]
    t0 = time.monotonic()
    docs: dict[str, dict[str, Doc]] = {}
    for i, impl in enumerate(impls):
        docs[impl] = run_impl(impl, modes, args, vanilla=i == 0)
    rows = headline(docs)
    print()
    print(table(["impl", "figure", "value", "target", "verdict", "load1"], rows))
    side = side_by_side(docs, modes)
    side_path = None
    if len(impls) > 1 or len(modes) > 1:
        print("\n" + side)
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        side_path = RESULTS_DIR / f"side-by-side-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.md"
        side_path.write_text(side + "\n")
    minutes = (time.monotonic() - t0) / 60
    path = write_results(
        "all",
        {
            "args": vars(args) | {"workdir": str(args.workdir)},
            "minutes": round(minutes, 1),
            "loadavg_at_end": loadavg(),
            "headline": [
                dict(zip(["impl", "figure", "value", "target", "verdict", "load1"], r, strict=True))
                for r in rows
            ],
            "side_by_side": str(side_path) if side_path else None,
            "files": {
                impl: {k: v.get("_path") or v.get("error") for k, v in d.items()} for impl, d in docs.items()
            },
        },
    )
    print(f"results: {path} ({minutes:.1f} min)")
    return 0


def _verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("MET" if ok else "MISSED")


def headline(docs: dict[str, dict[str, Doc]]) -> list[list[object]]:
    """DESIGN §5's figures, one row each, per implementation and isolation."""
    rows: list[list[object]] = []
    for impl, d in docs.items():
        for key, doc in d.items():
            name, iso = key.split("/")
            who = f"{impl} iso={iso}"
            if "error" in doc:
                rows.append([who, f"{name} FAILED", doc["error"][:60], "-", "-", None])
                continue
            load = (doc.get("loadavg_before") or [None])[0]
            if name == "churn":
                for k, lat in (doc.get("latencies") or {}).items():
                    if k.startswith(("outbound:", "inbound:")):
                        ok = None if lat["p99_ms"] is None else lat["p99_ms"] <= TARGETS["latency_p99_ms"]
                        rows.append([who, f"churn p99 ms, {k.split(':')[0]}", lat["p99_ms"], "<= 100",
                                     _verdict(ok), load])  # fmt: skip
            elif name == "rate":
                for r in doc.get("results") or []:
                    first = (r.get("steps") or [{}])[0].get("loadavg_before") or [None]
                    rows.append([who, f"highest sustainable rate ({r['mode']})", r["highest_rate"], "-", "-",
                                 first[0]])  # fmt: skip
            elif name == "flood":
                for r in doc.get("runs") or []:
                    rows.append([who, f"flood N={r['n']} all Running s ({r['mode']})", r["seconds"], "-", "-",
                                 r["loadavg_before"][0]])  # fmt: skip
            elif name == "burst":
                for s in doc.get("summary") or []:
                    ok = (
                        None
                        if s["n"] != 1000 or s["ratio"] is None
                        else s["ratio"] <= TARGETS["burst_ratio_at_1000"]
                    )
                    rows.append([who, f"burst ratio N={s['n']}", s["ratio"], "<= 1.15 at 1000", _verdict(ok),
                                 s["load1"]])  # fmt: skip
            elif name == "apicalls":
                a = doc.get("headline") or {}
                rows.append([who, "VK pod-related writes per pod", a.get("vk_pod_writes_per_pod"), "<= 3",
                             _verdict(a.get("met")), load])  # fmt: skip
            elif name == "memory":
                target = f"<= {TARGETS['rss_mb_at_10000']:.0f} at 10000"
                for s in doc.get("steps") or []:
                    ok = (s["vk_rss_mb"] <= TARGETS["rss_mb_at_10000"]) if s["pods"] >= 10000 else None
                    rows.append([who, f"VK RSS MB at {s['pods']} pods", s["vk_rss_mb"], target,
                                 _verdict(ok), s["loadavg"][0]])  # fmt: skip
                    rows.append([who, f"VK CPU s per 1,000 pods (to {s['pods']})",
                                 s["vk_cpu_seconds_per_1000_pods"], "-", "-", s["loadavg"][0]])  # fmt: skip
    return rows


if __name__ == "__main__":
    sys.exit(main())
