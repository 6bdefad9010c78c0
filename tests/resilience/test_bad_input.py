"""Scenario 7: bad input. Each case ends with a clear log line (and an Event where a pod is concerned),
and nothing lost: pods keep running or run once the input is fixed.

Decision for a local namespace whose DefaultName remote name (`<ns>-<consumer id>`) exceeds 63
characters: vkbridge does not invent another name (the provider owns remote names; a hashed or truncated
name would differ from Liqo's and from what users find on the pool). The provider reports the mapping
`CreationLoopBackOff`; vkbridge keeps the pods Pending, never aborts them (the mapping can be fixed in
place), and says why on each pod (Warning event) and in its log, naming the 63-character limit and the
fixes: a namespace name of at most 63 - 1 - len(consumer id) characters, or the SelectedName strategy
with a short `remoteNamespaceName`. The test then applies SelectedName and the pod runs.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane, wait_for
from e2e.fixtures_pool import namespace_offloading
from e2e.vkbridge_proc import VkbridgeProcess
from tests.integration.helpers import events_for, get, must, phase, pod_path, shadow_path, wait_until
from tests.resilience.kit import (
    Figures,
    OwnVkbridge,
    TinyPods,
    create_pods,
    is_running,
    local_pods,
    log_lines_since,
    poll,
    remote_pods,
    shadowpods,
    tiny_pod,
    wait_all_running,
)

MERGE = "application/merge-patch+json"
OFFLOADING = "/apis/offloading.liqo.io/v1beta1"


# ---------------------------------------------------------------------------------------------- Secret


def secret_path(bundle: Bundle) -> str:
    return f"/api/v1/namespaces/{bundle.tenant_ns}/secrets/{bundle.secret_name}"


@pytest.fixture
def kubeconfig_secret(consumer: ControlPlane, bundle: Bundle) -> Iterator[dict[str, Any]]:
    """The pool kubeconfig Secret as it was; put back exactly (data) after the test, whatever happened."""
    original = must(consumer, "GET", secret_path(bundle))
    yield original
    status, _ = consumer.api("GET", secret_path(bundle))
    if status == 404:
        body: dict[str, Any] = {
            k: copy.deepcopy(original[k]) for k in ("apiVersion", "kind", "type", "data") if k in original
        }
        body["metadata"] = {
            k: original["metadata"][k] for k in ("name", "namespace", "labels") if k in original["metadata"]
        }
        must(consumer, "POST", f"/api/v1/namespaces/{bundle.tenant_ns}/secrets", body)
    else:
        must(consumer, "PATCH", secret_path(bundle), {"data": original["data"]}, content_type=MERGE)


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


def bad_kubeconfigs(bundle: Bundle) -> dict[str, dict[str, str | None]]:
    """Secret `data` variants that must all be refused (the working credential stays in use)."""
    insecure = copy.deepcopy(bundle.kubeconfig)
    insecure["clusters"][0]["cluster"]["insecure-skip-tls-verify"] = True
    insecure["clusters"][0]["cluster"].pop("certificate-authority-data", None)
    # Issue 15 item 6: a Secret's kubeconfig may not make vkbridge read a local file (its own SA token).
    token_file = copy.deepcopy(bundle.kubeconfig)
    token_file["users"][0]["user"] = {"tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"}
    return {
        "binary garbage": {"kubeconfig": b64(bytes(range(256)))},
        "not a kubeconfig": {"kubeconfig": b64("just: [some, yaml\n")},
        "no kubeconfig key": {"kubeconfig": None, "config": b64(yaml.safe_dump(bundle.kubeconfig))},
        "insecure-skip-tls-verify": {"kubeconfig": b64(yaml.safe_dump(insecure))},
        "a local token file": {"kubeconfig": b64(yaml.safe_dump(token_file))},
    }


def a_new_pod_runs(pods: TinyPods, prefix: str, why: str) -> str:
    """The credential in use still works: a pod created now runs. Its name."""
    name = f"{prefix}-{uuid.uuid4().hex[:5]}"
    pods.create([name])
    wait_until(lambda: phase(pods.consumer, pods.ns, name) == "Running", 30, why)
    return name


def test_malformed_kubeconfig_secret_is_refused_and_the_credential_in_use_kept(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess, kubeconfig_secret: dict[str, Any],
    pods: TinyPods, figures: Figures,
) -> None:  # fmt: skip
    mark = len(vkbridge.log_text())
    refused: dict[str, str] = {}
    for what, data in bad_kubeconfigs(bundle).items():
        start = len(vkbridge.log_text())
        must(consumer, "PATCH", secret_path(bundle), {"data": data}, content_type=MERGE)
        m = vkbridge.wait_for_log(r"pool credential (unusable|rejected)[^\n]*", 15, start=start)
        refused[what] = m.group(0)
        must(consumer, "PATCH", secret_path(bundle), {"data": {"config": None, **kubeconfig_secret["data"]}},
             content_type=MERGE)  # fmt: skip
        time.sleep(0.5)
    name = a_new_pod_runs(pods, "still-works", "a pod to run with the credential kept")
    log = vkbridge.log_text()[mark:]
    for what, line in refused.items():
        figures.add(f"refused: {what}", line[:150])
    assert "PRIVATE KEY" not in log and bundle.key_pem.decode().splitlines()[1] not in log, (
        "key material logged"
    )
    assert "credential swapped" not in log, "a bad Secret must never replace the working credential"
    unnamed = [what for what, line in refused.items() if bundle.secret_name not in line]
    assert not unnamed, f"refusals that do not name the Secret to fix: {unnamed}"
    # Each refusal is also a Warning Event on the Secret (`kubectl describe secret` shows why).
    wait_until(
        lambda: any(
            e["reason"] == "KubeconfigRefused" and "tokenFile" in e["message"]
            for e in events_for(consumer, bundle.tenant_ns, bundle.secret_name)
        ),
        10,
        "a KubeconfigRefused Event on the Secret naming tokenFile",
    )
    assert vkbridge.alive()
    assert name in pods.shadows()


def test_malformed_kubeconfig_secret_at_startup_exits_with_a_clear_message(
    consumer: ControlPlane, bundle: Bundle, own_vkbridge: OwnVkbridge, kubeconfig_secret: dict[str, Any],
    figures: Figures,
) -> None:  # fmt: skip
    must(consumer, "PATCH", secret_path(bundle), {"data": {"kubeconfig": b64("not: [a kubeconfig")}},
         content_type=MERGE)  # fmt: skip
    vk = own_vkbridge("bad-secret-at-start")
    wait_for(lambda: not vk.alive(), 30, "vkbridge to give up on the unusable Secret")
    code = vk.stop()
    log = vk.log_text()
    figures.add("exit code", code)
    figures.add("last line", log.strip().splitlines()[-1][:200])
    assert code == 2, log[-2000:]
    assert "cannot use the pool kubeconfig" in log and bundle.secret_name in log, log[-2000:]
    assert "Unclosed" not in log, "one clear line, not followed by asyncio's complaints about open sessions"
    assert "PRIVATE KEY" not in log


def test_deleted_kubeconfig_secret_keeps_the_credential_in_use(
    consumer: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess, kubeconfig_secret: dict[str, Any],
    pods: TinyPods, figures: Figures,
) -> None:  # fmt: skip
    mark = len(vkbridge.log_text())
    must(consumer, "DELETE", secret_path(bundle))
    line = vkbridge.wait_for_log(r"pool credential unusable[^\n]*", 15, start=mark).group(0)
    name = a_new_pod_runs(pods, "no-secret", "a pod to run without the Secret")
    figures.add("log line", line[:200])
    assert "not found" in line and bundle.secret_name in line
    assert vkbridge.alive() and name in pods.shadows()


# ---------------------------------------------------------------------------------------------- invalid pod


INVALID_LABEL = "resilience.vkbridge.io/invalid"
POLICY = "resilience-reject-invalid-shadowpods"
POLICY_MESSAGE = "pool policy: this pod is invalid here (resilience test)"


@pytest.fixture
def rejecting_pool(pool: ControlPlane) -> Iterator[None]:
    """A ValidatingAdmissionPolicy on the pool refusing ShadowPods labelled INVALID_LABEL (422 Invalid)."""
    vap = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies"
    binding = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
    must(pool, "POST", vap, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": POLICY},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["offloading.liqo.io"], "apiVersions": ["*"],
                                                    "operations": ["CREATE"], "resources": ["shadowpods"]}]},
            "validations": [{"expression": f"!has(object.metadata.labels) || !('{INVALID_LABEL}' in object.metadata.labels)",
                             "message": POLICY_MESSAGE, "reason": "Invalid"}],
        },
    })  # fmt: skip
    must(pool, "POST", binding, {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": POLICY}, "spec": {"policyName": POLICY, "validationActions": ["Deny"]},
    })  # fmt: skip
    try:
        yield
    finally:
        pool.api("DELETE", f"{binding}/{POLICY}")
        pool.api("DELETE", f"{vap}/{POLICY}")


def policy_active(pool: ControlPlane, remote_ns: str) -> bool:
    probe = {
        "apiVersion": "offloading.liqo.io/v1beta1", "kind": "ShadowPod",
        "metadata": {"name": "probe", "labels": {INVALID_LABEL: "true"}},
        "spec": {"pod": {"containers": [{"name": "c", "image": "busybox"}]}},
    }  # fmt: skip
    status, _ = pool.api("POST", shadow_path(remote_ns) + "?dryRun=All", probe)
    return status == 422


def test_pod_the_pool_rejects_as_invalid_is_reported_kept_pending_and_runs_once_allowed(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str], rejecting_pool: None, figures: Figures,
) -> None:  # fmt: skip
    ns, remote = offloaded_ns
    wait_until(lambda: policy_active(pool, remote), 30, "the pool's policy to be active")
    mark = len(vkbridge.log_text())
    create_pods(consumer, ns, [tiny_pod(bundle.slug, "fine"),
                               tiny_pod(bundle.slug, "refused", labels={INVALID_LABEL: "true"})])  # fmt: skip

    def refusal_event() -> dict[str, Any] | None:
        for ev in events_for(consumer, ns, "refused"):
            if ev["reason"] == "FailedReflection" and POLICY_MESSAGE in ev["message"]:
                return ev
        return None

    t0 = time.monotonic()
    event = wait_until(refusal_event, 30, "a FailedReflection event carrying the pool's message")
    t_event = time.monotonic() - t0
    wait_all_running(consumer, ns, ["fine"], 30)
    time.sleep(10)  # let the refused pod be retried a few times
    lines = log_lines_since(vkbridge, mark)
    about = [ln for ln in lines if f"{ns}/refused" in ln]
    assert phase(consumer, ns, "refused") == "Pending", "a refused pod stays Pending, never Failed"
    assert get(consumer, pod_path(ns, "refused")) is not None and "refused" not in shadowpods(pool, remote)
    assert any("422" in ln or "Invalid" in ln for ln in about), "the log names the pool's refusal"

    pool.api("DELETE", f"/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings/{POLICY}")
    t1 = time.monotonic()
    t_run = poll(lambda: is_running(local_pods(consumer, ns).get("refused")), 120, interval=0.5)
    figures.add("FailedReflection event after", t_event, "s")
    figures.add("event message", event["message"][:160])
    figures.add("log lines about the pod in the first ~10 s", len(about))
    figures.add("Running after the policy was lifted", t_run if t_run is not None else "never (120 s)", "s")
    for ln in about[:6]:
        print("   refused:", ln[:220])
    _ = t1
    assert t_run is not None, "the refused pod never ran once the pool allowed it"


# ---------------------------------------------------------------------------------------------- long namespace


def test_namespace_whose_remote_name_exceeds_63_characters(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess, figures: Figures,
) -> None:  # fmt: skip
    ns = ("resilience-long-namespace-name-" + uuid.uuid4().hex)[:60]
    remote_default = f"{ns}-{bundle.consumer_id}"
    assert len(remote_default) > 63
    must(consumer, "POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    short = f"rl-{uuid.uuid4().hex[:8]}"
    try:
        wait_for(lambda: consumer.api("GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default")[0] == 200, 30,
                 "the default ServiceAccount")  # fmt: skip
        must(consumer, "POST", f"{OFFLOADING}/namespaces/{ns}/namespaceoffloadings", namespace_offloading(ns))
        nm_path = f"{OFFLOADING}/namespaces/{bundle.tenant_ns}/namespacemaps/{bundle.slug}"

        def mapping() -> dict[str, Any]:
            nm = get(consumer, nm_path) or {}
            return dict(((nm.get("status") or {}).get("currentMapping") or {}).get(ns) or {})

        wait_until(
            lambda: mapping().get("phase") == "CreationLoopBackOff", 30, "the provider to refuse the name"
        )
        mark = len(vkbridge.log_text())
        must(consumer, "POST", pod_path(ns), tiny_pod(bundle.slug, "waits"))

        def warned() -> dict[str, Any] | None:
            return next((e for e in events_for(consumer, ns, "waits") if e["type"] == "Warning"), None)

        poll(lambda: warned() is not None, 20)
        event = warned()
        lines = [ln for ln in log_lines_since(vkbridge, mark) if ns in ln]
        pending = phase(consumer, ns, "waits")
        figures.add("mapping phase", mapping().get("phase"))
        figures.add("pod phase", pending)
        figures.add(
            "Warning event",
            "none in 20 s" if event is None else f"{event['reason']}: {event['message'][:140]}",
        )
        figures.add("log lines naming the namespace", len(lines))

        # the fix the message should name: SelectedName with a short remote name
        must(consumer, "PATCH", f"{OFFLOADING}/namespaces/{ns}/namespaceoffloadings/offloading",
             {"spec": {"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": short}},
             content_type=MERGE)  # fmt: skip
        t1 = time.monotonic()
        t_run = poll(lambda: phase(consumer, ns, "waits") == "Running", 60, interval=0.5)
        figures.add(
            "Running after switching to SelectedName", t_run if t_run is not None else "never (60 s)", "s"
        )
        _ = t1

        assert pending == "Pending", "a pod must never be aborted for a namespace mapping the pool refused"
        assert t_run is not None, "the pod never ran after the mapping was fixed"
        assert event is not None, "no Warning event tells the user why the pod waits"
        assert "63" in event["message"], f"the event should name the 63-character limit: {event['message']}"
        assert any("63" in ln for ln in lines), "the log should name the namespace and the 63-character limit"
    finally:
        consumer.api("DELETE", f"/api/v1/namespaces/{ns}")


# ---------------------------------------------------------------------------------------------- big objects


def test_pod_with_200_containers_runs_with_every_status_mirrored(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str], figures: Figures,
) -> None:  # fmt: skip
    ns, remote = offloaded_ns
    pod = tiny_pod(bundle.slug, "many")
    template = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [{**copy.deepcopy(template), "name": f"c{i:03d}"} for i in range(200)]
    t0 = time.monotonic()
    must(consumer, "POST", pod_path(ns), pod)
    t_shadow = poll(lambda: "many" in shadowpods(pool, remote), 60)

    def all_ready() -> bool:
        local = get(consumer, pod_path(ns, "many")) or {}
        statuses = (local.get("status") or {}).get("containerStatuses") or []
        return len(statuses) == 200 and all(s.get("ready") for s in statuses)

    t_ready = poll(all_ready, 180, interval=1.0)
    figures.add("ShadowPod created after", t_shadow if t_shadow is not None else "never (60 s)", "s")
    figures.add(
        "all 200 containers ready at home after", t_ready if t_ready is not None else "never (180 s)", "s"
    )
    figures.add("total", time.monotonic() - t0, "s")
    assert t_ready is not None
    local = get(consumer, pod_path(ns, "many"))
    rp = remote_pods(pool, remote)["many"]
    assert local is not None and local["status"]["phase"] == "Running"
    by_name = {c["name"]: c["state"] for c in rp["status"]["containerStatuses"]}
    assert {c["name"]: c["state"] for c in local["status"]["containerStatuses"]} == by_name


def blob(size: int) -> str:
    """Deterministic printable content of exactly `size` characters (corruption shows in the hash)."""
    out: list[str] = []
    seed = b"vkbridge"
    while sum(len(x) for x in out) < size:
        seed = hashlib.sha256(seed).digest()
        out.append(seed.hex())
    return "".join(out)[:size]


def test_configmap_of_1_mib_reaches_the_pool_intact_and_follows_edits(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str], figures: Figures,
) -> None:  # fmt: skip
    ns, remote = offloaded_ns
    key = "blob.txt"
    value = blob(1024 * 1024 - len(key))  # the API server's limit: keys + values <= 1 MiB
    must(consumer, "POST", f"/api/v1/namespaces/{ns}/configmaps",
         {"metadata": {"name": "big"}, "data": {key: value}})  # fmt: skip
    pod = tiny_pod(bundle.slug, "reads-big")
    pod["spec"]["volumes"] = [{"name": "big", "configMap": {"name": "big"}}]
    pod["spec"]["containers"][0]["volumeMounts"] = [{"name": "big", "mountPath": "/big"}]
    t0 = time.monotonic()
    must(consumer, "POST", pod_path(ns), pod)

    def remote_value() -> str | None:
        cm = get(pool, f"/api/v1/namespaces/{remote}/configmaps/big")
        return None if cm is None else (cm.get("data") or {}).get(key)

    t_copy = poll(lambda: remote_value() == value, 60, interval=0.5)
    t_run = poll(lambda: phase(consumer, ns, "reads-big") == "Running", 60, interval=0.5)
    edited = value[:-1] + ("a" if value[-1] != "a" else "b")
    must(
        consumer,
        "PATCH",
        f"/api/v1/namespaces/{ns}/configmaps/big",
        {"data": {key: edited}},
        content_type=MERGE,
    )
    t_edit = poll(lambda: remote_value() == edited, 30, interval=0.5)
    figures.add("ConfigMap size", len(key) + len(value), "bytes")
    figures.add("copied to the pool intact after", t_copy if t_copy is not None else "never (60 s)", "s")
    figures.add("pod Running after", t_run if t_run is not None else "never (60 s)", "s")
    figures.add("one-byte edit on the pool after", t_edit if t_edit is not None else "never (30 s)", "s")
    _ = t0
    assert t_copy is not None, (
        f"the pool's copy is missing or differs (sha256 of ours {hashlib.sha256(value.encode()).hexdigest()[:12]})"
    )
    assert t_run is not None
    assert t_edit is not None, "an edit of the 1 MiB ConfigMap did not reach the pool"


# ---------------------------------------------------------------------------------------------- annotations

ODD_ANNOTATIONS = {
    "example.com/unicode": "héllo wörld ✓ 日本語 🚀 Ωmega",
    "example.com/newlines": "line1\nline2\r\n\tindented\n",
    "example.com/quotes": "\"double\" 'single' `back` \\backslash\\ key=value",
    "example.com/json": '{"a": [1, 2, {"b": null}], "c": "d=e", "f": "\\u00e9"}',
    "example.com/empty": "",
    "example.com/spaces": "  leading and trailing  ",
    "example.com/shell": "$(rm -rf /); `id`; ${HOME} && echo pwned | cat > /etc/passwd",
    "example.com/format": "%s %d %(name)s {0} {} {{}} %%",
    "example.com/control": "bell\x07 escape \x1b[31mred\x1b[0m",
    "example.com/big": "z" * 100_000,
    "odd-key.example.com/A.b-c_D9": "key with every punctuation a key may hold",
}


def test_annotation_values_with_odd_characters_are_reflected_verbatim(
    consumer: ControlPlane, pool: ControlPlane, bundle: Bundle, vkbridge: VkbridgeProcess,
    offloaded_ns: tuple[str, str], figures: Figures,
) -> None:  # fmt: skip
    ns, remote = offloaded_ns
    mark = len(vkbridge.log_text())
    must(consumer, "POST", pod_path(ns), tiny_pod(bundle.slug, "odd", annotations=dict(ODD_ANNOTATIONS)))
    wait_until(lambda: phase(consumer, ns, "odd") == "Running", 30, "the annotated pod Running")

    def remote_annotations(kind: str) -> dict[str, str]:
        objs = shadowpods(pool, remote) if kind == "shadow" else remote_pods(pool, remote)
        return dict((objs.get("odd") or {}).get("metadata", {}).get("annotations") or {})

    for kind in ("shadow", "pod"):
        got = remote_annotations(kind)
        wrong = {k for k, v in ODD_ANNOTATIONS.items() if got.get(k) != v}
        assert not wrong, f"{kind}: annotations changed in transit: {sorted(wrong)}"
    changed = {"example.com/unicode": "changed → ünïcödé 🎉\nwith a newline", "example.com/empty": "now set"}
    t0 = time.monotonic()
    must(consumer, "PATCH", pod_path(ns, "odd"), {"metadata": {"annotations": changed}}, content_type=MERGE)
    t_follow = poll(lambda: all(remote_annotations("pod").get(k) == v for k, v in changed.items()), 30)
    broken = [ln for ln in vkbridge.log_text()[mark:].splitlines()
              if ln and not ln[:4].isdigit() and not ln.startswith(("----", "Traceback", " "))]  # fmt: skip
    figures.add(
        "annotations", f"{len(ODD_ANNOTATIONS)} ({sum(map(len, ODD_ANNOTATIONS.values()))} characters)"
    )
    figures.add(
        "edit reached the remote pod after", t_follow if t_follow is not None else "never (30 s)", "s"
    )
    figures.add("log lines broken by annotation content", len(broken))
    _ = t0
    assert t_follow is not None, "an annotation edit did not reach the pool"
    assert not broken, broken[:5]
    assert is_running(local_pods(consumer, ns).get("odd"))
