"""A pod's life on a real kubelet, seen from the consumer: logs, exec, cp, restarts, init, probes, grace.

Every pod here is a consumer pod offloaded through vkbridge, the tunnel and the pool's Liqo-style RBAC
(create but not get on pods/exec, so exec takes the SPDY path to the pool) onto the session's real
worker. The pods are created together once per module and the tests read them, so the file stays within
a few minutes. Skipped, with the reason, where real workers cannot run (e2e/workers.why_not).
"""

from __future__ import annotations

import hashlib
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane
from e2e.fixtures_workers import steer_pool_pods_to
from e2e.vkbridge_proc import VkbridgeProcess
from e2e.workers import why_not
from tests.integration.helpers import get, must, pod_path, pool_pod, run_in_pty, wait_until
from tests.support.workloads import kubectl, kubectl_argv, offloaded_namespace

_WHY_NOT = why_not()
pytestmark = [pytest.mark.integration, pytest.mark.skipif(_WHY_NOT is not None, reason=str(_WHY_NOT))]

TICKER = "i=0; while true; do i=$((i+1)); echo tick $i; sleep 0.5; done"
# Fails once (first run), then stays up: restartCount 1, --previous = the first run's log.
CRASH_ONCE = (
    "if [ -f /data/ran ]; then echo second run; exec sleep 3600; fi; touch /data/ran; echo first run; exit 1"
)
# Ignores TERM for longer than any grace period: only the kubelet's KILL at the deadline ends it.
STUBBORN = "trap 'echo got TERM; sleep 60' TERM; echo up; while true; do sleep 0.2; done"
GRACE_S = 4


def container_status(pod: dict[str, Any] | None, name: str, init: bool = False) -> dict[str, Any]:
    key = "initContainerStatuses" if init else "containerStatuses"
    for st in ((pod or {}).get("status") or {}).get(key) or []:
        if st.get("name") == name:
            return dict(st)
    return {}


def condition(pod: dict[str, Any] | None, ctype: str) -> str | None:
    for c in ((pod or {}).get("status") or {}).get("conditions") or []:
        if c.get("type") == ctype:
            return str(c.get("status"))
    return None


def _pods(slug: str) -> dict[str, dict[str, Any]]:
    ticker = pool_pod(slug, "ticker", command=TICKER)
    ticker["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox:1.36", "imagePullPolicy": "Never",
         "command": ["sh", "-c", "echo init ran; echo made by init > /work/init.txt"],
         "volumeMounts": [{"name": "work", "mountPath": "/work"}]}
    ]  # fmt: skip
    ticker["spec"]["volumes"] = [{"name": "work", "emptyDir": {}}]
    ticker["metadata"]["annotations"]["kubectl.kubernetes.io/default-container"] = "hello"
    main = ticker["spec"]["containers"][0]
    main["volumeMounts"] = [{"name": "work", "mountPath": "/work"}]
    main["readinessProbe"] = {"exec": {"command": ["test", "-f", "/tmp/ready"]},
                              "periodSeconds": 1, "failureThreshold": 1}  # fmt: skip
    main["livenessProbe"] = {"exec": {"command": ["true"]}, "periodSeconds": 2}
    crasher = pool_pod(slug, "crasher", command=CRASH_ONCE)
    crasher["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}]
    crasher["spec"]["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    stubborn = pool_pod(slug, "stubborn", command=STUBBORN)
    stubborn["spec"]["terminationGracePeriodSeconds"] = GRACE_S
    pods = {"ticker": ticker, "crasher": crasher, "stubborn": stubborn}
    for pod in pods.values():
        for c in pod["spec"]["containers"]:
            c["imagePullPolicy"] = "Never"
    return pods


def _remote_scheduled(pool: ControlPlane, remote_ns: str, name: str, node: str) -> bool:
    pod = get(pool, pod_path(remote_ns, name))
    return bool(pod and pod["spec"].get("nodeName") == node)


@pytest.fixture(scope="module")
def life(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    real_pool_worker: str,
) -> Iterator[tuple[str, str]]:  # fmt: skip
    """An offloaded namespace with the module's pods, all bound to the real worker; (local, remote)."""
    with offloaded_namespace(consumer, pool, "life") as (ns, remote_ns):
        with steer_pool_pods_to(pool, real_pool_worker):
            for pod in _pods(bundle.slug).values():
                must(consumer, "POST", pod_path(ns), pod)
            for name in ("ticker", "crasher", "stubborn"):
                wait_until(lambda n=name: _remote_scheduled(pool, remote_ns, n, real_pool_worker),  # type: ignore[misc]
                           60, f"{name} bound to the real worker", 0.25)  # fmt: skip
        for name in ("ticker", "stubborn"):
            wait_until(lambda n=name: container_status(get(consumer, pod_path(ns, n)), "hello").get("started"),  # type: ignore[misc]
                       60, f"{name} running at home", 0.25)  # fmt: skip
        # vkbridge's kubelet API listens once the consumer's kube-controller-manager signed its certificate.
        wait_until(lambda: kubectl(consumer, "logs", "-n", ns, "ticker", "--tail=1").returncode == 0,
                   60, "kubectl logs on the consumer", 1.0)  # fmt: skip
        yield ns, remote_ns


# ---------------------------------------------------------------------------------------------- logs


def test_kubectl_logs_follow_streams_new_lines_of_a_running_real_container(life: tuple[str, str],
                                                                           consumer: ControlPlane) -> None:  # fmt: skip
    ns, _ = life
    argv = kubectl_argv(consumer, "logs", "-f", "--tail=1", "-n", ns, "ticker")
    with subprocess.Popen(argv, stdout=subprocess.PIPE, text=True) as proc:
        assert proc.stdout is not None
        try:
            first = proc.stdout.readline()
            started = time.monotonic()
            lines = [proc.stdout.readline() for _ in range(3)]
            elapsed = time.monotonic() - started
        finally:
            proc.kill()
    numbers = [int(line.split()[1]) for line in [first, *lines]]
    assert numbers == list(range(numbers[0], numbers[0] + 4)), numbers
    assert elapsed > 0.8, f"three new ticks arrived in {elapsed:.2f}s: not a live stream"


def test_kubectl_logs_tail_and_since_cut_a_real_containers_log(life: tuple[str, str],
                                                               consumer: ControlPlane) -> None:  # fmt: skip
    ns, _ = life
    wait_until(lambda: len(kubectl(consumer, "logs", "-n", ns, "ticker").stdout.splitlines()) >= 8,
               30, "eight ticks")  # fmt: skip
    tail = kubectl(consumer, "logs", "--tail=2", "-n", ns, "ticker")
    assert tail.returncode == 0, tail.stderr
    a, b = (int(line.split()[1]) for line in tail.stdout.splitlines())
    assert b == a + 1
    since = kubectl(consumer, "logs", "--since=2s", "-n", ns, "ticker")
    full = kubectl(consumer, "logs", "-n", ns, "ticker")
    got = since.stdout.splitlines()
    assert since.returncode == 0 and 1 <= len(got) <= 6, (since.stderr, got)
    assert len(full.stdout.splitlines()) >= 8 and full.stdout.splitlines()[0] == "tick 1"
    assert int(got[0].split()[1]) > 1


def test_kubectl_logs_previous_shows_the_run_before_a_restart_and_restart_count_is_mirrored(
    life: tuple[str, str], consumer: ControlPlane, pool: ControlPlane
) -> None:
    ns, remote_ns = life

    def restarted_at_home() -> dict[str, Any] | None:
        st = container_status(get(consumer, pod_path(ns, "crasher")), "hello")
        return st if st.get("restartCount") == 1 and "running" in (st.get("state") or {}) else None

    st = wait_until(restarted_at_home, 60, "crasher restarted once, mirrored at home", 0.5)
    remote = container_status(get(pool, pod_path(remote_ns, "crasher")), "hello")
    assert remote["restartCount"] == 1
    assert st["lastState"]["terminated"]["exitCode"] == 1
    now = kubectl(consumer, "logs", "-n", ns, "crasher")
    assert (now.returncode, now.stdout) == (0, "second run\n"), now.stderr
    before = kubectl(consumer, "logs", "--previous", "-n", ns, "crasher")
    assert (before.returncode, before.stdout) == (0, "first run\n"), before.stderr


def test_init_container_ran_first_its_status_and_log_are_visible_at_home(
    life: tuple[str, str], consumer: ControlPlane
) -> None:
    ns, _ = life
    init = container_status(get(consumer, pod_path(ns, "ticker")), "init", init=True)
    assert init["state"]["terminated"]["reason"] == "Completed", init
    assert init["state"]["terminated"]["exitCode"] == 0
    logs = kubectl(consumer, "logs", "-n", ns, "ticker", "-c", "init")
    assert (logs.returncode, logs.stdout) == (0, "init ran\n"), logs.stderr
    made = kubectl(consumer, "exec", "-n", ns, "ticker", "--", "cat", "/work/init.txt")
    assert (made.returncode, made.stdout) == (0, "made by init\n"), made.stderr


# ---------------------------------------------------------------------------------------------- exec


def test_exec_without_tty_carries_stdin_stdout_stderr_and_the_exit_code(
    life: tuple[str, str], consumer: ControlPlane
) -> None:
    ns, _ = life
    script = "echo out; echo err >&2; read line; echo got $line; cat; exit 7"
    res = kubectl(consumer, "exec", "-i", "-n", ns, "ticker", "--", "sh", "-c", script,
                  input="first\nrest of stdin\n")  # fmt: skip
    assert res.returncode == 7, res.stderr
    assert res.stdout == "out\ngot first\nrest of stdin\n"
    assert "err\n" in res.stderr and "exit code 7" in res.stderr
    ok = kubectl(consumer, "exec", "-n", ns, "ticker", "--", "true")
    assert (ok.returncode, ok.stdout, ok.stderr) == (0, "", "")


def test_exec_with_a_tty_gets_a_terminal_and_the_exit_code(life: tuple[str, str],
                                                           consumer: ControlPlane) -> None:  # fmt: skip
    ns, _ = life
    script = "test -t 0 && echo stdin-is-a-tty; echo ready; read line; echo got $line; exit 5"
    argv = kubectl_argv(consumer, "exec", "-it", "-n", ns, "ticker", "--", "sh", "-c", script)
    code, out = run_in_pty(argv, b"typed\r")
    text = out.decode(errors="replace")
    assert code == 5, text
    assert "stdin-is-a-tty" in text and "got typed" in text, text


# ---------------------------------------------------------------------------------------------- cp


def test_kubectl_cp_copies_into_and_out_of_a_real_container(life: tuple[str, str], consumer: ControlPlane,
                                                            tmp_path: Path) -> None:  # fmt: skip
    ns, _ = life
    src = tmp_path / "in.txt"
    payload = "".join(f"line {i} {uuid.uuid4().hex}\n" for i in range(2000))  # ~80 KB: several frames
    src.write_text(payload)
    up = kubectl(consumer, "cp", str(src), f"{ns}/ticker:/tmp/in.txt", "-c", "hello")
    assert up.returncode == 0, up.stderr
    inside = kubectl(consumer, "exec", "-n", ns, "ticker", "--", "md5sum", "/tmp/in.txt")
    assert inside.returncode == 0, inside.stderr
    assert inside.stdout.split()[0] == hashlib.md5(payload.encode()).hexdigest()
    dst = tmp_path / "out.txt"
    down = kubectl(consumer, "cp", f"{ns}/ticker:/tmp/in.txt", str(dst), "-c", "hello")
    assert down.returncode == 0, down.stderr
    assert dst.read_text() == payload


# ---------------------------------------------------------------------------------------------- probes


def test_readiness_probe_on_the_real_kubelet_drives_the_ready_condition_at_home(
    life: tuple[str, str], consumer: ControlPlane
) -> None:
    ns, _ = life
    pod = get(consumer, pod_path(ns, "ticker"))
    assert condition(pod, "Ready") == "False" and condition(pod, "ContainersReady") == "False"
    res = kubectl(consumer, "exec", "-n", ns, "ticker", "--", "touch", "/tmp/ready")
    assert res.returncode == 0, res.stderr
    pod = wait_until(lambda: (p := get(consumer, pod_path(ns, "ticker"))) and condition(p, "Ready") == "True" and p,
                     30, "Ready=True at home after the probe passes", 0.25)  # fmt: skip
    assert container_status(pod, "hello")["ready"] is True
    assert container_status(pod, "hello")["restartCount"] == 0, "the liveness probe must keep passing"
    kubectl(consumer, "exec", "-n", ns, "ticker", "--", "rm", "/tmp/ready")
    wait_until(lambda: condition(get(consumer, pod_path(ns, "ticker")), "Ready") == "False",
               30, "Ready=False at home after the probe fails", 0.25)  # fmt: skip


# ---------------------------------------------------------------------------------------------- grace


def test_deleting_a_pod_that_ignores_term_takes_its_grace_period(life: tuple[str, str], consumer: ControlPlane,
                                                                 pool: ControlPlane) -> None:  # fmt: skip
    ns, remote_ns = life
    started = time.monotonic()
    must(consumer, "DELETE", pod_path(ns, "stubborn"), {"gracePeriodSeconds": GRACE_S})
    wait_until(lambda: get(pool, pod_path(remote_ns, "stubborn")) is None, 40, "the remote pod gone", 0.2)
    remote_gone = time.monotonic() - started
    wait_until(lambda: get(consumer, pod_path(ns, "stubborn")) is None, 30, "the local pod gone", 0.2)
    assert GRACE_S - 0.5 <= remote_gone <= GRACE_S + 12, f"the pool pod went after {remote_gone:.1f}s"
