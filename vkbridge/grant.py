"""The pool grant (ResourceSlice ``status.resources``) and the admission ledger that keeps us inside it.

Liqo leaves grant enforcement to the provider's ShadowPod webhook; vkbridge checks locally first, so nothing
over the grant is ever sent (DESIGN §3 invariant 6). Accounting is exact (`fractions.Fraction`) and pure:
the reflectors decide when to admit and release (a terminal pod releases at once, unlike liqo#3137). The
grant is read from the pool (`grant_of`); the pods it refused wait in the ledger's wait-list, and whoever
re-queues them (the engine) subscribes to `Admission.on_freed`.

Rules, mirroring the kube-scheduler's NodeResourcesFit on a node whose allocatable is the grant:

* A pod's charge is `pod_requests`: Kubernetes `PodRequests` (k8s.io/component-helpers/resource, v0.36,
  PodLevelResources on as in 1.34+) plus one ``pods``. Containers without requests count as zero for cpu
  and memory (the scheduler's "non-zero" defaults are for scoring only, never for fit).
* Only resources requested with a positive amount are checked. A positive request for a resource the grant
  does not list is ``missing_resource`` (the scheduler would call it ``Insufficient``: an unlisted
  allocatable is zero); that holds for base resources too (a grant without ``ephemeral-storage``).
* The pod count is the exception: every charge carries ``pods: 1``, but a (non-empty) grant that does not
  list ``pods`` sets no limit on it (Liqo's provider quota counts no pods). Charges keep it, so a grant
  that starts listing ``pods`` later counts every admitted pod at once.
* A smaller grant never evicts admitted pods: ``free`` may go negative and new pods wait.
"""

from __future__ import annotations

import enum
import functools
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any, Final

from vkbridge.quantity import QuantityError, format_quantity, parse_quantity

__all__ = [
    "BASE_RESOURCES",
    "POD_COUNT",
    "Admission",
    "Decision",
    "DecisionKind",
    "Grant",
    "ResourceList",
    "Shortfall",
    "add_resources",
    "grant_of",
    "max_resources",
    "parse_resource_list",
    "pod_requests",
    "shared_charge",
    "sort_resources",
    "spec_requests",
    "subtract_resources",
]

#: The resources every grant is expected to list (Liqo's provider defaults); all others are "extended".
BASE_RESOURCES: Final = ("cpu", "memory", "ephemeral-storage", "pods")
#: The pod count: charged to every pod, a limit only when the grant lists it (see the module docstring).
POD_COUNT: Final = "pods"
#: Pod-level requests (spec.resources) supported by Kubernetes: cpu, memory and hugepages-*.
_POD_LEVEL: Final = frozenset({"cpu", "memory"})

ResourceList = dict[str, Fraction]


def grant_of(
    resource_slice: Mapping[str, Any] | None, virtual_node: Mapping[str, Any] | None
) -> dict[str, str]:
    """The grant: what the pool granted (ResourceSlice status), else the VirtualNode's copy of it.

    The pool enforces `ResourceSlice.status.resources`; Liqo copies it into
    `VirtualNode.spec.resourceQuota.hard`, which can lag. We trust the source and fall back to the copy.
    """
    granted = ((resource_slice or {}).get("status") or {}).get("resources") or {}
    if granted:
        return {str(k): str(v) for k, v in granted.items()}
    hard = (((virtual_node or {}).get("spec") or {}).get("resourceQuota") or {}).get("hard") or {}
    return {str(k): str(v) for k, v in hard.items()}


def _quantity(raw: object, where: str) -> Fraction:
    """A quantity from an API object: a string as the API server writes it, or a number from handmade YAML."""
    if isinstance(raw, bool):
        raise QuantityError(f"{where}: {raw!r} is not a quantity")
    if isinstance(raw, int):
        return Fraction(raw)
    if isinstance(raw, float):
        return parse_quantity(repr(raw))
    if isinstance(raw, str):
        try:
            return parse_quantity(raw)
        except QuantityError as exc:
            raise QuantityError(f"{where}: {exc}") from None
    raise QuantityError(f"{where}: {raw!r} is not a quantity")


def parse_resource_list(raw: Mapping[str, object] | None, where: str = "resources") -> ResourceList:
    """``{"cpu": "500m", ...}`` to exact values; QuantityError names the bad entry."""
    if not raw:
        return {}
    return {str(name): _quantity(value, f"{where}.{name}") for name, value in raw.items()}


def add_resources(total: Mapping[str, Fraction], extra: Mapping[str, Fraction]) -> ResourceList:
    """Per-resource sum (`addResourceList`): a resource in either list is in the result."""
    out = dict(total)
    for name, value in extra.items():
        out[name] = out.get(name, Fraction(0)) + value
    return out


def max_resources(current: Mapping[str, Fraction], other: Mapping[str, Fraction]) -> ResourceList:
    """Per-resource maximum (`maxResourceList`): a resource in either list is in the result."""
    out = dict(current)
    for name, value in other.items():
        if name not in out or value > out[name]:
            out[name] = value
    return out


def subtract_resources(total: Mapping[str, Fraction], less: Mapping[str, Fraction]) -> ResourceList:
    """Per-resource difference over the union of names (missing counts as zero)."""
    out = dict(total)
    for name, value in less.items():
        out[name] = out.get(name, Fraction(0)) - value
    return out


def sort_resources(names: Iterable[str]) -> list[str]:
    """Base resources first in their usual order, then the others by name: stable, readable messages."""
    order = {name: i for i, name in enumerate(BASE_RESOURCES)}
    return sorted(names, key=lambda n: (order.get(n, len(order)), n))


def _requests(container: Mapping[str, Any], where: str) -> ResourceList:
    resources = container.get("resources") or {}
    return parse_resource_list(resources.get("requests"), f"{where}.resources.requests")


def pod_requests(pod: Mapping[str, Any]) -> ResourceList:
    """The pod's charge against the grant: Kubernetes ``PodRequests`` plus ``pods: 1``.

    Containers are summed; each init container's need is max'd in, where a sidecar (an init container with
    ``restartPolicy: Always``) is also added to the sum and to every later init container's need (KEP-753);
    pod-level ``spec.resources.requests`` (cpu, memory, hugepages-*) replace the aggregate for those names;
    ``spec.overhead`` is added. Spec values only: the ShadowPod spec is fixed at creation, so in-place
    resizes never change what the pool runs. ``cpu`` and ``memory`` are always present (zero when unset).
    Raises QuantityError for a malformed quantity.
    """
    return spec_requests(pod.get("spec") or {})


def spec_requests(
    spec: Mapping[str, Any], *, overhead: Mapping[str, object] | None = None, where: str = "spec"
) -> ResourceList:
    """``pod_requests`` of a bare PodSpec, such as a ShadowPod's ``spec.pod`` found after a restart.

    The forge drops ``overhead`` (the pool's RuntimeClass sets its own), so the charge of a ShadowPod takes
    ``overhead`` from the local pod (immutable once set): the charge after a restart then equals the charge
    at admission. When ``overhead`` is None the spec's own is used.
    """
    reqs: ResourceList = {}
    for i, container in enumerate(spec.get("containers") or []):
        reqs = add_resources(reqs, _requests(container, f"{where}.containers[{i}]"))

    sidecars: ResourceList = {}
    init_need: ResourceList = {}
    for i, container in enumerate(spec.get("initContainers") or []):
        own = _requests(container, f"{where}.initContainers[{i}]")
        if container.get("restartPolicy") == "Always":
            reqs = add_resources(reqs, own)
            sidecars = add_resources(sidecars, own)
            need = sidecars
        else:
            need = add_resources(own, sidecars)
        init_need = max_resources(init_need, need)
    reqs = max_resources(reqs, init_need)

    pod_level = parse_resource_list(
        (spec.get("resources") or {}).get("requests"), f"{where}.resources.requests"
    )
    supported = {n: v for n, v in pod_level.items() if n in _POD_LEVEL or n.startswith("hugepages-")}
    reqs.update(supported)

    if overhead is None:
        overhead, overhead_where = spec.get("overhead"), f"{where}.overhead"
    else:
        overhead_where = "overhead"
    reqs = add_resources(reqs, parse_resource_list(overhead, overhead_where))
    reqs.setdefault("cpu", Fraction(0))
    reqs.setdefault("memory", Fraction(0))
    reqs[POD_COUNT] = reqs.get(POD_COUNT, Fraction(0)) + 1
    return reqs


@dataclass(frozen=True)
class Grant:
    """The granted ResourceList: what the pool lets this consumer use through this virtual node."""

    resources: Mapping[str, Fraction] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "resources", MappingProxyType(dict(self.resources)))

    @classmethod
    def from_resource_list(cls, raw: Mapping[str, object] | None) -> Grant:
        """From ``ResourceSlice.status.resources`` (strings as the API server writes them)."""
        return cls(parse_resource_list(raw, "status.resources"))

    def __contains__(self, name: object) -> bool:
        return name in self.resources

    def __iter__(self) -> Iterator[str]:
        return iter(self.resources)

    def get(self, name: str) -> Fraction | None:
        return self.resources.get(name)


class DecisionKind(enum.Enum):
    OK = "ok"
    MISSING_RESOURCE = "missing_resource"
    INSUFFICIENT = "insufficient"


@dataclass(frozen=True)
class Shortfall:
    """One resource that does not fit: what the pod asks and what the grant has left."""

    resource: str
    requested: Fraction
    free: Fraction

    def describe(self) -> str:
        return (
            f"{self.resource} requested {format_quantity(self.requested, self.resource)} "
            f"free {format_quantity(self.free, self.resource)}"
        )


@dataclass(frozen=True)
class Decision:
    kind: DecisionKind
    missing: tuple[str, ...] = ()
    shortfalls: tuple[Shortfall, ...] = ()

    @property
    def ok(self) -> bool:
        return self.kind is DecisionKind.OK

    @property
    def message(self) -> str:
        """The event text: "the pool grant has no nvidia.com/gpu" or
        "does not fit in the pool grant: cpu requested 2 free 500m; memory requested 1Gi free 512Mi"."""
        if self.kind is DecisionKind.MISSING_RESOURCE:
            return "the pool grant has no " + ", ".join(self.missing)
        if self.kind is DecisionKind.INSUFFICIENT:
            return "does not fit in the pool grant: " + "; ".join(s.describe() for s in self.shortfalls)
        return "fits in the pool grant"


_OK: Final = Decision(DecisionKind.OK)


def shared_charge(requests: Mapping[str, Fraction]) -> Mapping[str, Fraction]:
    """The charge of ``requests``, one read-only object per distinct charge: pods of one template share
    it (at 10,000 pods a dict and its Fractions each were ~0.5 KB of the VK's memory per pod)."""
    return _shared_charge(tuple(sorted((name, Fraction(value)) for name, value in requests.items())))


@functools.lru_cache(maxsize=1024)
def _shared_charge(items: tuple[tuple[str, Fraction], ...]) -> Mapping[str, Fraction]:
    return MappingProxyType(dict(items))


class Admission:
    """Ledger of admitted pods against the grant, and the wait-list of pods it refused. Pure and
    single-threaded: own it in one task.

    Keys are opaque; the pod reflector uses the local pod's UID, so a same-name replacement pod (StatefulSet
    ``web-0`` after a force delete) never inherits its predecessor's charge. The wait-list is keyed by pod
    key (``namespace/name``) and ordered by creation time: the oldest waiter gets the first chance."""

    def __init__(self, grant: Grant | None = None) -> None:
        self._grant = grant or Grant()
        self._charges: dict[str, Mapping[str, Fraction]] = {}  # never mutated: see shared_charge
        self._used: ResourceList = {}
        self._waiters: dict[str, str] = {}  # pod key -> creationTimestamp
        self._on_freed: list[Callable[[], None]] = []

    @property
    def grant(self) -> Grant:
        return self._grant

    def set_grant(self, grant: Grant) -> None:
        """Replace the grant. Admitted pods stay admitted even if they no longer fit (free goes negative)."""
        self._grant = grant

    def check(self, requests: Mapping[str, Fraction]) -> Decision:
        """Would these requests fit now? Charges nothing."""
        for name, value in requests.items():
            if value < 0:
                raise ValueError(f"negative request for {name}: {value}")
        wanted = [name for name, value in requests.items() if value > 0 and self._limits(name)]
        missing = [name for name in wanted if name not in self._grant]
        if missing:
            return Decision(DecisionKind.MISSING_RESOURCE, missing=tuple(sort_resources(missing)))
        shortfalls = []
        for name in sort_resources(wanted):
            free = self._free_of(name)
            if requests[name] > free:
                shortfalls.append(Shortfall(name, requests[name], free))
        if shortfalls:
            return Decision(DecisionKind.INSUFFICIENT, shortfalls=tuple(shortfalls))
        return _OK

    def admit(self, key: str, requests: Mapping[str, Fraction]) -> Decision:
        """Charge ``requests`` to ``key`` if they fit. An admitted key is ok again and keeps its first
        charge (the ShadowPod spec, hence the pool's usage, is fixed at creation)."""
        if key in self._charges:
            return _OK
        decision = self.check(requests)
        if decision.ok:
            charge = shared_charge(requests)
            self._charges[key] = charge
            self._add(charge, 1)
        return decision

    def force_charge(self, key: str, requests: Mapping[str, Fraction]) -> None:
        """Charge ``key`` whether it fits or not: its ShadowPod exists already, so the pool counts it
        (after a restart, or after the grant shrank). Idempotent like ``admit``."""
        if key in self._charges:
            return
        charge = shared_charge(requests)
        self._charges[key] = charge
        self._add(charge, 1)

    def release(self, key: str) -> bool:
        """Free the key's charge (waiters are told, see `on_freed`); False if it was not admitted."""
        charge = self._charges.pop(key, None)
        if charge is None:
            return False
        self._add(charge, -1)
        if self._waiters:
            for callback in self._on_freed:
                callback()
        return True

    # -------------------------------------------------------------------------------------- wait-list

    def wait(self, pod: str, created: str) -> None:
        """``pod`` did not fit: it waits, ordered by ``created`` (its creationTimestamp)."""
        self._waiters[pod] = created

    def stop_waiting(self, pod: str) -> None:
        """``pod`` no longer waits (admitted, finished, gone)."""
        self._waiters.pop(pod, None)

    def stop_waiting_under(self, prefix: str) -> None:
        """Pods whose key starts with ``prefix`` (a namespace no longer reflected) wait no more."""
        for pod in [p for p in self._waiters if p.startswith(prefix)]:
            del self._waiters[pod]

    @property
    def waiters(self) -> Mapping[str, str]:
        return MappingProxyType(self._waiters)

    def waiting_oldest_first(self) -> list[str]:
        return [pod for pod, _ in sorted(self._waiters.items(), key=lambda kv: (kv[1], kv[0]))]

    def on_freed(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever a charge is freed while pods wait (give them another chance)."""
        self._on_freed.append(callback)

    def is_admitted(self, key: str) -> bool:
        return key in self._charges

    def admitted(self) -> list[str]:
        return list(self._charges)

    def charge(self, key: str) -> ResourceList | None:
        charge = self._charges.get(key)
        return dict(charge) if charge is not None else None

    def used(self) -> ResourceList:
        """Sum of the admitted charges (only non-zero totals)."""
        return dict(self._used)

    def free(self) -> ResourceList:
        """Grant minus used for every granted resource, plus (negative) entries for used resources the
        grant no longer lists."""
        out = {name: self._free_of(name) for name in self._grant}
        for name, value in self._used.items():
            if name not in self._grant and self._limits(name):
                out[name] = -value
        return out

    def _limits(self, name: str) -> bool:
        """Is ``name`` checked? Everything is, but the pod count while a non-empty grant does not list it."""
        return name != POD_COUNT or name in self._grant or not self._grant.resources

    def _free_of(self, name: str) -> Fraction:
        granted = self._grant.get(name)
        return (granted if granted is not None else Fraction(0)) - self._used.get(name, Fraction(0))

    def _add(self, charge: Mapping[str, Fraction], sign: int) -> None:
        for name, value in charge.items():
            total = self._used.get(name, Fraction(0)) + sign * value
            if total:
                self._used[name] = total
            else:
                self._used.pop(name, None)

    def __len__(self) -> int:
        return len(self._charges)
