"""The side-by-side table of bench/README.md: one column per implementation and isolation, plus vanilla.

Each cell is a figure with the machine's 1-minute load average before -> after it was taken; rows come
from the benchmarks' own result files (bench.run_all collects them).
"""

from __future__ import annotations

import os
from typing import Any

from bench.report import markdown, with_load, yes_no

Doc = dict[str, Any]


Cell = tuple[object, list[float] | None, list[float] | None]


def cells(name: str, doc: Doc) -> dict[str, dict[str, Cell]]:
    """figure -> column ("vk" or "vanilla") -> (value, load before, load after), from one result file."""
    out: dict[str, dict[str, Cell]] = {}
    if "error" in doc:
        return {f"{name}: FAILED": {"vk": (doc["error"][:50], None, None)}}
    before, after = doc.get("loadavg_before"), doc.get("loadavg_after")
    if name == "churn":
        lat = doc.get("latencies") or {}
        rate = (doc.get("args") or {}).get("rate")
        for label, key in (
            ("outbound", "outbound: bound -> ShadowPod created (watch)"),
            ("inbound", "inbound: remote Running -> local Running (watch)"),
        ):
            v = lat.get(key) or {}
            out[f"churn {rate:g}/s, {label} p50 / p99 ms"] = {
                "vk": (f"{v.get('p50_ms')} / {v.get('p99_ms')}", before, after)
            }
        e2e = lat.get("context: create sent -> local Running (end to end)") or {}
        out[f"churn {rate:g}/s, create -> local Running p99 ms"] = {"vk": (e2e.get("p99_ms"), before, after)}
        out["churn, creates started / answered per s"] = {
            "vk": (f"{doc.get('achieved_create_rate')} / {doc.get('answered_create_rate')}", before, after)
        }
        out["churn, VK CPU s per 1,000 pods"] = {
            "vk": (doc.get("vk_cpu_seconds_per_1000_pods"), before, after)
        }
        s = (doc.get("sched") or {}).get("vk") or {}
        wait = round(s["runqueue_wait_s"] / s["on_cpu_s"], 2) if s.get("on_cpu_s") else None
        out["churn, VK waited for a CPU per s on one"] = {"vk": (wait, before, after)}
        out["churn, error lines in the VK's log"] = {"vk": (doc.get("vk_error_lines"), before, after)}
    elif name == "rate":
        for r in doc.get("results") or []:
            steps = r.get("steps") or [{}]
            col = "vanilla" if r["mode"] == "vanilla" else "vk"
            best = r["highest_rate"]
            if best is None:  # not even the first step held: say so, "-" means "not run"
                best = f"< {steps[0].get('rate', 0):g}"
            elif steps[-1].get("verdict") == "holds":  # every asked rate held: the ceiling is above
                best = f">= {best:g}"
            answered = max((s.get("achieved_create_rate") or 0 for s in steps), default=None)
            out.setdefault("highest sustainable rate, pods/s (p99 <= 5 s)", {})[col] = (
                best,
                steps[0].get("loadavg_before"),
                steps[-1].get("loadavg_after"),
            )
            out.setdefault("rate: fastest create rate the bench started, pods/s", {})[col] = (
                answered,
                steps[0].get("loadavg_before"),
                steps[-1].get("loadavg_after"),
            )
    elif name == "flood":
        for r in doc.get("runs") or []:
            col = "vanilla" if r["mode"] == "vanilla" else "vk"
            out.setdefault(f"flood N={r['n']}, all Running s", {})[col] = (
                r["seconds"],
                r["loadavg_before"],
                r["loadavg_after"],
            )
            out.setdefault(f"flood N={r['n']}, creates answered per s", {})[col] = (
                r["achieved_create_rate"],
                r["loadavg_before"],
                r["loadavg_after"],
            )
    elif name == "burst":
        for s in doc.get("summary") or []:
            out[f"burst N={s['n']} ratio (KCM-paced)"] = {
                "vk": (s["ratio"], s.get("loadavg_before"), s.get("loadavg_after"))
            }
    elif name == "apicalls":
        a = doc.get("headline") or {}
        out["VK pod-related writes per pod, create -> Running"] = {
            "vk": (a.get("vk_pod_writes_per_pod"), before, after)
        }
    elif name == "memory":
        for s in doc.get("steps") or []:
            load = (s.get("loadavg_before"), s.get("loadavg"))
            out[f"VK RSS MB at {s['pods']} pods"] = {"vk": (s["vk_rss_mb"], *load)}
            out[f"VK CPU s per 1,000 pods (memory, to {s['pods']})"] = {
                "vk": (s["vk_cpu_seconds_per_1000_pods"], *load)
            }
    return out


def side_by_side(docs: dict[str, dict[str, Doc]], modes: list[bool]) -> str:
    """The markdown table: one column per implementation and isolation, plus vanilla; load in each cell."""
    columns = [(impl, yes_no(iso)) for iso in modes for impl in docs]
    grid: dict[str, dict[str, str]] = {}
    for impl, d in docs.items():
        for key, doc in d.items():
            name, iso = key.split("/")
            for figure, by_col in cells(name, doc).items():
                for col, (value, before, after) in by_col.items():
                    where = "vanilla" if col == "vanilla" else f"{impl} isolated={iso}"
                    grid.setdefault(figure, {})[where] = with_load(value, before, after)
    headers = ["figure", *[f"{impl} isolated={iso}" for impl, iso in columns], "vanilla"]
    rows = [[fig, *[by.get(h, "-") for h in headers[1:]]] for fig, by in grid.items()]
    cpus = os.cpu_count()
    head = (
        f"Machine: {cpus} cores; isolated=yes: the VK pinned to one core, everything else the bench "
        f"started on the other(s). Each cell: figure (1-minute load average before->after it)."
    )
    return head + "\n\n" + markdown(headers, rows)
