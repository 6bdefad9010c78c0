"""The flag table: every Liqo v1.2 virtual-kubelet flag (LIQO §9) and vkbridge's own, with its value syntax.

To add a flag: one `FlagSpec` row here (its Settings field is named after it), the field in
`vkbridge.settings.Settings`, a line in docs/operations.md; a flag Liqo passes that vkbridge does not
implement also gets its reason in UNIMPLEMENTED_FLAGS (one warning line at start).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from vkbridge.settings import CERTIFICATE_TYPES, LOG_FORMATS, REFLECTION_TYPES

__all__ = ["FLAGS", "FLAGS_BY_NAME", "UNIMPLEMENTED_FLAGS", "FlagSpec", "Kind"]

_NO_SVC = (
    "vkbridge reflects no Services, EndpointSlices, Ingresses or PVCs (Extend has no cross-cluster network)"
)
_NO_REMAP = "IP remapping flags of Liqo after v1.2.0 are not implemented"
_KLOG = "vkbridge logs with Python logging (use --log-format and -v)"
_NO_APISERVER = "API server support for offloaded pods is not implemented (see --enable-apiserver-support)"

#: Liqo flags accepted for compatibility and ignored, with the reason given in their one warning line.
UNIMPLEMENTED_FLAGS: Final[Mapping[str, str]] = {
    "enable-profiling": "there is no pprof endpoint in vkbridge",
    "liqo-namespace": "vkbridge reads nothing from Liqo's own namespace",
    "resync-period": "vkbridge's caches do not resync (they re-list only after a watch expires, 410)",
    "node-check-network": "the Node never gets a NetworkUnavailable condition (Extend has no Liqo network)",
    "serviceaccount-reflection-workers": "ServiceAccount token reflection is not implemented",
    "event-reflection-type": "remote pod Events are reflected without a DenyList/AllowList filter",
    "home-api-server-host": _NO_APISERVER,
    "home-api-server-port": _NO_APISERVER,
    "service-reflection-workers": _NO_SVC,
    "endpointslice-reflection-workers": _NO_SVC,
    "ingress-reflection-workers": _NO_SVC,
    "persistentvolumeclaim-reflection-workers": _NO_SVC,
    "service-reflection-type": _NO_SVC,
    "ingress-reflection-type": _NO_SVC,
    "local-podcidr": "it only serves EndpointSlice reflection, which vkbridge does not do",
    "enable-storage": "storage reflection is not implemented",
    "virtual-storage-class-name": "storage reflection is not implemented",
    "remote-real-storage-class-name": "storage reflection is not implemented",
    "enable-ingress": "Ingress reflection is not implemented",
    "remote-real-ingress-class-name": "Ingress reflection is not implemented",
    "enable-load-balancer": "LoadBalancer Service reflection is not implemented",
    "remote-real-load-balancer-class-name": "LoadBalancer Service reflection is not implemented",
    "remote-pod-cidr": _NO_REMAP,
    "remote-pod-cidr-remap": _NO_REMAP,
    "remote-external-cidr": _NO_REMAP,
    "remote-external-cidr-remap": _NO_REMAP,
    **{
        f"klog.{name}": _KLOG
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
}

Kind = Literal[
    "string", "bool", "duration", "uint", "port", "enum", "map", "slice", "ip", "fraction", "level"
]


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
    # vkbridge's own.
    _f("log-format", "enum", "log line format", LOG_FORMATS),
    _f("logging-format", "enum", "same as --log-format (Kubernetes' name)", LOG_FORMATS, "log_format"),
    _f("v", "level", "log verbosity, klog style: 0 info, 4 and above debug (-v or --v)", dest="verbosity"),
    _f("cert-renew-fraction", "fraction", "renew the pool client certificate at this fraction of its life"),
    _f("node-status-interval", "duration", "interval of the unconditional Node status update"),
    _f("node-lease-renew-interval", "duration", "renew interval of the node Lease (default: its duration/4)"),
)
FLAGS_BY_NAME: Final[Mapping[str, FlagSpec]] = {spec.name: spec for spec in FLAGS}
