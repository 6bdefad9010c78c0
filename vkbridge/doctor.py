"""`vkbridge doctor`: the checks of GUIDE §7.1, from a kubeconfig, as a short report.

Each check prints one line `OK|WARN|FAIL  <check>: <detail>`; a FAIL names what to do. The exit code is
1 when any check fails, so the command fits in scripts and CI.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any, TextIO

from reflectors.forge import constants as c
from vkbridge.credentials.remote import credentials_from_secret
from vkbridge.grant import Grant, add_resources, pod_requests
from vkbridge.kube.client import (
    CERTIFICATESIGNINGREQUESTS,
    EVENTS,
    NODES,
    PODS,
    RESOURCESLICES,
    SECRETS,
    SUBJECTACCESSREVIEWS,
    ApiError,
    KubeClient,
)
from vkbridge.kube.kubeconfig import (
    Credentials,
    KubeconfigError,
    cert_info,
    in_cluster_credentials,
    load_kubeconfig_file,
)
from vkbridge.quantity import format_quantity
from vkbridge.settings import Settings

PENDING_WARN_SECONDS = 60
EXPIRY_WARN_DAYS = 14
CSR_WARN_SECONDS = 60
BRIDGE_POD_PREFIX = "multicloud-bridge-"  # GUIDE §7.1: the tunnel pod to the pool, in Liqo's namespace


@dataclass(frozen=True)
class Access:
    """One thing vkbridge does with the consumer API as its ServiceAccount, asked as a SubjectAccessReview.

    ``where``: "" cluster-wide, "tenant", or a namespace; ``named``: on the object named as the node (RBAC
    rules with resourceNames allow only that, and deploy/rbac.yaml grants no more); ``extra``: what Liqo's
    ClusterRole liqo-virtual-kubelet-local lacks and deploy/rbac-liqo-managed.yaml adds."""

    verb: str
    group: str
    resource: str
    where: str = ""
    named: bool = False
    extra: bool = False


REQUIRED_ACCESS: tuple[Access, ...] = (
    Access("create", "authentication.k8s.io", "tokenreviews", extra=True),  # kubelet API: bearer tokens
    Access("create", "authorization.k8s.io", "subjectaccessreviews", extra=True),  # and their rights
    Access("watch", "authentication.liqo.io", "resourceslices", "tenant", named=True, extra=True),  # grant
    Access("create", "", "nodes"),
    Access("patch", "", "nodes/status", named=True),
    Access("update", "coordination.k8s.io", "leases", "kube-node-lease", named=True),  # node heartbeat
    Access("update", "coordination.k8s.io", "leases", "tenant", named=True),  # leader election
    Access("watch", "", "pods"),
    Access("patch", "", "pods/status"),
    Access("create", "", "events"),
    Access("watch", "", "secrets"),
    Access("watch", "", "configmaps"),
    Access("watch", "offloading.liqo.io", "virtualnodes", "tenant", named=True),
    Access("watch", "offloading.liqo.io", "namespacemaps", "tenant"),
    Access("create", "certificates.k8s.io", "certificatesigningrequests"),  # kubelet serving certificate
)


@dataclass
class Finding:
    level: str  # OK, WARN, FAIL
    check: str
    detail: str


class Doctor:
    def __init__(self, settings: Settings, home: KubeClient) -> None:
        self.s = settings
        self.home = home
        self.node = settings.nodename
        self.tenant = (
            settings.tenant_namespace
            if settings.tenant_namespace not in ("", "default")
            else f"{c.TENANT_NAMESPACE_PREFIX}{self.node}"
        )
        self.secret = settings.foreign_kubeconfig_secret_name or f"kubeconfig-resourceslice-{self.node}"
        self.findings: list[Finding] = []

    def add(self, level: str, check: str, detail: str) -> None:
        self.findings.append(Finding(level, check, detail))

    async def run(self) -> list[Finding]:
        checks: list[Callable[[], Awaitable[None]]] = [
            self.check_liqo_pods,
            self.check_vk_pod,
            self.check_rbac,
            self.check_serving_csr,
            self.check_node,
            self.check_pool,
            self.check_grant,
            self.check_pending_pods,
        ]
        for check in checks:
            try:
                await check()
            except ApiError as err:
                self.add("FAIL", check.__name__.removeprefix("check_"), f"API error: {err}")
        return self.findings

    async def check_vk_pod(self) -> None:
        pods = (await self.home.list(PODS, self.tenant)).get("items") or []
        mine = [p for p in pods if p["metadata"]["name"].startswith(f"vk-{self.node}")]
        if not mine:
            self.add(
                "WARN",
                "virtual kubelet pod",
                f"no pod vk-{self.node}-* in {self.tenant} (running elsewhere?)",
            )
            return
        for p in mine:
            phase = (p.get("status") or {}).get("phase")
            level = "OK" if phase == "Running" else "FAIL"
            self.add(level, "virtual kubelet pod", f"{self.tenant}/{p['metadata']['name']} is {phase}")

    async def check_liqo_pods(self) -> None:
        """GUIDE §7.1, first line: every pod of Liqo's namespace Running and ready, the bridge pod too."""
        ns = self.s.liqo_namespace
        pods = (await self.home.list(PODS, ns)).get("items") or []
        if not pods:
            self.add(
                "WARN", "liqo pods", f"no pod in namespace {ns}: is Liqo installed there (--liqo-namespace)?"
            )
            return
        bad = []
        for pod in pods:
            st = pod.get("status") or {}
            ready = any(
                c.get("type") == "Ready" and c.get("status") == "True" for c in st.get("conditions") or ()
            )
            if st.get("phase") not in ("Running", "Succeeded") or (
                st.get("phase") == "Running" and not ready
            ):
                bad.append(f"{pod['metadata']['name']} ({st.get('phase')}{'' if ready else ', not ready'})")
        if bad:
            self.add("FAIL", "liqo pods", f"in {ns}: {', '.join(bad[:10])}: `kubectl -n {ns} describe pod`")
        else:
            self.add("OK", "liqo pods", f"{len(pods)} pods in {ns} Running")
        bridge = f"{BRIDGE_POD_PREFIX}{self.node}"
        if not any(p["metadata"]["name"].startswith(bridge) for p in pods):
            self.add(
                "WARN", "bridge pod", f"no pod {bridge}* in {ns}: the tunnel to the pool (user guide 7.1)"
            )

    async def _service_account(self) -> str:
        """The virtual kubelet's ServiceAccount: its Deployment's, else Liqo's (named as the node)."""
        path = f"/apis/apps/v1/namespaces/{self.tenant}/deployments/vk-{self.node}"
        try:
            deployment = await self.home.request("GET", path)
        except ApiError as err:
            if not err.not_found:
                raise
            return self.node
        spec = ((deployment.get("spec") or {}).get("template") or {}).get("spec") or {}
        return str(spec.get("serviceAccountName") or "default")

    async def check_rbac(self) -> None:
        """What vkbridge does as its ServiceAccount, asked of the API server (SubjectAccessReview)."""
        sa = await self._service_account()
        try:
            await self.home.request("GET", f"/api/v1/namespaces/{self.tenant}/serviceaccounts/{sa}")
        except ApiError as err:
            if not err.not_found:
                raise
            self.add(
                "WARN", "rbac", f"no ServiceAccount {self.tenant}/{sa}: its permissions were not checked"
            )
            return
        user = f"system:serviceaccount:{self.tenant}:{sa}"
        groups = ["system:serviceaccounts", f"system:serviceaccounts:{self.tenant}", "system:authenticated"]
        missing: list[str] = []
        fixes: set[str] = set()
        for access in REQUIRED_ACCESS:
            ns = self.tenant if access.where == "tenant" else access.where
            plural, _, sub = access.resource.partition("/")
            attrs: dict[str, Any] = {"verb": access.verb, "group": access.group, "resource": plural}
            if sub:
                attrs["subresource"] = sub
            if ns:
                attrs["namespace"] = ns
            if access.named:
                attrs["name"] = self.node
            review = {
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SubjectAccessReview",
                "spec": {"user": user, "groups": groups, "resourceAttributes": attrs},
            }
            answer = await self.home.create(SUBJECTACCESSREVIEWS, review)
            if not (answer.get("status") or {}).get("allowed"):
                where = f" in {ns}" if ns else ""
                missing.append(f"{access.verb} {access.resource}{where}")
                fixes.add("extra" if access.extra else "liqo")
        if not missing:
            self.add("OK", "rbac", f"{user} may do all {len(REQUIRED_ACCESS)} things vkbridge does")
            return
        fix = " and ".join(
            text
            for key, text in (
                ("extra", "apply deploy/rbac-liqo-managed.yaml for this node"),
                ("liqo", "bind Liqo's ClusterRole liqo-virtual-kubelet-local (Liqo does, as "
                 "liqo-node-<slug>; a standalone install: deploy/rbac.yaml)"),
            )
            if key in fixes
        )  # fmt: skip
        self.add("FAIL", "rbac", f"{user} may not: {'; '.join(missing)}: {fix}")

    async def check_serving_csr(self) -> None:
        """The kubelet serving certificate's CSR (--certificate-type=kubelet): approved, or waiting since."""
        if self.s.certificate_type != "kubelet":
            return
        prefix = f"vkbridge-{self.node}-"
        csrs = [
            csr
            for csr in (await self.home.list(CERTIFICATESIGNINGREQUESTS)).get("items") or []
            if csr["metadata"]["name"].startswith(prefix)
        ]
        if not csrs:
            self.add("WARN", "serving certificate", f"no CSR {prefix}*: has vkbridge asked for one yet?")
            return
        latest = max(csrs, key=lambda csr: str(csr["metadata"].get("creationTimestamp") or ""))
        name = latest["metadata"]["name"]
        status = latest.get("status") or {}
        kinds = {cond.get("type") for cond in status.get("conditions") or ()}
        if "Denied" in kinds or "Failed" in kinds:
            how = "denied" if "Denied" in kinds else "failed"
            self.add("FAIL", "serving certificate", f"CSR {name} was {how}: `kubectl describe csr` says "
                     "why; vkbridge asks again after 15 minutes")  # fmt: skip
        elif "Approved" in kinds and status.get("certificate"):
            self.add("OK", "serving certificate", f"CSR {name} approved and issued")
        else:
            created = _parse_time(latest["metadata"].get("creationTimestamp"))
            waited = (dt.datetime.now(dt.UTC) - created).total_seconds() if created else 0.0
            level = "WARN" if waited >= CSR_WARN_SECONDS else "OK"
            self.add(level, "serving certificate", f"CSR {name} waits for approval since {waited:.0f}s: "
                     f"`kubectl certificate approve {name}` (Liqo's controller-manager does)")  # fmt: skip

    async def check_node(self) -> None:
        try:
            node = await self.home.get(NODES, self.node)
        except ApiError as err:
            if err.not_found:
                self.add("FAIL", "virtual node", f"node {self.node} does not exist: is vkbridge running?")
                return
            raise
        conditions: list[dict[str, Any]] = node["status"].get("conditions") or []
        ready: dict[str, Any] = next((c for c in conditions if c.get("type") == "Ready"), {})
        if ready.get("status") == "True":
            self.add("OK", "virtual node", f"{self.node} is Ready")
        else:
            self.add(
                "FAIL",
                "virtual node",
                f"{self.node} is not Ready ({ready.get('reason', 'no Ready condition')}): the pool does not "
                "answer or vkbridge is not running; see `kubectl logs deploy/vk-<slug>` (user guide 7.3)",
            )
        taints = {(t.get("key"), t.get("effect")) for t in node["spec"].get("taints") or []}
        if ("multicloud.io/pool", "NoSchedule") not in taints:
            self.add("WARN", "virtual node", "taint multicloud.io/pool is missing (vkbridge restores it)")

    async def check_pool(self) -> None:
        try:
            secret = await self.home.get(SECRETS, self.secret, self.tenant)
        except ApiError as err:
            if not err.not_found:
                raise
            secret = None
        try:
            creds = credentials_from_secret(secret, f"{self.tenant}/{self.secret}")
        except KubeconfigError as err:
            self.add("FAIL", "pool credential", str(err))
            return
        if creds.client_cert_pem is not None:
            info = cert_info(creds.client_cert_pem)
            left = info.not_after - dt.datetime.now(dt.UTC)
            if left.total_seconds() <= 0:
                when = f"{info.not_after:%Y-%m-%d %H:%M}Z"
                self.add("FAIL", "pool credential", f"client certificate expired at {when}: apply a new "
                         "bundle (user guide section 5, 'Rotate the credentials')")  # fmt: skip
            elif left.days < EXPIRY_WARN_DAYS:
                self.add("WARN", "pool credential", f"client certificate expires in {_human(left)}")
            else:
                self.add("OK", "pool credential", f"client certificate valid for {_human(left)}")
        pool = KubeClient(creds, name="pool", timeout=5.0)
        try:
            await pool.request("GET", "/version", timeout=5.0)
            self.add("OK", "pool reachable", f"{creds.server} answers through the bridge")
        except ApiError as err:
            if err.unauthorized:
                self.add("FAIL", "pool reachable", f"{creds.server} rejects our credential "
                         f"({err.status}): apply the peering's new bundle (guide section 5)")  # fmt: skip
            else:
                self.add("FAIL", "pool reachable", f"{creds.server} does not answer ({err.reason}): "
                         "is the pool hibernated, or the bridge pod down? (user guide 7.3)")  # fmt: skip
        finally:
            await pool.close()

    async def _node_pods(self) -> list[dict[str, Any]]:
        body = await self.home.list(PODS, field_selector=f"spec.nodeName={self.node}")
        return list(body.get("items") or [])

    async def check_grant(self) -> None:
        try:
            rs = await self.home.get(RESOURCESLICES, self.node, self.tenant)
        except ApiError as err:
            if err.not_found:
                self.add("WARN", "grant", f"no ResourceSlice {self.tenant}/{self.node}")
                return
            raise
        grant = Grant.from_resource_list((rs.get("status") or {}).get("resources"))
        used: dict[str, Fraction] = {}
        for pod in await self._node_pods():
            if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                continue
            used = add_resources(used, pod_requests(pod))
        parts = []
        for name in ("cpu", "memory", "pods", "ephemeral-storage"):
            granted = grant.get(name)
            if granted is None:
                continue
            free = granted - used.get(name, Fraction(0))
            parts.append(
                f"{name} used {format_quantity(used.get(name, Fraction(0)), name)} "
                f"free {format_quantity(free, name)}"
            )
        self.add("OK" if parts else "WARN", "grant", "; ".join(parts) or "the pool granted nothing yet")

    async def check_pending_pods(self) -> None:
        now = dt.datetime.now(dt.UTC)
        stuck = []
        for pod in await self._node_pods():
            st = pod.get("status") or {}
            if st.get("phase") != "Pending":
                continue
            created = _parse_time(pod["metadata"].get("creationTimestamp"))
            if created is None or (now - created).total_seconds() < PENDING_WARN_SECONDS:
                continue
            ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
            events = (await self.home.list(EVENTS, ns, field_selector=f"involvedObject.name={name}")).get(
                "items"
            ) or []
            warnings = [e for e in events if e.get("type") == "Warning"]
            why = warnings[-1]["message"] if warnings else st.get("reason") or "no event"
            stuck.append(f"{ns}/{name}: {why}")
        if stuck:
            for line in stuck[:20]:
                self.add("WARN", "pending pod", line)
        else:
            self.add("OK", "pending pods", f"none pending for more than {PENDING_WARN_SECONDS}s")


def _parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)
    except ValueError:
        return None


def _human(delta: dt.timedelta) -> str:
    if delta.days >= 2:
        return f"{delta.days} days"
    hours = delta.total_seconds() / 3600
    return f"{hours:.1f} hours" if hours >= 1 else f"{delta.total_seconds() / 60:.0f} minutes"


def report(findings: list[Finding], out: TextIO) -> int:
    for f in findings:
        out.write(f"{f.level:<5} {f.check}: {f.detail}\n")
    failed = sum(f.level == "FAIL" for f in findings)
    warned = sum(f.level == "WARN" for f in findings)
    out.write(f"{'unhealthy' if failed else 'healthy'}: {failed} failed, {warned} warnings\n")
    return 1 if failed else 0


def operator_credentials(settings: Settings, environ: Mapping[str, str] | None = None) -> Credentials:
    """Whom doctor asks as (blocking): ``--home-kubeconfig``; else the pod's identity in a cluster; else the
    operator's own kubeconfig, ``$KUBECONFIG`` (its first file) or ``~/.kube/config``, as kubectl finds it.
    The operator's kubeconfig may use an exec credential plugin (GKE, EKS, AKS): doctor runs it, as kubectl
    does; vkbridge itself never runs one, and never for the pool's Secret."""
    env = os.environ if environ is None else environ
    if settings.home_kubeconfig:
        return load_kubeconfig_file(settings.home_kubeconfig, allow_exec=True)
    if env.get("KUBERNETES_SERVICE_HOST"):
        return in_cluster_credentials(environ=env)
    first = next((p for p in (env.get("KUBECONFIG") or "").split(os.pathsep) if p), "")
    path = Path(first) if first else Path(env.get("HOME") or Path.home()) / ".kube" / "config"
    return load_kubeconfig_file(path, allow_exec=True)


async def _run(settings: Settings, out: TextIO) -> int:
    try:
        creds = await asyncio.to_thread(operator_credentials, settings)
    except KubeconfigError as err:
        out.write(f"FAIL  consumer kubeconfig: {err}\nunhealthy: 1 failed, 0 warnings\n")
        return 1
    home = KubeClient(creds, name="consumer", timeout=10.0)
    try:
        return report(await Doctor(settings, home).run(), out)
    finally:
        await home.close()


def run(settings: Settings) -> int:
    """Entry point called by the CLI for `vkbridge doctor`."""
    return asyncio.run(_run(settings, sys.stdout))
