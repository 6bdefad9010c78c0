"""Pure readings of a pod spec: what to run, with which environment, and when to restart."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

Json = dict[str, Any]

ANN_EXIT_AFTER = "fake.vkbridge.io/exit-after"
ANN_EXIT_CODE = "fake.vkbridge.io/exit-code"
ANN_FAIL_START = "fake.vkbridge.io/fail-start"

MAX_GRACE = 30.0
_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes $(VAR) expansion: known names are replaced, unknown stay, $$ escapes."""

    def sub(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        return env.get(m.group(1), m.group(0))

    return _VAR.sub(sub, text)


def container_env(spec: Json, base: Mapping[str, str]) -> dict[str, str]:
    """Literal env values in order, each able to reference the ones before it; valueFrom is skipped."""
    env = dict(base)
    for item in spec.get("env") or []:
        if "value" in item or "valueFrom" not in item:
            env[item["name"]] = expand(str(item.get("value") or ""), env)
    return env


def container_argv(spec: Json, env: Mapping[str, str]) -> list[str]:
    """command + args; args alone run as the command (images like busybox have no ENTRYPOINT)."""
    argv = [*(spec.get("command") or []), *(spec.get("args") or [])]
    if not argv:
        return ["sleep", "infinity"]
    return [expand(str(a), env) for a in argv]


def should_restart(policy: str, code: int, *, init: bool, sidecar: bool) -> bool:
    if sidecar:
        return True
    if init:
        return policy != "Never" and code != 0
    if policy == "Always":
        return True
    if policy == "OnFailure":
        return code != 0
    return False


def backoff(attempt: int) -> float:
    """Short CrashLoopBackOff for tests: 0.5 s doubling, capped at 5 s."""
    return float(min(0.5 * 2 ** max(attempt, 0), 5.0))


def grace_seconds(pod: Json) -> float:
    meta = pod.get("metadata", {})
    grace = meta.get("deletionGracePeriodSeconds")
    if grace is None:
        grace = pod.get("spec", {}).get("terminationGracePeriodSeconds", 30)
    return min(max(float(grace), 0.0), MAX_GRACE)


def pod_annotations(pod: Json) -> dict[str, str]:
    return dict(pod.get("metadata", {}).get("annotations") or {})


def exit_plan(pod: Json) -> tuple[float, int] | None:
    """(seconds, exit code) from the fake.vkbridge.io annotations, or None."""
    ann = pod_annotations(pod)
    raw = ann.get(ANN_EXIT_AFTER)
    if raw is None:
        return None
    try:
        return max(float(raw), 0.0), int(ann.get(ANN_EXIT_CODE, "0"))
    except ValueError:
        return None


def is_terminal(pod: Json) -> bool:
    return pod.get("status", {}).get("phase") in ("Succeeded", "Failed")
