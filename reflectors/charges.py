"""The pod reflector's charges in the grant ledger: at most one per pod name, keyed by the local pod's UID.

`vkbridge.grant.Admission` counts opaque keys and keeps the wait-list; this keeps which local pod key holds
which charge, so a same-name replacement never inherits its predecessor's charge, and makes the ledger hold
what the pool holds for every ShadowPod it shows (restart safety, invariant 6). Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any

from reflectors.forge import constants as c
from reflectors.forge import pods as fp
from reflectors.forge.shadowpod import controlling_shadow_uid
from vkbridge.grant import Admission, Decision, spec_requests
from vkbridge.kube.cache import object_key
from vkbridge.logs import get_logger

log = get_logger("reflectors.pods")


def holds_share(
    local: Mapping[str, Any] | None, shadow: Mapping[str, Any] | None, remote: Mapping[str, Any] | None
) -> bool:
    """Does the pool count this pod against the grant, so must we? While its ShadowPod lives, even when the
    local pod is gone (until we delete it). A finished pod (Succeeded/Failed at home, on its ShadowPod or its
    remote pod) holds no share (invariant 6, liqo#3137), nor does a ShadowPod being deleted (the provider's
    quota frees it on DELETE). The same rule at start-up and at run time: a restart changes no charge."""
    if shadow is None or fp.is_terminating(shadow) or fp.is_terminal(shadow):
        return False
    return not (
        (local is not None and fp.is_terminal(local)) or (remote is not None and fp.is_terminal(remote))
    )


class FinishedPods:
    """Which pods of one cache are Succeeded/Failed, kept from its change feed (subscribe ``track``), so a
    ShadowPod event learns whether its pods finished without decoding them from the compact caches."""

    def __init__(self) -> None:
        self._owners: dict[str, str | None] = {}  # finished pod key -> the ShadowPod controlling it

    def track(self, _type: str, old: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> None:
        obj = new if new is not None else old
        if obj is None:
            return
        if new is not None and fp.is_terminal(new):
            self._owners[object_key(new)] = controlling_shadow_uid(new)
        else:
            self._owners.pop(object_key(obj), None)

    def finished(self, key: str) -> bool:
        return key in self._owners

    def finished_for(self, key: str, shadow: Mapping[str, Any]) -> bool:
        """A finished remote pod that is ``shadow``'s, by `remote_pod_of`'s rule: one controlled by another
        ShadowPod (an earlier one of the same name) is not."""
        if key not in self._owners:
            return False
        owner = self._owners[key]
        return owner is None or owner == fp.uid_of(shadow)


class PodCharges:
    """Which local pod holds which charge; the pod reflector's one way into the ledger."""

    def __init__(self, admission: Admission) -> None:
        self.admission = admission
        # local pod key -> its ledger key: the UID of the local pod its ShadowPod was made for.
        self.charged: dict[str, str] = {}

    def admit(self, key: str, local: Mapping[str, Any], requests: Mapping[str, Fraction]) -> Decision:
        """Admit the local pod under its UID, or put it on the wait-list. A same-name predecessor's charge
        goes first (we only get here when no ShadowPod of that name is left: the pool holds none for it)."""
        charge_key = fp.uid_of(local) or key
        held = self.charged.get(key)
        if held is not None and held != charge_key:
            self.release(key)
        decision = self.admission.admit(charge_key, requests)
        if decision.ok:
            self.charged[key] = charge_key
            self.admission.stop_waiting(key)
        else:
            self.admission.wait(key, fp.meta(local).get("creationTimestamp") or "")
        return decision

    def account(
        self,
        key: str,
        local: Mapping[str, Any] | None,
        shadow: Mapping[str, Any],
        remote: Mapping[str, Any] | None,
    ) -> None:
        """Make the ledger hold what the pool holds for an existing ShadowPod: its charge, fit or not
        (after a restart, or after the grant shrank), or nothing once the pod finished or the ShadowPod
        is being deleted (`holds_share`). Called on every handle; `account_seen` on ShadowPod events."""
        if not holds_share(local, shadow, remote):
            self.release(key)
            return
        self._hold(key, shadow, lambda: local)

    def account_seen(
        self,
        key: str,
        shadow: Mapping[str, Any],
        *,
        finished: bool,
        read_local: Callable[[], Mapping[str, Any] | None],
    ) -> None:
        """`account` for a ShadowPod event, with the same result: ``finished`` says whether the local pod or
        the ShadowPod's remote pod is Succeeded/Failed (`FinishedPods`), and the local pod is read only to
        key or make a charge, not on every event (two decodes of compact caches per event otherwise)."""
        if finished or not holds_share(None, shadow, None):
            self.release(key)
            return
        self._hold(key, shadow, read_local)

    def _hold(
        self, key: str, shadow: Mapping[str, Any], read_local: Callable[[], Mapping[str, Any] | None]
    ) -> None:
        """Charge the ShadowPod under the UID it records; else (made by Liqo's VK or an older vkbridge) the
        UID of the local pod of that name; else (no such pod: the ShadowPod is deleted next) the name."""
        recorded = fp.annotations_of(shadow).get(c.LOCAL_POD_UID_ANNOTATION)
        local = None if recorded else read_local()
        charge_key = str(recorded or fp.uid_of(local) or key)
        held = self.charged.get(key)
        if held == charge_key and self.admission.is_admitted(charge_key):
            return
        if held is not None:
            self.release(key)  # the ShadowPod of that name is another pod's now: one charge per name
        if recorded:
            local = read_local()
        spec = (shadow.get("spec") or {}).get("pod") or {}
        try:
            overhead = fp.spec_of(local).get("overhead") if local is not None else None
            requests = spec_requests(spec, overhead=overhead, where="spec.pod")
        except ValueError as err:  # QuantityError: the pool accepted it, so count what we can read
            log.warning("ShadowPod requests unreadable: charged nothing", pod=key, error=str(err)[:200])
            return
        self.admission.force_charge(charge_key, requests)
        self.charged[key] = charge_key

    def release_gone(self, key: str, shadow: Mapping[str, Any] | None) -> None:
        """The ShadowPod left the pool: its share goes, unless the charge is a newer pod's already."""
        recorded = fp.annotations_of(shadow).get(c.LOCAL_POD_UID_ANNOTATION)
        if recorded and self.charged.get(key) not in (None, recorded):
            return
        self.release(key)

    def release_namespace(self, namespace: str) -> None:
        """The namespace is no longer paired: its ShadowPods are out of our sight, their charges go, and its
        pods wait for a pair now, not for the grant."""
        prefix = namespace + "/"
        for key in [k for k in self.charged if k.startswith(prefix)]:
            self.release(key)
        self.admission.stop_waiting_under(prefix)

    def release(self, key: str) -> None:
        """Free the pod's charge, if any; either way it no longer waits for the grant."""
        self.admission.stop_waiting(key)
        charge_key = self.charged.pop(key, None)
        if charge_key is not None:
            self.admission.release(charge_key)
