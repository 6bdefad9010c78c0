"""deploy/ against a real consumer API server: every manifest passes a server-side dry run (schemas,
CRDs, strict field validation, Pod Security "restricted"), the RBAC grants exactly what the code uses
(SubjectAccessReviews and impersonated requests as the ServiceAccount), the Deployment's args parse
with vkbridge's own CLI, and they are the args Liqo's controller-manager writes from our
VkOptionsTemplate."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.controlplane import ControlPlane, PlaneError, wait_for
from vkbridge.cli import parse_args

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
MANIFESTS = (
    "serviceaccount.yaml",
    "rbac.yaml",
    "deployment.yaml",
    "rbac-liqo-managed.yaml",
    "vkoptionstemplate.yaml",
)
CONSUMER_ID = "c-1a2b3c4d"
IMAGE = "registry.invalid/vkbridge:test"
LOCAL_POD_CIDR = "10.10.0.0/16"
POD_IP = "10.10.3.7"
PLACEHOLDER = re.compile(r"__[A-Z][A-Z_]*__")
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


def new_slug() -> str:
    return "c" + uuid.uuid4().hex[:12]


def render(name: str, slug: str) -> str:
    text = (DEPLOY / name).read_text()
    for token, value in {
        "__SLUG__": slug,
        "__CONSUMER_ID__": CONSUMER_ID,
        "__IMAGE__": IMAGE,
        "__LOCAL_POD_CIDR__": LOCAL_POD_CIDR,
    }.items():
        text = text.replace(token, value)
    return text


def docs(name: str, slug: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(render(name, slug)) if d]


def only(kind: str, name: str, slug: str) -> dict[str, Any]:
    (found,) = [d for d in docs(name, slug) if d["kind"] == kind]
    return found


@contextmanager
def tenant(consumer: ControlPlane, slug: str, applied: tuple[str, ...] = ()) -> Iterator[str]:
    """Namespace liqo-tenant-<slug> (Pod Security "restricted" in warn mode, so a dry run reports every
    violation of the pod template); `applied` files are applied for real and deleted afterwards."""
    ns = f"liqo-tenant-{slug}"
    labels = {
        "pod-security.kubernetes.io/warn": "restricted",
        "pod-security.kubernetes.io/warn-version": "latest",
    }
    status, body = consumer.api("POST", "/api/v1/namespaces", {"metadata": {"name": ns, "labels": labels}})
    if status != 201:
        raise PlaneError(f"creating namespace {ns}: {status} {body}")
    try:
        for name in applied:
            consumer.kubectl("apply", "-f", "-", input=render(name, slug))
        yield ns
    finally:
        for name in applied:
            consumer.kubectl(
                "delete",
                "--ignore-not-found",
                "--wait=false",
                "-f",
                "-",
                input=render(name, slug),
                check=False,
            )
        consumer.api("DELETE", f"/api/v1/namespaces/{ns}")


def ensure_liqo_namespace(consumer: ControlPlane) -> None:
    """Where Liqo keeps its VkOptionsTemplates. Created once and left in place (as on a Liqo cluster):
    deleting it would race the next test that needs it while it terminates."""
    status, body = consumer.api("POST", "/api/v1/namespaces", {"metadata": {"name": "liqo"}})
    if status not in (201, 409):
        raise PlaneError(f"creating namespace liqo: {status} {body}")


# ---- the files themselves ---------------------------------------------------------------------------------


def test_every_placeholder_is_substituted_and_every_document_is_named() -> None:
    slug = new_slug()
    for name in MANIFESTS:
        text = render(name, slug)
        assert not PLACEHOLDER.findall(text), f"{name}: unknown placeholder(s) {PLACEHOLDER.findall(text)}"
        for doc in docs(name, slug):
            assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name"), f"{name}: {doc}"
    # deploy/README.md pipes several files into one `kubectl apply -f -`: each must start a new document.
    together = [d for d in yaml.safe_load_all("".join(render(n, slug) for n in MANIFESTS)) if d]
    assert len(together) == sum(len(docs(n, slug)) for n in MANIFESTS)
    readme = (DEPLOY / "README.md").read_text()
    for name in MANIFESTS:
        for token in set(PLACEHOLDER.findall((DEPLOY / name).read_text())):
            assert token in readme, f"{token} (used in {name}) is not documented in deploy/README.md"


def test_server_dry_run_of_every_manifest(consumer: ControlPlane) -> None:
    slug = new_slug()
    ensure_liqo_namespace(consumer)
    with tenant(consumer, slug):
        for name in MANIFESTS:
            # kubectl prints "<kind>[.<group>]/<name> created (server dry run)" per object.
            expected = [(d["kind"].lower(), d["metadata"]["name"]) for d in docs(name, slug)]
            res = consumer.kubectl(
                "apply",
                "--dry-run=server",
                "--validate=strict",
                "-f",
                "-",
                input=render(name, slug),
                check=False,
            )
            assert res.returncode == 0, f"{name}:\n{res.stderr}"
            lines = [ln for ln in res.stdout.splitlines() if ln.strip()]
            assert len(lines) == len(expected), f"{name}: {res.stdout}"
            assert all(ln.endswith("(server dry run)") for ln in lines), res.stdout
            for kind, obj in expected:
                assert any(ln.split("/")[0].split(".")[0] == kind and f"/{obj} " in ln for ln in lines), (
                    f"{name}: no {kind}/{obj} in:\n{res.stdout}"
                )
            assert "would violate PodSecurity" not in res.stderr, f"{name}:\n{res.stderr}"


def test_deployment_is_hardened_as_documented() -> None:
    slug = new_slug()
    dep = only("Deployment", "deployment.yaml", slug)
    pod = dep["spec"]["template"]["spec"]
    (ctr,) = pod["containers"]
    assert dep["metadata"]["name"] == f"vk-{slug}" and dep["metadata"]["namespace"] == f"liqo-tenant-{slug}"
    # A standby is Ready (leadership is /leaderz): the new pod starts first and never waits for the old.
    assert dep["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0},
    }
    assert pod["serviceAccountName"] == slug
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
    sc = ctr["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    mounts = {m["mountPath"]: m["name"] for m in ctr["volumeMounts"]}
    assert "emptyDir" in {v["name"]: v for v in pod["volumes"]}[mounts["/tmp"]]
    env = {e["name"]: e for e in ctr["env"]}
    assert env["HOME"]["value"] == env["TMPDIR"]["value"] == "/tmp"
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert ctr["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "healthz"}
    assert ctr["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "healthz"}
    assert ports == {"kubelet": 10250, "metrics": 5872, "healthz": 8081}
    assert ctr["resources"]["limits"]["memory"] and ctr["resources"]["requests"]["cpu"]
    assert pod["priorityClassName"] == "mc-virtual-kubelet-priority"


# ---- the args -----------------------------------------------------------------------------------------------


def _expand(arg: str, env: Mapping[str, str]) -> str:
    """The kubelet's $(VAR) expansion of container args."""
    return re.sub(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m.group(1), m.group(0)), arg)


def _container_env(ctr: Mapping[str, Any], slug: str) -> dict[str, str]:
    fields = {
        "status.podIP": POD_IP,
        "metadata.name": f"vk-{slug}-7d9f-x2x4q",
        "metadata.namespace": f"liqo-tenant-{slug}",
    }
    env: dict[str, str] = {}
    for e in ctr["env"]:
        env[e["name"]] = e["value"] if "value" in e else fields[e["valueFrom"]["fieldRef"]["fieldPath"]]
    return env


def test_deployment_args_parse_with_the_vkbridge_cli() -> None:
    slug = new_slug()
    (ctr,) = only("Deployment", "deployment.yaml", slug)["spec"]["template"]["spec"]["containers"]
    env = _container_env(ctr, slug)
    settings = parse_args([_expand(a, env) for a in ctr["args"]], env=env)

    assert (settings.foreign_cluster_id, settings.nodename, settings.virtual_node_name) == (slug, slug, slug)
    assert settings.tenant_namespace == settings.pod_namespace == f"liqo-tenant-{slug}"
    assert settings.home_cluster_id == CONSUMER_ID and settings.liqo_namespace == "liqo"
    assert settings.foreign_kubeconfig_secret_name == f"kubeconfig-resourceslice-{slug}"
    assert settings.node_ip == POD_IP and settings.pod_name == env["POD_NAME"]
    assert settings.create_node is True and settings.node_check_network is False
    assert settings.enable_apiserver_support is True and settings.disable_ip_reflection is True
    assert settings.pod_reflection_workers == 10 and settings.secret_reflection_workers == 3
    assert settings.metrics_enabled is True and settings.metrics_address == ":5872"
    ports = {p["name"]: p["containerPort"] for p in ctr["ports"]}
    assert settings.listen_port == ports["kubelet"]
    assert int(settings.metrics_address.rpartition(":")[2]) == ports["metrics"]
    assert not [w for w in settings.warnings if "VIRTUALNODE_NAME" in w], settings.warnings


def _liqo_args(template: Mapping[str, Any], slug: str) -> list[str]:
    """What Liqo v1.2 writes for a VirtualNode from a VkOptionsTemplate: forge.forgeVKContainers, then the
    VirtualNode webhook's forced args (kubeconfig Secret, createNode, !disableNetworkCheck)."""
    spec = template["spec"]
    args = [
        f"--foreign-cluster-id={slug}",
        f"--nodename={slug}",
        "--node-ip=$(POD_IP)",
        f"--tenant-namespace=liqo-tenant-{slug}",
        "--liqo-namespace=liqo",
        f"--home-cluster-id={CONSUMER_ID}",
        f"--local-podcidr={LOCAL_POD_CIDR}",
    ]
    reflectors = spec.get("reflectorsConfig") or {}
    order = (
        "pod",
        "service",
        "endpointslice",
        "ingress",
        "configmap",
        "secret",
        "serviceaccount",
        "persistentvolumeclaim",
        "event",
    )
    args += [f"--{r}-reflection-workers={reflectors[r]['workers']}" for r in order if r in reflectors]
    typed = ("service", "ingress", "configmap", "secret", "event")
    args += [f"--{r}-reflection-type={reflectors[r].get('type', '')}" for r in typed if r in reflectors]
    args += list(spec.get("extraArgs") or [])
    args.append(f"--metrics-enabled={str(spec['metricsEnabled']).lower()}")
    if spec["metricsEnabled"]:
        args.append(f"--metrics-address={spec['metricsAddress']}")
    args += [
        f"--foreign-kubeconfig-secret-name=kubeconfig-resourceslice-{slug}",
        f"--create-node={str(spec['createNode']).lower()}",
        f"--node-check-network={str(not spec['disableNetworkCheck']).lower()}",
    ]
    return args


def test_vkoptionstemplate_makes_liqo_write_the_deployment_args() -> None:
    slug = new_slug()
    template = only("VkOptionsTemplate", "vkoptionstemplate.yaml", slug)
    (ctr,) = only("Deployment", "deployment.yaml", slug)["spec"]["template"]["spec"]["containers"]
    assert _liqo_args(template, slug) == ctr["args"]
    assert template["spec"]["containerImage"] == ctr["image"]
    # Liqo sets `command: ["/usr/bin/virtual-kubelet"]`, overriding ENTRYPOINT: the image must answer to it.
    assert ctr["command"] == ["/usr/bin/virtual-kubelet"]
    assert "ln -s /opt/vkbridge/bin/vkbridge /usr/bin/virtual-kubelet" in (REPO / "Dockerfile").read_text()
    env = _container_env(ctr, slug)
    parse_args([_expand(a, env) for a in _liqo_args(template, slug)], env=env)


# ---- RBAC -------------------------------------------------------------------------------------------------


def _allowed(consumer: ControlPlane, user: str, ns_of_sa: str, attrs: Mapping[str, str]) -> bool:
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{ns_of_sa}", "system:authenticated"]
    body = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"user": user, "groups": groups, "resourceAttributes": {k: v for k, v in attrs.items() if v}},
    }
    status, out = consumer.api("POST", SAR_PATH, body)
    assert status == 201, out
    return bool(out["status"].get("allowed"))


def _wait_bound(consumer: ControlPlane, slug: str, ns: str) -> None:
    """RBAC objects reach the authorizer through an informer: wait until a granted verb is allowed."""
    attrs = {"verb": "create", "group": "authentication.k8s.io", "resource": "tokenreviews"}
    user = f"system:serviceaccount:{ns}:{slug}"
    wait_for(lambda: _allowed(consumer, user, ns, attrs) or None, 10, "the new RBAC to take effect")


def _check(consumer: ControlPlane, slug: str, cases: list[tuple[str, str, str, str, str, bool]]) -> None:
    ns = f"liqo-tenant-{slug}"
    user = f"system:serviceaccount:{ns}:{slug}"
    wrong = []
    for verb, gr, namespace, name, sub, want in cases:
        group, _, resource = gr.rpartition("/")
        attrs = {
            "verb": verb,
            "group": group,
            "resource": resource,
            "subresource": sub,
            "namespace": namespace,
            "name": name,
        }
        if _allowed(consumer, user, ns, attrs) != want:
            wrong.append(
                f"{'should' if want else 'should NOT'} be allowed: {verb} {gr}/{sub} ns={namespace or '*'} name={name or '*'}"
            )
    assert not wrong, "\n".join(wrong)


def test_rbac_grants_what_vkbridge_uses_and_nothing_near_it(consumer: ControlPlane) -> None:
    slug = new_slug()
    with tenant(consumer, slug, applied=("serviceaccount.yaml", "rbac.yaml")) as ns:
        kc = f"kubeconfig-resourceslice-{slug}"
        yes, no = True, False
        _wait_bound(consumer, slug, ns)
        _check(consumer, slug, [
            # the Node: create, and only its own object otherwise
            ("create", "nodes", "", "", "", yes),
            ("get", "nodes", "", slug, "", yes),
            ("list", "nodes", "", slug, "", yes),
            ("watch", "nodes", "", slug, "", yes),
            ("patch", "nodes", "", slug, "", yes),
            ("patch", "nodes", "", slug, "status", yes),
            ("get", "nodes", "", "some-real-node", "", no),
            ("patch", "nodes", "", "some-real-node", "status", no),
            ("list", "nodes", "", "", "", no),
            ("delete", "nodes", "", slug, "", no),
            ("update", "nodes", "", slug, "", no),
            # pods everywhere: read, status, delete (never create or edit the spec)
            ("list", "pods", "", "", "", yes),
            ("watch", "pods", "", "", "", yes),
            ("get", "pods", "team-a", "p", "", yes),
            ("delete", "pods", "team-a", "p", "", yes),
            ("patch", "pods", "team-a", "p", "status", yes),
            ("create", "pods", "team-a", "", "", no),
            ("patch", "pods", "team-a", "p", "", no),
            ("update", "pods", "team-a", "p", "", no),
            ("create", "pods", "team-a", "p", "exec", no),
            ("create", "pods", "team-a", "p", "eviction", no),
            ("create", "events", "team-a", "", "", yes),
            ("patch", "events", "team-a", "e", "", yes),
            ("delete", "events", "team-a", "e", "", yes),
            # configuration reflection reads; the one Secret it writes is its own kubeconfig
            ("list", "secrets", "", "", "", yes),
            ("watch", "configmaps", "", "", "", yes),
            ("get", "secrets", "team-a", "s", "", yes),
            ("create", "secrets", "team-a", "", "", no),
            ("update", "secrets", "team-a", "s", "", no),
            ("update", "configmaps", "team-a", "c", "", no),
            ("update", "secrets", ns, kc, "", yes),
            ("update", "secrets", ns, "another-secret", "", no),
            ("delete", "secrets", ns, kc, "", no),
            ("create", "secrets", ns, "", "", no),
            # kubelet serving certificate: ask, never approve or sign
            ("create", "certificates.k8s.io/certificatesigningrequests", "", "", "", yes),
            ("get", "certificates.k8s.io/certificatesigningrequests", "", "csr-x", "", yes),
            ("watch", "certificates.k8s.io/certificatesigningrequests", "", "csr-x", "", yes),
            ("update", "certificates.k8s.io/certificatesigningrequests", "", "csr-x", "approval", no),
            ("update", "certificates.k8s.io/certificatesigningrequests", "", "csr-x", "status", no),
            ("approve", "certificates.k8s.io/signers", "", "kubernetes.io/kubelet-serving", "", no),
            # kubelet API authn/authz
            ("create", "authentication.k8s.io/tokenreviews", "", "", "", yes),
            ("create", "authorization.k8s.io/subjectaccessreviews", "", "", "", yes),
            ("create", "serviceaccounts", "team-a", "default", "token", no),
            # heartbeat Lease: its namespace, its name
            ("create", "coordination.k8s.io/leases", "kube-node-lease", "", "", yes),
            ("get", "coordination.k8s.io/leases", "kube-node-lease", slug, "", yes),
            ("update", "coordination.k8s.io/leases", "kube-node-lease", slug, "", yes),
            ("update", "coordination.k8s.io/leases", "kube-node-lease", "some-real-node", "", no),
            ("delete", "coordination.k8s.io/leases", "kube-node-lease", slug, "", no),
            ("create", "coordination.k8s.io/leases", "kube-system", "", "", no),
            # leader-election Leases in the tenant namespace
            ("create", "coordination.k8s.io/leases", ns, "", "", yes),
            ("update", "coordination.k8s.io/leases", ns, slug, "", yes),
            ("update", "coordination.k8s.io/leases", ns, "virtual-kubelet-leader-election", "", yes),
            ("update", "coordination.k8s.io/leases", ns, "something-else", "", no),
            # Liqo objects of this peering, read-only
            ("list", "offloading.liqo.io/virtualnodes", ns, slug, "", yes),
            ("watch", "offloading.liqo.io/virtualnodes", ns, slug, "", yes),
            ("list", "offloading.liqo.io/virtualnodes", ns, "", "", no),
            ("update", "offloading.liqo.io/virtualnodes", ns, slug, "", no),
            ("list", "authentication.liqo.io/resourceslices", ns, slug, "", yes),
            ("patch", "authentication.liqo.io/resourceslices", ns, slug, "status", no),
            ("list", "offloading.liqo.io/namespacemaps", ns, "", "", yes),
            ("watch", "offloading.liqo.io/namespacemaps", ns, "", "", yes),
            ("list", "offloading.liqo.io/namespacemaps", "liqo-tenant-other", "", "", no),
            ("update", "offloading.liqo.io/namespacemaps", ns, slug, "", no),
            ("create", "offloading.liqo.io/shadowpods", ns, "", "", no),
            ("list", "namespaces", "", "", "", no),
        ])  # fmt: skip

        # Real requests as the ServiceAccount: resourceNames admit a list only with the name's field selector.
        user = f"--as=system:serviceaccount:{ns}:{slug}"
        ok = consumer.kubectl("get", "nodes", f"--field-selector=metadata.name={slug}", user, check=False)
        assert ok.returncode == 0, ok.stderr
        denied = consumer.kubectl("get", "nodes", user, check=False)
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr
        vn = ["-n", ns, "virtualnodes.offloading.liqo.io"]
        ok = consumer.kubectl("get", *vn, f"--field-selector=metadata.name={slug}", user, check=False)
        assert ok.returncode == 0, ok.stderr
        denied = consumer.kubectl("get", *vn, user, check=False)
        assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr


def test_liqo_managed_extra_rbac_adds_only_what_liqos_role_lacks(consumer: ControlPlane) -> None:
    slug = new_slug()
    with tenant(consumer, slug, applied=("serviceaccount.yaml", "rbac-liqo-managed.yaml")) as ns:
        _wait_bound(consumer, slug, ns)
        _check(consumer, slug, [
            ("create", "authentication.k8s.io/tokenreviews", "", "", "", True),
            ("create", "authorization.k8s.io/subjectaccessreviews", "", "", "", True),
            ("get", "authentication.liqo.io/resourceslices", ns, slug, "", True),
            ("watch", "authentication.liqo.io/resourceslices", ns, slug, "", True),
            ("get", "authentication.liqo.io/resourceslices", ns, "other", "", False),
            ("update", "authentication.liqo.io/resourceslices", ns, slug, "", False),
            ("get", "secrets", ns, f"kubeconfig-resourceslice-{slug}", "", False),
            ("create", "nodes", "", "", "", False),
        ])  # fmt: skip
