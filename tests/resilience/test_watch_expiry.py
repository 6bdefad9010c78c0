"""Scenario 3: watches expire (410 Gone) while events are missed; the caches re-list and nothing leaks.

vkbridge is frozen (SIGSTOP) so it misses events on both sides: local pods force-deleted, ShadowPods
deleted on the pool, new local pods. Both etcds are compacted and both API servers restarted: the
restarted watch caches start at the current revision, so every resourceVersion vkbridge holds is now
too old (410). The test checks that premise with its own watch before it thaws vkbridge (SIGCONT).
"""

from __future__ import annotations

import json
import signal
import threading
import time
import urllib.error
import urllib.request

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import must, pod_path, shadow_path
from tests.resilience.kit import (
    Figures,
    admin_ssl,
    create_pods,
    delete_pods,
    is_running,
    local_pods,
    poll,
    remote_pods,
    shadowpods,
    tiny_pod,
    uid,
    wait_all_running,
)


def watch_is_gone(plane: ControlPlane, path: str, rv: str) -> bool:
    """Does a watch from `rv` answer 410 now (HTTP 410 or an ERROR event with code 410)?"""
    url = f"{plane.url}{path}?watch=1&timeoutSeconds=2&resourceVersion={rv}"
    try:
        with urllib.request.urlopen(url, context=admin_ssl(plane), timeout=10) as resp:
            for raw in resp:
                ev = json.loads(raw)
                if ev.get("type") == "ERROR":
                    return int(ev["object"].get("code") or 0) == 410
            return False
    except urllib.error.HTTPError as err:
        return err.code == 410


def test_410_relists_apply_missed_deletes_and_nothing_leaks(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str], figures: Figures,
) -> None:  # fmt: skip
    ns, remote = offloaded_ns
    slug = bundle.slug
    gone_local = [f"gone-{i}" for i in range(3)]  # force-deleted at home while vkbridge is frozen
    gone_remote = [f"lost-{i}" for i in range(2)]  # their ShadowPods deleted on the pool meanwhile
    keep = [f"keep-{i}" for i in range(2)]
    create_pods(consumer, ns, [tiny_pod(slug, n) for n in gone_local + gone_remote + keep])
    wait_all_running(consumer, ns, gone_local + gone_remote + keep, 60)
    before = shadowpods(pool, remote)
    home_rv = must(consumer, "GET", pod_path(ns))["metadata"]["resourceVersion"]
    pool_rv = must(pool, "GET", shadow_path(remote))["metadata"]["resourceVersion"]
    mark = len(vkbridge.log_text())
    born = [f"born-{i}" for i in range(2)]

    vkbridge.proc.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
    t_freeze = time.monotonic()
    try:
        delete_pods(consumer, ns, gone_local, grace=0)
        for name in gone_remote:
            must(pool, "DELETE", shadow_path(remote, name))
        create_pods(consumer, ns, [tiny_pod(slug, n, node_name=slug) for n in born])
        t_restart = time.monotonic()
        errors: list[BaseException] = []

        def restart(plane: ControlPlane) -> None:
            try:
                plane.compact_etcd()
                plane.restart_apiserver()
            except BaseException as err:
                errors.append(err)

        threads = [threading.Thread(target=restart, args=(p,)) for p in (consumer, pool)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        assert not errors, errors
        restart_s = time.monotonic() - t_restart
        # premise: a watch from before is too old now (a restarted watch cache may take a moment to answer)
        assert poll(lambda: watch_is_gone(consumer, pod_path(ns), home_rv), 20) is not None, (
            "consumer: no 410"
        )
        assert poll(lambda: watch_is_gone(pool, shadow_path(remote), pool_rv), 20) is not None, "pool: no 410"
    finally:
        vkbridge.proc.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
    frozen_s = time.monotonic() - t_freeze
    t_thaw = time.monotonic()

    def state() -> dict[str, list[str]]:
        local, sps, rps = local_pods(consumer, ns), shadowpods(pool, remote), remote_pods(pool, remote)
        return {
            "missed local delete not applied": [n for n in gone_local if n in sps or n in rps],
            "missed ShadowPod delete not repaired": [
                n
                for n in gone_remote
                if n not in sps or uid(sps[n]) == uid(before[n]) or not is_running(local.get(n))
            ],
            "missed add not reflected": [n for n in born if n not in sps or not is_running(local.get(n))],
            "kept pods disturbed": [
                n for n in keep if uid(sps.get(n)) != uid(before[n]) or not is_running(local.get(n))
            ],
            "orphans on the pool": [n for n in sps if n not in local],
        }

    t_converged = poll(lambda: not any(state().values()), 90)
    log = vkbridge.log_text()[mark:]
    expired = [ln for ln in log.splitlines() if "expired; re-listing" in ln]

    figures.add("vkbridge frozen for", frozen_s, "s")
    figures.add("compact + restart of both API servers", restart_s, "s")
    figures.add("converged after thaw", t_converged if t_converged is not None else "never (90 s)", "s")
    figures.add("caches that re-listed after 410", len(expired))
    for ln in expired:
        print("   410:", ln[:200])

    assert vkbridge.alive(), vkbridge.tail(40)
    assert t_converged is not None, f"not converged 90 s after thaw: {state()} (thawed at {t_thaw:.0f})"
    assert any("consumer/pods" in ln for ln in expired), "the consumer pod cache should have re-listed"
    assert any("pool/shadowpods" in ln for ln in expired), "the pool ShadowPod cache should have re-listed"
