"""The flag table: every Liqo v1.2 virtual-kubelet flag (LIQO §9) and vkbridge's own, with its value syntax.

To add a flag: one `FlagSpec` row here (its Settings field is named after it), the field in
`vkbridge.settings.Settings`, a line in docs/operations.md. A Liqo flag vkbridge accepts and does not
implement gets its row in IGNORED_FLAGS instead: its reason, and when it warns (see `Ignored`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final, Literal

from vkbridge.settings import CERTIFICATE_TYPES, LOG_FORMATS, REFLECTION_TYPES, Settings

__all__ = ["FLAGS", "FLAGS_BY_NAME", "IGNORED_FLAGS", "UNIMPLEMENTED_FLAGS", "FlagSpec", "Ignored", "Kind"]

Kind = Literal[
    "string", "bool", "duration", "uint", "port", "enum", "map", "slice", "ip", "fraction", "level"
]


def _never(_value: object) -> bool:
    return False


def _true(value: object) -> bool:
    return value is True


def _set(value: object) -> bool:
    return bool(value)


def _allow_list(value: object) -> bool:
    return value == "AllowList"


@dataclass(frozen=True)
class Ignored:
    """A Liqo flag accepted and not implemented: why, and when it is worth a WARNING at start.

    Every ignored flag given is named in one INFO line at start. A flag of Liqo v1.2 (`newer` empty) warns
    only when `asks(value)` says its value asks for something vkbridge does not do: the values Liqo's chart
    and webhook pass on a healthy install (Liqo's defaults, the ``false`` of an off switch) stay quiet. A
    flag of a newer Liqo release (`newer`: since which) warns once, whatever its value: nobody has checked
    what it asks for. `kind` is the value syntax of a flag that has no row in FLAGS otherwise.
    """

    reason: str
    asks: Callable[[object], bool] = _never
    newer: str = ""
    kind: Kind = "string"


_NO_SVC = (
    "vkbridge reflects no Services, EndpointSlices, Ingresses or PVCs (Extend has no cross-cluster network)"
)
_KLOG = "vkbridge logs with Python logging (use --log-format and -v)"
_KLOG_FILE = "vkbridge logs to stderr only (use --log-format and -v)"
_NO_APISERVER = "API server support for offloaded pods is not implemented (see --enable-apiserver-support)"
_NO_REMAP = "IP remapping is not implemented"
_AFTER_V12: Final = "after v1.2.0"
_NO_DRA = "Dynamic Resource Allocation objects are not reflected"

#: The one table of ignored flags: Liqo v1.2's (quiet unless the value asks for what vkbridge does not do)
#: and newer Liqo releases' (one WARNING each). A flag of no Liqo release is refused (exit 2).
IGNORED_FLAGS: Final[Mapping[str, Ignored]] = {
    # Liqo's chart always appends --enable-apiserver-support=true: quiet, the INFO line names it.
    "enable-apiserver-support": Ignored(
        "offloaded pods get no service-account token and no access to this cluster's API (token "
        "reflection is not implemented; as with the flag off)"
    ),
    "enable-profiling": Ignored("there is no pprof endpoint in vkbridge", _true),
    "liqo-namespace": Ignored("vkbridge reads nothing from Liqo's own namespace (doctor checks its pods)"),
    "resync-period": Ignored(
        "vkbridge's caches do not resync (they re-list only after a watch expires, 410)"
    ),
    "node-check-network": Ignored(
        "the Node never gets a NetworkUnavailable condition (Extend has no Liqo network)", _true
    ),
    "serviceaccount-reflection-workers": Ignored("ServiceAccount token reflection is not implemented"),
    "event-reflection-type": Ignored(
        "remote pod Events are reflected without a DenyList/AllowList filter", _allow_list
    ),
    "home-api-server-host": Ignored(_NO_APISERVER, _set),
    "home-api-server-port": Ignored(_NO_APISERVER, _set),
    "service-reflection-workers": Ignored(_NO_SVC),
    "endpointslice-reflection-workers": Ignored(_NO_SVC),
    "ingress-reflection-workers": Ignored(_NO_SVC),
    "persistentvolumeclaim-reflection-workers": Ignored(_NO_SVC),
    "service-reflection-type": Ignored(_NO_SVC),
    "ingress-reflection-type": Ignored(_NO_SVC),
    "local-podcidr": Ignored("it only serves EndpointSlice reflection, which vkbridge does not do"),
    # Liqo's webhook sets --enable-* when the VirtualNode offers storage/ingress/load-balancer classes.
    "enable-storage": Ignored("storage reflection is not implemented", _true),
    "virtual-storage-class-name": Ignored("storage reflection is not implemented"),
    "remote-real-storage-class-name": Ignored("storage reflection is not implemented"),
    "enable-ingress": Ignored("Ingress reflection is not implemented", _true),
    "remote-real-ingress-class-name": Ignored("Ingress reflection is not implemented"),
    "enable-load-balancer": Ignored("LoadBalancer Service reflection is not implemented", _true),
    "remote-real-load-balancer-class-name": Ignored("LoadBalancer Service reflection is not implemented"),
    **{
        f"klog.{name}": Ignored(_KLOG_FILE, _set) if name in ("log_dir", "log_file") else Ignored(_KLOG)
        for name in (
            "add_dir_header",
            "alsologtostderr",
            "alsologtostderrthreshold",
            "legacy_stderr_threshold_behavior",
            "log_backtrace_at",
            "log_dir",
            "log_file",
            "log_file_max_size",
            "logtostderr",
            "one_output",
            "skip_headers",
            "skip_log_headers",
            "stderrthreshold",
            "vmodule",
        )
    },
    # Newer Liqo releases.
    "remote-pod-cidr": Ignored(_NO_REMAP, newer=_AFTER_V12, kind="slice"),
    "remote-pod-cidr-remap": Ignored(_NO_REMAP, newer=_AFTER_V12, kind="slice"),
    "remote-external-cidr": Ignored(_NO_REMAP, newer=_AFTER_V12, kind="slice"),
    "remote-external-cidr-remap": Ignored(_NO_REMAP, newer=_AFTER_V12, kind="slice"),
    "resourceslice-reflection-workers": Ignored(_NO_DRA, newer=_AFTER_V12, kind="uint"),
    "resourceclaim-reflection-workers": Ignored(_NO_DRA, newer=_AFTER_V12, kind="uint"),
}

#: Each ignored flag's reason (a view of IGNORED_FLAGS).
UNIMPLEMENTED_FLAGS: Final[Mapping[str, str]] = {name: row.reason for name, row in IGNORED_FLAGS.items()}


@dataclass(frozen=True)
class FlagSpec:
    """One flag: its name without dashes, value syntax, Settings field (None: not stored) and help."""

    name: str
    kind: Kind
    dest: str | None
    help: str
    choices: tuple[str, ...] = ()

    @property
    def flag(self) -> str:
        return "-v" if self.name == "v" else f"--{self.name}"

    @property
    def ignored(self) -> str:
        return UNIMPLEMENTED_FLAGS.get(self.name, "")


def _f(name: str, kind: Kind, help: str, choices: tuple[str, ...] = (), dest: str | None = "") -> FlagSpec:
    return FlagSpec(name, kind, name.replace("-", "_") if dest == "" else dest, help, choices)


_WORKERS = (
    "pod", "service", "endpointslice", "ingress", "configmap", "secret", "serviceaccount",
    "persistentvolumeclaim", "event",
)  # fmt: skip
_TYPED = ("service", "ingress", "configmap", "secret", "event")
_KLOG_KINDS: Final[Mapping[str, Kind]] = {
    "add_dir_header": "bool",
    "alsologtostderr": "bool",
    "legacy_stderr_threshold_behavior": "bool",
    "logtostderr": "bool",
    "one_output": "bool",
    "skip_headers": "bool",
    "skip_log_headers": "bool",
    "log_file_max_size": "uint",
}

#: Every flag, in Liqo's order (cmd/virtual-kubelet/root/flag.go, v1.2.0), then vkbridge's own.
FLAGS: Final[tuple[FlagSpec, ...]] = (
    _f(
        "home-kubeconfig",
        "string",
        "kubeconfig of the home (consumer) cluster; empty: in-cluster ($KUBECONFIG)",
    ),
    _f(
        "foreign-kubeconfig-secret-name",
        "string",
        "Secret in the tenant namespace holding the pool kubeconfig",
    ),
    _f("nodename", "string", "name of the virtual Node (= the VirtualNode name)"),
    _f("tenant-namespace", "string", "tenant namespace of the remote cluster"),
    _f("liqo-namespace", "string", "namespace where Liqo is installed"),
    _f("resync-period", "duration", "resync period of the informers (0: none)"),
    _f("home-cluster-id", "string", "cluster ID of the home (consumer) cluster"),
    _f("foreign-cluster-id", "string", "cluster ID of the foreign (pool) cluster (required)"),
    _f("disable-ip-reflection", "bool", "do not reflect pod IPs"),
    _f("local-podcidr", "slice", "local pod CIDRs (repeatable, comma-separated)"),
    _f("node-ip", "ip", "IP of the virtual kubelet pod, the node's InternalIP ($POD_IP)"),
    _f("certificate-type", "enum", "kubelet serving certificate signer", CERTIFICATE_TYPES),
    _f("listen-port", "port", "port of the kubelet API"),
    _f("enable-profiling", "bool", "pprof profiling"),
    *(
        _f(f"{r}-reflection-workers", "uint", f"workers of the {r} reflector (0 disables it)")
        for r in _WORKERS
    ),
    *(_f(f"{r}-reflection-type", "enum", f"reflection type of {r}s", REFLECTION_TYPES) for r in _TYPED),
    _f("node-lease-duration", "duration", "duration of the node Lease"),
    _f("node-ping-interval", "duration", "interval of the pool API reachability check (0 disables it)"),
    _f("node-ping-timeout", "duration", "timeout of the pool API reachability check"),
    _f("node-check-network", "bool", "require network readiness for the node to be Ready"),
    _f("node-extra-annotations", "map", "extra annotations of the Node (k=v,k2=v2)"),
    _f("node-extra-labels", "map", "extra labels of the Node (k=v,k2=v2)"),
    _f("enable-apiserver-support", "bool", "let offloaded pods talk to the home API server"),
    _f("enable-storage", "bool", "storage reflection"),
    _f("virtual-storage-class-name", "string", "name of the virtual storage class"),
    _f("remote-real-storage-class-name", "string", "storage class of the real volumes on the pool"),
    _f("enable-ingress", "bool", "Ingress reflection"),
    _f("remote-real-ingress-class-name", "string", "Ingress class on the pool"),
    _f("enable-load-balancer", "bool", "LoadBalancer Service reflection"),
    _f("remote-real-load-balancer-class-name", "string", "LoadBalancer class on the pool"),
    _f("metrics-enabled", "bool", "serve Prometheus metrics"),
    _f("metrics-address", "string", "address of the metrics server ([host]:port)"),
    _f("home-api-server-host", "string", "home API server host seen by offloaded pods (with the port)"),
    _f("home-api-server-port", "string", "home API server port seen by offloaded pods (with the host)"),
    _f("remote-pod-cidr", "slice", "pool pod CIDRs (Liqo after v1.2.0)"),
    _f("remote-pod-cidr-remap", "slice", "pool pod CIDRs as remapped locally (Liqo after v1.2.0)"),
    _f("remote-external-cidr", "slice", "pool external CIDRs (Liqo after v1.2.0)"),
    _f("remote-external-cidr-remap", "slice", "pool external CIDRs as remapped locally (Liqo after v1.2.0)"),
    _f("create-node", "bool", "create the virtual Node"),
    _f("vk-lease-enabled", "bool", "shared-resources leader election"),
    _f("vk-lease-duration", "duration", "leader-election lease duration"),
    _f("vk-lease-renew-interval", "duration", "leader-election renew deadline"),
    _f("vk-lease-retry-period", "duration", "leader-election retry period"),
    _f("client-timeout", "duration", "API request timeout (0: none)"),
    _f("client-qps", "uint", "API client queries per second"),
    _f("client-max-burst", "uint", "API client burst above the QPS"),
    _f("klog.v", "level", "log verbosity (same as -v)", dest="verbosity"),
    *(
        _f(name, _KLOG_KINDS.get(name.removeprefix("klog."), "string"), "klog flag (ignored)", dest=None)
        for name in UNIMPLEMENTED_FLAGS
        if name.startswith("klog.")
    ),
    # Flags of newer Liqo releases that have no setting: parsed with their syntax, then ignored.
    *(
        _f(name, row.kind, f"Liqo {row.newer} (ignored)", dest=None)
        for name, row in IGNORED_FLAGS.items()
        if row.newer and name.replace("-", "_") not in Settings.__dataclass_fields__
    ),
    # vkbridge's own.
    _f("log-format", "enum", "log line format", LOG_FORMATS),
    _f("logging-format", "enum", "same as --log-format (Kubernetes' name)", LOG_FORMATS, "log_format"),
    _f("v", "level", "log verbosity, klog style: 0 info, 4 and above debug (-v or --v)", dest="verbosity"),
    _f("cert-renew-fraction", "fraction", "renew the pool client certificate at this fraction of its life"),
    _f("node-status-interval", "duration", "interval of the unconditional Node status update"),
    _f("node-lease-renew-interval", "duration", "renew interval of the node Lease (default: its duration/4)"),
    _f(
        "health-probe-bind-address",
        "string",
        "address of /livez, /readyz, /leaderz, served even without --metrics-enabled ([host]:port; 0: off)",
    ),
)
FLAGS_BY_NAME: Final[Mapping[str, FlagSpec]] = {spec.name: spec for spec in FLAGS}
