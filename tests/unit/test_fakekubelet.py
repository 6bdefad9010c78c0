"""Pure parts of the fake kubelet (e2e/fakekubelet): log records, status rules, spec readings, framing."""

from __future__ import annotations

import json

import pytest

from e2e.fakekubelet import execws, node, podlogs, podspec, podstatus, timefmt
from e2e.fakekubelet.podstatus import ConditionBook, ContainerState

NS = 1_000_000_000


# -- time ------------------------------------------------------------------------------------------------


def test_rfc3339_round_trip_keeps_nanoseconds() -> None:
    ts = 1_700_000_000 * NS + 123_456_789
    text = timefmt.rfc3339_nano(ts)
    assert text == "2023-11-14T22:13:20.123456789Z"
    assert timefmt.parse_rfc3339_ns(text) == ts


def test_parse_rfc3339_offsets_and_short_fractions() -> None:
    assert timefmt.parse_rfc3339_ns("2023-11-14T23:13:20+01:00") == 1_700_000_000 * NS
    assert timefmt.parse_rfc3339_ns("2023-11-14T22:13:20.5Z") == 1_700_000_000 * NS + NS // 2
    with pytest.raises(ValueError):
        timefmt.parse_rfc3339_ns("yesterday")


def test_micro_time_always_has_six_digits() -> None:
    from datetime import UTC, datetime

    assert timefmt.micro_time(datetime(2024, 1, 2, 3, 4, 5, 0, tzinfo=UTC)) == "2024-01-02T03:04:05.000000Z"


# -- logs ------------------------------------------------------------------------------------------------


def _records(*lines: tuple[int, str]) -> list[podlogs.LogRecord]:
    return [podlogs.LogRecord(ts * NS, "stdout", False, text.encode()) for ts, text in lines]


def test_record_format_parses_back() -> None:
    raw = podlogs.format_record(5 * NS + 7, "stderr", b"hello world", partial=True)
    assert raw.endswith(b" stderr P hello world\n")
    rec = podlogs.parse_record(raw)
    assert rec == podlogs.LogRecord(5 * NS + 7, "stderr", True, b"hello world")
    assert podlogs.parse_record(b"garbage") is None


def test_tail_is_applied_before_since() -> None:
    recs = _records((1, "a"), (2, "b"), (3, "c"), (4, "d"))
    q = podlogs.LogQuery(tail_lines=3, since_ns=3 * NS)
    assert [r.content for r in podlogs.select(recs, q)] == [b"c", b"d"]
    assert podlogs.select(recs, podlogs.LogQuery(tail_lines=0)) == []


def test_render_timestamps_partials_and_limit_bytes() -> None:
    recs = [
        podlogs.LogRecord(1 * NS, "stdout", True, b"par"),
        podlogs.LogRecord(1 * NS, "stdout", False, b"tial"),
        podlogs.LogRecord(2 * NS, "stdout", False, b"next"),
    ]
    plain = podlogs.LogQuery()
    assert podlogs.render(recs, plain, podlogs.ByteBudget(None)) == b"partial\nnext\n"
    stamped = podlogs.render(recs[2:], podlogs.LogQuery(timestamps=True), podlogs.ByteBudget(None))
    assert stamped == b"1970-01-01T00:00:02.000000000Z next\n"
    budget = podlogs.ByteBudget(6)
    assert podlogs.render(recs, plain, budget) == b"partia"
    assert budget.exhausted


def test_parse_query() -> None:
    q = podlogs.parse_query(
        {"follow": "true", "tailLines": "2", "timestamps": "1", "sinceSeconds": "10", "previous": "false"},
        now=100 * NS,
    )
    assert (q.follow, q.tail_lines, q.timestamps, q.since_ns, q.previous) == (True, 2, True, 90 * NS, False)
    assert podlogs.parse_query({"sinceTime": "1970-01-01T00:00:05Z"}).since_ns == 5 * NS
    with pytest.raises(ValueError):
        podlogs.parse_query({"tailLines": "-1"})


def test_splitter_cuts_long_lines_into_partials() -> None:
    sp = podlogs._Splitter()
    assert sp.feed(b"one\ntw") == [(b"one", False)]
    assert sp.feed(b"o\n") == [(b"two", False)]
    long = sp.feed(b"x" * (podlogs.MAX_RECORD + 3) + b"\n")
    assert long == [(b"x" * podlogs.MAX_RECORD, True), (b"xxx", False)]
    sp.feed(b"tail")
    assert sp.flush() == [(b"tail", False)]


# -- status ----------------------------------------------------------------------------------------------


def _running(name: str = "c") -> ContainerState:
    st = ContainerState(name, "busybox")
    st.state = {"running": {"startedAt": "t"}}
    st.ready = True
    return st


def _terminated(code: int, name: str = "c", init: bool = False) -> ContainerState:
    st = ContainerState(name, "busybox", init=init)
    st.state = {"terminated": {"exitCode": code}}
    st.done = True
    return st


def test_phase_rules() -> None:
    assert podstatus.pod_phase([], [ContainerState("c", "i")]) == "Pending"
    assert podstatus.pod_phase([], [_running()]) == "Running"
    assert podstatus.pod_phase([], [_running("a"), _terminated(1, "b")]) == "Running"
    assert podstatus.pod_phase([], [_terminated(0)]) == "Succeeded"
    assert podstatus.pod_phase([], [_terminated(0, "a"), _terminated(2, "b")]) == "Failed"
    assert podstatus.pod_phase([_terminated(1, "i", init=True)], [ContainerState("c", "x")]) == "Failed"
    pending_init = ContainerState("i", "x", init=True)
    assert podstatus.pod_phase([pending_init], [ContainerState("c", "x")]) == "Pending"
    crashloop = ContainerState("c", "x")
    crashloop.state = {"waiting": {"reason": "CrashLoopBackOff"}}
    crashloop.last_state = {"terminated": {"exitCode": 1}}
    assert podstatus.pod_phase([], [crashloop]) == "Running"


def test_conditions_keep_transition_times_until_status_flips() -> None:
    book = ConditionBook()
    first = podstatus.conditions(book, [], [_running()], "Running", True, "T1")
    again = podstatus.conditions(book, [], [_running()], "Running", True, "T2")
    assert first == again
    done = podstatus.conditions(book, [], [_terminated(0)], "Succeeded", True, "T3")
    ready = next(c for c in done if c["type"] == "Ready")
    assert (
        ready["status"] == "False"
        and ready["reason"] == "PodCompleted"
        and ready["lastTransitionTime"] == "T3"
    )
    init = next(c for c in done if c["type"] == "Initialized")
    assert init["lastTransitionTime"] == "T1"


def test_merge_conditions_keeps_other_writers_and_the_schedulers() -> None:
    existing = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "S"},
        {"type": "DisruptionTarget", "status": "True"},
        {"type": "Ready", "status": "False"},
    ]
    ours = [{"type": "Ready", "status": "True"}]
    merged = podstatus.merge_conditions(existing, ours, {"type": "PodScheduled", "status": "True", "x": 1})
    assert merged == [existing[0], existing[1], ours[0]]
    bare = podstatus.merge_conditions(None, ours, {"type": "PodScheduled"})
    assert [c["type"] for c in bare] == ["PodScheduled", "Ready"]


def test_merge_patch_is_top_level_diff_with_nulls() -> None:
    old = {"phase": "Pending", "podIP": "1", "reason": "x"}
    new = {"phase": "Running", "podIP": "1"}
    assert podstatus.merge_patch(old, new) == {"phase": "Running", "reason": None}
    assert podstatus.merge_patch(new, new) == {}
    assert podstatus.merge_patch(None, new) == new


@pytest.mark.parametrize(
    ("image", "repo"),
    [
        ("busybox", "docker.io/library/busybox"),
        ("busybox:1.36", "docker.io/library/busybox"),
        ("me/app:v1", "docker.io/me/app"),
        ("registry.k8s.io/pause:3.9", "registry.k8s.io/pause"),
        ("localhost:5000/x", "localhost:5000/x"),
    ],
)
def test_image_id_is_a_digest_reference(image: str, repo: str) -> None:
    ref = podstatus.image_id(image)
    name, digest = ref.split("@sha256:")
    assert name == repo and len(digest) == 64


def test_container_status_shape() -> None:
    st = _running()
    st.container_id = podstatus.container_id("uid", "c", 0)
    out = st.to_status()
    assert out["containerID"].startswith("fake://") and len(out["containerID"]) == 7 + 64
    assert out["started"] is True and out["ready"] is True and out["restartCount"] == 0
    assert ContainerState("c", "i").to_status()["imageID"] == ""


# -- spec ------------------------------------------------------------------------------------------------


def test_env_and_argv_expansion() -> None:
    spec = {
        "command": ["sh", "-c"],
        "args": ["echo $(GREETING) $(MISSING) $$(ESC)"],
        "env": [
            {"name": "WHO", "value": "world"},
            {"name": "GREETING", "value": "hello $(WHO)"},
            {"name": "FROM_SECRET", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}},
        ],
    }
    env = podspec.container_env(spec, {"PATH": "/bin"})
    assert env["GREETING"] == "hello world" and "FROM_SECRET" not in env and env["PATH"] == "/bin"
    assert podspec.container_argv(spec, env) == ["sh", "-c", "echo hello world $(MISSING) $(ESC)"]
    assert podspec.container_argv({}, env) == ["sleep", "infinity"]
    assert podspec.container_argv({"args": ["sh", "-c", "true"]}, env) == ["sh", "-c", "true"]


@pytest.mark.parametrize(
    ("policy", "code", "init", "sidecar", "expected"),
    [
        ("Always", 0, False, False, True),
        ("OnFailure", 0, False, False, False),
        ("OnFailure", 1, False, False, True),
        ("Never", 1, False, False, False),
        ("Always", 0, True, False, False),
        ("Always", 1, True, False, True),
        ("Never", 1, True, False, False),
        ("Never", 0, True, True, True),
    ],
)
def test_should_restart(policy: str, code: int, init: bool, sidecar: bool, expected: bool) -> None:
    assert podspec.should_restart(policy, code, init=init, sidecar=sidecar) is expected


def test_grace_and_exit_plan() -> None:
    pod = {"metadata": {"deletionGracePeriodSeconds": 120}, "spec": {"terminationGracePeriodSeconds": 5}}
    assert podspec.grace_seconds(pod) == podspec.MAX_GRACE
    assert podspec.grace_seconds({"metadata": {}, "spec": {"terminationGracePeriodSeconds": 5}}) == 5
    ann = {podspec.ANN_EXIT_AFTER: "1.5", podspec.ANN_EXIT_CODE: "3"}
    assert podspec.exit_plan({"metadata": {"annotations": ann}}) == (1.5, 3)
    assert podspec.exit_plan({"metadata": {}}) is None
    assert podspec.backoff(0) == 0.5 and podspec.backoff(10) == 5.0


# -- exec framing ----------------------------------------------------------------------------------------


def test_channel_framing() -> None:
    assert execws.encode(execws.V5, 1, b"hi") == b"\x01hi"
    assert execws.decode(execws.V5, b"\x00data") == (0, b"data")
    assert execws.encode(execws.V4_B64, 2, b"hi") == "2aGk="
    assert execws.decode(execws.V4_B64, "0aGk=") == (0, b"hi")
    assert execws.decode(execws.V5, bytes([255, 0])) == (255, b"\x00")


def test_exec_status_payloads() -> None:
    ok = json.loads(execws.status_payload(execws.V5, 0, None, ["true"]) or b"")
    assert ok == {"metadata": {}, "status": "Success"}
    bad = json.loads(execws.status_payload(execws.V4, 3, None, ["sh", "-c", "exit 3"]) or b"")
    assert bad["reason"] == "NonZeroExitCode"
    assert bad["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]
    assert execws.status_payload(execws.V1, 0, None, ["true"]) is None


def test_exec_request_from_apiserver_query() -> None:
    req = execws.ExecRequest.from_query({"input": "1", "output": "1", "error": "1", "tty": "1"}, ["sh"])
    assert (req.stdin, req.stdout, req.stderr, req.tty) == (True, True, False, True)
    req = execws.ExecRequest.from_query({"stdout": "true"}, ["ls"])
    assert (req.stdin, req.stdout, req.stderr, req.tty) == (False, True, False, False)


# -- node ------------------------------------------------------------------------------------------------


def test_node_object() -> None:
    obj = node.node_object("n1", 12345, "T", declare_ws=True)
    status = obj["status"]
    assert obj["metadata"]["labels"]["type"] == "fake-worker"
    assert status["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    assert status["daemonEndpoints"]["kubeletEndpoint"]["Port"] == 12345
    assert status["declaredFeatures"] == ["ExtendWebSocketsToKubelet"]
    assert status["capacity"] == {
        "cpu": "32",
        "memory": "128Gi",
        "pods": "1000",
        "ephemeral-storage": "100Gi",
    }
    ready = next(c for c in status["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "True"
