"""(g) The provider's ShadowPod quota webhook "shadowpod.validate.liqo.io" (LIQO §6.1), enforcement None.

Cost of a ShadowPod = sum of its containers' requests, max'd per resource with each init container's
(pkg/webhooks/shadowpod getQuotaFromShadowPod). A CREATE/UPDATE is denied when the cost exceeds what the
consumer's grant has left, with Liqo's messages "peering <res> quota usage exceeded - free <X> /
requested <Y>" and "<res> quota limit not found for this peering".

Deliberate difference: Liqo keeps Succeeded/Failed ShadowPods counted until they are deleted (liqo#3137,
fix PR #3366 open); here a terminal ShadowPod frees its share at once, which is the intended behaviour.
Admitted ShadowPods are reserved in memory until the cache sees them, so a burst cannot overshoot.
"""

from __future__ import annotations

import logging
import time
from fractions import Fraction

from . import names as n
from . import quantity as q
from .context import Env
from .kube import Obj, api_path
from .runtime import obj_key
from .webhook import WebhookServer

log = logging.getLogger(__name__)

_PENDING_TTL_S = 30.0
WEBHOOK_PATH = "/validate/shadowpods"
_WEBHOOK: Obj = {
    "name": n.WEBHOOK_NAME,
    "rules": [
        {
            "apiGroups": ["offloading.liqo.io"],
            "apiVersions": ["v1beta1"],
            "operations": ["CREATE", "UPDATE"],
            "resources": ["shadowpods"],
            "scope": "Namespaced",
        }
    ],
    "failurePolicy": "Fail",
}


def pod_cost(pod_spec: Obj) -> dict[str, Fraction]:
    total: dict[str, Fraction] = {}
    for c in pod_spec.get("containers") or []:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = total.get(k, Fraction(0)) + q.parse(v)
    for c in pod_spec.get("initContainers") or []:
        for k, v in ((c.get("resources") or {}).get("requests") or {}).items():
            total[k] = max(total.get(k, Fraction(0)), q.parse(v))
    return total


def _order(key: str) -> tuple[int, str]:
    return ({"cpu": 0, "memory": 1}.get(key, 2), key)


def check(cost: dict[str, Fraction], grant: dict[str, str], used: dict[str, Fraction]) -> str | None:
    """The denial message, or None when the cost fits (checked in a stable order: cpu, memory, rest)."""
    for key in sorted(cost, key=_order):
        if key not in grant:
            return f"{key} quota limit not found for this peering"
        free = q.parse(grant[key]) - used.get(key, Fraction(0))
        if free < cost[key]:
            return (
                f"peering {key} quota usage exceeded - free {q.render(free, grant[key])} / "
                f"requested {q.render(cost[key], grant[key])}"
            )
    return None


class QuotaWebhook:
    def __init__(self, env: Env) -> None:
        self.env = env
        self.shadows = env.informer(env.pool, api_path(n.OFFLOADING, n.SHADOWPODS))
        self.slices = env.replicated(n.AUTH, n.RESOURCESLICES)
        self._pending: dict[str, tuple[dict[str, Fraction], float]] = {}
        self._held: dict[str, dict[str, Fraction]] = {}
        self._total: dict[str, Fraction] = {}
        self.shadows.on_change(self._account)
        self.server = WebhookServer(
            env.pool, "ValidatingWebhookConfiguration", n.WEBHOOK_NAME, WEBHOOK_PATH, env.signer
        )

    @property
    def port(self) -> int:
        return self.server.port

    # ---- accounting -------------------------------------------------------------------------------

    def grant(self) -> dict[str, str]:
        """Sum of the accepted grants of this consumer's ResourceSlices."""
        total: dict[str, Fraction] = {}
        like: dict[str, str] = {}
        for rs in self.slices.values():
            st = rs.get("status") or {}
            if not any(
                c.get("type") == "Resources" and c.get("status") == "Accepted"
                for c in st.get("conditions") or []
            ):
                continue
            for k, v in (st.get("resources") or {}).items():
                total[k] = total.get(k, Fraction(0)) + q.parse(v)
                like.setdefault(k, str(v))
        return {k: q.render(v, like[k]) for k, v in total.items()}

    def _ours(self, sp: Obj, groups: list[str] | None = None) -> bool:
        origin = (sp["metadata"].get("labels") or {}).get(n.ORIGIN)
        return origin == self.env.cfg.consumer_id or self.env.cfg.consumer_id in (groups or [])

    def _account(self, sp: Obj) -> None:
        """Keep running totals of what counted ShadowPods hold, so each admission is O(1)."""
        key = obj_key(sp)
        cur = self.shadows.cache.get(key)
        held: dict[str, Fraction] = {}
        if cur is not None:
            self._pending.pop(key, None)  # the cache has it now
            counted = self._ours(cur) and not cur["metadata"].get("deletionTimestamp")
            # Terminal ShadowPods free their share at once (liqo#3137 keeps them counted).
            if counted and (cur.get("status") or {}).get("phase") not in n.TERMINAL_PHASES:
                try:
                    held = pod_cost((cur.get("spec") or {}).get("pod") or {})
                except ValueError:
                    log.warning("webhook: unparsable requests in ShadowPod %s; not counted", key)
        for k, v in self._held.pop(key, {}).items():
            self._total[k] -= v
        if held:
            self._held[key] = held
            for k, v in held.items():
                self._total[k] = self._total.get(k, Fraction(0)) + v

    def used(self, exclude: str) -> dict[str, Fraction]:
        used = dict(self._total)
        for k, v in self._held.get(exclude, {}).items():
            used[k] -= v
        now = time.monotonic()
        for key, (cost, expiry) in list(self._pending.items()):
            if expiry < now:
                del self._pending[key]
            elif key != exclude:
                for k, v in cost.items():
                    used[k] = used.get(k, Fraction(0)) + v
        return used

    def review(self, req: Obj) -> tuple[bool, str]:
        """Decide one AdmissionReview request; runs without awaiting, so decisions are serialized."""
        sp = req.get("object") or {}
        if req.get("operation") not in ("CREATE", "UPDATE") or not sp:
            return True, ""
        groups = (req.get("userInfo") or {}).get("groups") or []
        if not self._ours(sp, groups):
            return True, ""
        md = sp.get("metadata") or {}
        key = f"{req.get('namespace') or md.get('namespace')}/{md.get('name') or req.get('name')}"
        cost = pod_cost((sp.get("spec") or {}).get("pod") or {})
        if req.get("operation") == "UPDATE":
            old = pod_cost(((req.get("oldObject") or {}).get("spec") or {}).get("pod") or {})
            if all(cost.get(k, 0) <= v for k, v in old.items()) and cost.keys() <= old.keys():
                return True, ""  # not asking for more than it already holds
        msg = check(cost, self.grant(), self.used(exclude=key))
        if msg:
            return False, msg
        if not req.get("dryRun"):
            self._pending[key] = (cost, time.monotonic() + _PENDING_TTL_S)
        return True, ""

    # ---- HTTPS server and registration -----------------------------------------------------------

    def _answer(self, req: Obj) -> Obj:
        try:
            allowed, msg = self.review(req)
        except Exception as e:  # a malformed object must not crash the server; say why
            log.exception("webhook: review failed")
            allowed, msg = False, f"emulated quota webhook error: {e}"
        if allowed:
            return {"allowed": True}
        log.info("webhook: denied %s/%s: %s", req.get("namespace"), req.get("name"), msg)
        return {"allowed": False, "status": {"code": 403, "reason": "Forbidden", "message": msg}}

    async def start(self) -> None:
        await self.server.serve(self._answer, self.env.cfg.cert_lifetime, self.env.cfg.webhook_port)
        await self.server.register({n.K8S_MANAGED_BY: "liqo"}, _WEBHOOK)
        log.info("quota webhook serving on %s", self.server.url)

    async def stop(self) -> None:
        """Unregister first (a dead webhook with failurePolicy Fail blocks every ShadowPod), then stop."""
        await self.server.stop()
