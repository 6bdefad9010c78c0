"""API calls per reflected pod, counted by the two API servers, from creation to all Running (and, as
context, for the deletion): `apiserver_request_total` diffed before/after, split by verb and resource.

That metric has no client label, so the API servers also write an audit log (level Metadata) in this
benchmark: each request's user agent tells the VK (vkbridge's "vkbridge/...", Liqo's client-go default
"virtual-kubelet/...") from the pool emulator (aiohttp's
default agent), the fake kubelets ("vkbridge-fakekubelet/..."), the scheduler, the controller-manager
(one agent per controller) and the bench itself. A vanilla run (the same Deployment on the pool alone)
gives the baseline every pod costs anyway.

    python -m bench.apicalls [--pods 500] [--no-vanilla] [--no-delete]

    python -m bench.apicalls --impl liqo     # the same against Liqo v1.2's own virtual kubelet

Target (DESIGN §5): <= 3 writes per reflected pod (create to Running) — by the VK.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
from collections import Counter
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from bench.harness import nodes_for, parse_vk_args, testbed_for, workspace
from bench.kubeapi import FirstSeen, watch_phase
from bench.load import deployment
from bench.measure import loadavg
from bench.report import TARGETS, say, table, write_results
from bench.scrape import apiserver_requests
from bench.testbed import Testbed
from e2e.waiting import wait_until

WRITE_VERBS_METRIC = {"POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY"}
READ_VERBS_METRIC = {"GET", "LIST", "WATCH"}
WRITE_VERBS_AUDIT = {"create", "update", "patch", "delete", "deletecollection"}
READ_VERBS_AUDIT = {"get", "list", "watch"}
POD_RESOURCES = {"pods", "pods/status", "shadowpods", "shadowpods/status", "events", "pods/binding"}

Samples = dict[tuple[tuple[str, str], ...], float]


# ------------------------------------------------------------------------------------ metric diffs


def metric_diff(before: Samples, after: Samples) -> Counter[tuple[str, str]]:
    """(verb, resource[/subresource]) -> requests in the window, from apiserver_request_total."""
    out: Counter[tuple[str, str]] = Counter()
    for labels, v in after.items():
        d = dict(labels)
        delta = v - before.get(labels, 0.0)
        if delta <= 0:
            continue
        res = d.get("resource", "") or "(non-resource)"
        if d.get("subresource"):
            res += "/" + d["subresource"]
        out[(d.get("verb", "?"), res)] += round(delta)
    return out


def split_rw(c: Mapping[tuple[str, str], int], writes: set[str], reads: set[str]) -> tuple[int, int]:
    w = sum(v for (verb, _), v in c.items() if verb in writes)
    r = sum(v for (verb, _), v in c.items() if verb in reads)
    return w, r


# ------------------------------------------------------------------------------------ audit


def actor(user: str, agent: str) -> str:
    """Who sent a request, from the user agent (every client here is admin or a system identity)."""
    a = agent or ""
    if a.startswith("vkbridge-fakekubelet"):
        return "fake-kubelet"
    if a.startswith("vkbridge-bench") or a.startswith("Python-urllib"):
        return "bench"
    if a.startswith(("vkbridge/", "virtual-kubelet")):
        return "vk"
    if a.startswith("Python/") and "aiohttp" in a:
        return "emulator"
    if a.startswith("kube-controller-manager"):
        return "kcm:" + a.rsplit("/", 1)[-1]
    if a.startswith("kube-scheduler"):
        return "scheduler"
    if a.startswith("kube-apiserver"):
        return "apiserver"
    if a.startswith("kubectl"):
        return "kubectl"
    return f"other:{user}:{a.split(' ')[0][:40]}"


class AuditReader:
    """Reads one audit log from an offset; counts each request once (by auditID) from a start time on."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def read(
        self, since: dt.datetime, namespaces: Collection[str] | None = None
    ) -> Counter[tuple[str, str, str]]:
        """(actor, verb, resource[/subresource]) -> requests received at or after `since`; with
        `namespaces`, only requests on objects in those (the differential suite's per-pod count)."""
        out: Counter[tuple[str, str, str]] = Counter()
        seen: set[str] = set()
        with self.path.open("rb") as f:
            f.seek(self.offset)
            for raw in f:
                try:
                    ev = json.loads(raw)
                except ValueError:
                    continue
                aid = ev.get("auditID")
                if aid in seen:
                    continue
                seen.add(aid)
                received = ev.get("requestReceivedTimestamp") or ""
                try:
                    if dt.datetime.fromisoformat(received.replace("Z", "+00:00")) < since:
                        continue
                except ValueError:
                    pass
                ref = ev.get("objectRef") or {}
                if namespaces is not None and ref.get("namespace") not in namespaces:
                    continue
                res = ref.get("resource") or "(non-resource)"
                if ref.get("subresource"):
                    res += "/" + ref["subresource"]
                who = actor((ev.get("user") or {}).get("username", ""), ev.get("userAgent", ""))
                out[(who, ev.get("verb", "?"), res)] += 1
        return out


def by_actor(c: Counter[tuple[str, str, str]], n: int) -> list[list[object]]:
    actors = sorted({a for a, _, _ in c})
    rows = []
    for a in actors:
        w = sum(v for (x, verb, _), v in c.items() if x == a and verb in WRITE_VERBS_AUDIT)
        r = sum(v for (x, verb, _), v in c.items() if x == a and verb in READ_VERBS_AUDIT)
        rows.append([a, w, round(w / n, 3), r, round(r / n, 3)])
    rows.sort(key=lambda row: -int(str(row[1])))
    return rows


def verbs_of(c: Counter[tuple[str, str, str]], who: str, n: int) -> list[list[object]]:
    rows: list[list[object]] = [
        [verb, res, v, round(v / n, 3)] for (a, verb, res), v in sorted(c.items()) if a == who
    ]
    rows.sort(key=lambda row: -int(str(row[2])))
    return rows


# ------------------------------------------------------------------------------------ one window


class Window:
    """Metrics and audit of both API servers between start() and stop()."""

    def __init__(self, tb: Testbed) -> None:
        self.tb = tb
        self.before: dict[str, Samples] = {}
        self.audits = {name: AuditReader(path) for name, path in tb.audit_logs.items()}
        self.since = dt.datetime.now(dt.UTC)

    def start(self) -> None:
        for a in self.audits.values():
            a.mark()
        self.since = dt.datetime.now(dt.UTC)
        self.before = {p.name: apiserver_requests(p) for p in (self.tb.consumer, self.tb.pool)}

    def stop(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for p in (self.tb.consumer, self.tb.pool):
            m = metric_diff(self.before[p.name], apiserver_requests(p))
            out[p.name] = {"metric": m, "audit": self.audits[p.name].read(self.since)}
        return out


def summarize(win: dict[str, Any], n: int) -> dict[str, Any]:
    res: dict[str, Any] = {}
    for server, d in win.items():
        m: Counter[tuple[str, str]] = d["metric"]
        a: Counter[tuple[str, str, str]] = d["audit"]
        w, r = split_rw(m, WRITE_VERBS_METRIC, READ_VERBS_METRIC)
        vk_w = sum(v for (x, verb, _), v in a.items() if x == "vk" and verb in WRITE_VERBS_AUDIT)
        vk_pod_w = sum(
            v
            for (x, verb, rs), v in a.items()
            if x == "vk" and verb in WRITE_VERBS_AUDIT and rs in POD_RESOURCES
        )
        vk_r = sum(v for (x, verb, _), v in a.items() if x == "vk" and verb in READ_VERBS_AUDIT)
        res[server] = {
            "everyone_writes": w,
            "everyone_reads": r,
            "everyone_writes_per_pod": round(w / n, 3),
            "everyone_reads_per_pod": round(r / n, 3),
            "vk_writes": vk_w,
            "vk_writes_per_pod": round(vk_w / n, 3),
            "vk_pod_writes_per_pod": round(vk_pod_w / n, 3),
            "vk_reads_per_pod": round(vk_r / n, 3),
            "metric_by_verb_resource": {f"{v} {rs}": c for (v, rs), c in sorted(m.items())},
            "audit_by_actor": by_actor(a, n),
            "vk_by_verb_resource": verbs_of(a, "vk", n),
        }
    return res


def print_window(title: str, s: dict[str, Any], n: int) -> None:
    print(f"\n== {title} (N={n}) ==")
    rows = []
    for server, d in s.items():
        for key, c in sorted(d["metric_by_verb_resource"].items(), key=lambda kv: -kv[1]):
            verb = key.split(" ", 1)[0]
            if verb in WRITE_VERBS_METRIC or c / n >= 0.05:
                kind = "write" if verb in WRITE_VERBS_METRIC else "read"
                rows.append([server, kind, key, c, round(c / n, 3)])
    print("apiserver_request_total, everyone (writes, and reads >= 0.05/pod):")
    print(table(["server", "kind", "verb resource", "requests", "per pod"], rows))
    print("\nby client (audit log):")
    rows = [[server, *row] for server, d in s.items() for row in d["audit_by_actor"]]
    print(table(["server", "client", "writes", "writes/pod", "reads", "reads/pod"], rows))
    print("\nthe VK's own requests (audit log):")
    rows = [[server, *row] for server, d in s.items() for row in d["vk_by_verb_resource"]]
    print(table(["server", "verb", "resource", "requests", "per pod"], rows))


# ------------------------------------------------------------------------------------ runs


def count_creation(
    tb: Testbed, n: int, settle: float, vanilla: bool
) -> tuple[str, str | None, dict[str, Any], float]:
    """Create a Deployment of n pods (on the pool alone for vanilla, else offloaded) and count the calls
    until all run and ``settle`` seconds more: (namespace, remote namespace, counts, seconds to Running)."""
    tag = "api-vanilla" if vanilla else "api"
    plane, ns, remote, slug = workspace(tb, f"{tag}-{int(time.time()) % 100000}", vanilla)
    api = tb.api(plane.name)
    running = FirstSeen()
    w = watch_phase(api, tb.loop, f"/api/v1/namespaces/{ns}/pods", running)
    time.sleep(0.5)
    win = Window(tb)
    win.start()
    t0 = time.monotonic()
    tb.run(api.request("POST", f"/apis/apps/v1/namespaces/{ns}/deployments", deployment("calls", n, slug)))
    what = "vanilla" if vanilla else "reflected"
    wait_until(lambda: len(running) >= n, max(300.0, n), f"{n} {what} pods Running", 0.2)
    running_after = time.monotonic() - t0
    time.sleep(settle)
    counts = summarize(win.stop(), n)
    w.cancel()
    return ns, remote, counts, running_after


def run_vanilla(tb: Testbed, n: int, settle: float) -> dict[str, Any]:
    ns, _, out, _ = count_creation(tb, n, settle, vanilla=True)
    tb.delete_namespace(tb.pool, ns)
    return out


def run_reflected(tb: Testbed, n: int, settle: float, with_delete: bool) -> dict[str, Any]:
    ns, remote, create, running_after = count_creation(tb, n, settle, vanilla=False)
    assert remote is not None
    out: dict[str, Any] = {"create_to_running": create}
    if with_delete:
        win = Window(tb)
        win.start()
        tb.run(tb.api("consumer").request("DELETE", f"/apis/apps/v1/namespaces/{ns}/deployments/calls"))
        wait_until(
            lambda: tb.count_pods(tb.consumer, ns) == 0 and tb.count_pods(tb.pool, remote) == 0,
            max(300.0, n), "the pods to be gone on both sides", 1.0,
        )  # fmt: skip
        time.sleep(settle)
        out["delete"] = summarize(win.stop(), n)
    out["running_after_s"] = round(running_after, 1)
    tb.delete_namespace(tb.consumer, ns, wait=False)
    return out


def main(argv: list[str] | None = None, tb: Testbed | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.apicalls", description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=500)
    ap.add_argument("--settle", type=float, default=10.0, help="seconds counted after all are Running")
    ap.add_argument("--no-vanilla", action="store_true")
    ap.add_argument("--no-delete", action="store_true")
    args = parse_vk_args(ap, argv, "apicalls counts a VK's requests (vanilla runs as the baseline)")
    n = args.pods
    if tb is not None and not tb.audit_logs:
        raise ValueError("bench.apicalls needs a testbed with audit logs (TestbedOptions(audit=True))")
    result: dict[str, Any] = {"args": vars(args) | {"workdir": str(args.workdir)}, "pods": n}
    with testbed_for(args, tb, nodes_for(n), audit=True) as tb:
        result.update(tb.describe())
        result["loadavg_before"] = loadavg()
        if not args.no_vanilla:
            say(f"vanilla: {n} pods on the pool alone")
            result["vanilla"] = run_vanilla(tb, n, args.settle)
            print_window("vanilla, create to Running", result["vanilla"], n)
        say(f"reflected: {n} pods through {args.impl}")
        refl = run_reflected(tb, n, args.settle, not args.no_delete)
        result["reflected"] = refl
        result["loadavg_after"] = loadavg()
        result["vk_error_lines"] = tb.vk_error_lines()
    print_window(f"through {args.impl}, create to Running", refl["create_to_running"], n)
    if "delete" in refl:
        print_window(f"through {args.impl}, delete to gone", refl["delete"], n)
    c = refl["create_to_running"]
    vk_writes = c["consumer"]["vk_writes_per_pod"] + c["pool"]["vk_writes_per_pod"]
    vk_pod_writes = c["consumer"]["vk_pod_writes_per_pod"] + c["pool"]["vk_pod_writes_per_pod"]
    all_writes = c["consumer"]["everyone_writes_per_pod"] + c["pool"]["everyone_writes_per_pod"]
    van = result.get("vanilla", {}).get("pool", {}).get("everyone_writes_per_pod")
    target = TARGETS["writes_per_pod"]
    print()
    print(
        table(
            ["writes per pod, create to Running", "value"],
            [
                [f"{args.impl}, both servers (all its writes)", round(vk_writes, 3)],
                [f"{args.impl}, pod-related (pods, status, shadowpods, events)", round(vk_pod_writes, 3)],
                ["everyone, both servers (reflected)", round(all_writes, 3)],
                ["everyone, pool only (vanilla baseline)", van],
            ],
        )
    )
    # The target counts what a pod costs; the node Lease and status heartbeats cost per second, not per
    # pod (they are the difference between the two VK rows and shrink as the burst grows).
    met = vk_pod_writes <= target
    print(f"target <= {target:g} pod-related writes per pod by {args.impl}: {'MET' if met else 'MISSED'}")
    iso = "yes" if result.get("isolated") else "no"
    print(f"{args.impl} isolated={iso}, load {result['loadavg_before']} -> {result['loadavg_after']}")
    result["headline"] = {
        "vk_writes_per_pod": round(vk_writes, 3),
        "vk_pod_writes_per_pod": round(vk_pod_writes, 3),
        "everyone_writes_per_pod_reflected": round(all_writes, 3),
        "everyone_writes_per_pod_vanilla": van,
        "target": target,
        "met": met,
    }
    path = write_results("apicalls", result)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
