"""Command line: Liqo's virtual-kubelet flags (LIQO §9) to `Settings`; `vkbridge [run] | doctor | version`.

Liqo's controller-manager starts our image with the argument vector it builds for its own virtual kubelet,
so every v1.2 flag is accepted with pflag's syntax: ``--flag=value`` or ``--flag value``; booleans as
``--flag`` or ``--flag=true|false`` (``--flag false`` is refused: pflag would read it as ``--flag`` plus a
stray word); repeated flags: the last wins, lists append, maps merge; Go durations and numbers.
Flags we do not implement are accepted with one warning each (UNIMPLEMENTED_FLAGS). Any bad value exits 2
with one line: ``vkbridge: invalid value "<v>" for flag --<name>: <what is wrong>``.

Environment (downward API, as Liqo's Deployment sets it): ``KUBECONFIG`` is the default of
--home-kubeconfig, ``POD_IP`` the default of --node-ip, ``POD_NAME`` the leader-election identity,
``POD_NAMESPACE`` and ``VIRTUALNODE_NAME`` locate the VirtualNode. ``VIRTUALNODE_NAME`` is *not* a default
for --nodename: Liqo always passes both with the same value and its --nodename default stays
"virtual-kubelet"; we keep that and warn when they differ.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import ipaddress
import json
import os
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Literal, NoReturn

from vkbridge.logs import get_logger, setup_logging
from vkbridge.settings import (
    CERTIFICATE_TYPES,
    LOG_FORMATS,
    REFLECTION_TYPES,
    Settings,
    format_go_duration,
    parse_go_bool,
    parse_go_duration,
    parse_go_int,
    parse_go_uint,
    parse_string_map,
    parse_string_slice,
)

__all__ = [
    "FLAGS",
    "UNIMPLEMENTED_FLAGS",
    "FlagSpec",
    "UsageError",
    "build_parser",
    "main",
    "parse_args",
]

PROG: Final = "vkbridge"
log = get_logger("vkbridge.cli")

_NO_SVC = (
    "vkbridge reflects no Services, EndpointSlices, Ingresses or PVCs (Extend has no cross-cluster network)"
)
_NO_REMAP = "IP remapping flags of Liqo after v1.2.0 are not implemented"
_KLOG = "vkbridge logs with Python logging (use --log-format and -v)"

#: Liqo flags accepted for compatibility and ignored, with the reason given in their one warning line.
UNIMPLEMENTED_FLAGS: Final[Mapping[str, str]] = {
    "enable-profiling": "there is no pprof endpoint in vkbridge",
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
    _f("cert-renew-fraction", "fraction", "renew the serving certificate at this fraction of its life"),
    _f("node-status-interval", "duration", "interval of the unconditional Node status update"),
    _f("node-lease-renew-interval", "duration", "renew interval of the node Lease (default: its duration/4)"),
)
FLAGS_BY_NAME: Final[Mapping[str, FlagSpec]] = {spec.name: spec for spec in FLAGS}
_REQUIRED_FOR_RUN: Final = ("foreign-cluster-id", "foreign-kubeconfig-secret-name")
_COMMANDS: Final = ("run", "doctor", "version")


class UsageError(Exception):
    """A bad command line: its message is the one line printed after "vkbridge: "; exit code 2."""


class _HelpRequested(Exception):
    pass


# ---- value checks ----------------------------------------------------------------------------------------

_DNS_LABEL: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
_DNS_SUBDOMAIN: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\Z")
_QUALIFIED_NAME: Final = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]\Z")
_POSITIVE_DURATIONS: Final = frozenset(
    {
        "node_lease_duration",
        "node_ping_timeout",
        "node_status_interval",
        "node_lease_renew_interval",
        "vk_lease_duration",
        "vk_lease_renew_interval",
        "vk_lease_retry_period",
    }
)


def _dns_label(value: str, what: str = "a DNS-1123 label") -> None:
    if len(value) > 63 or not _DNS_LABEL.match(value):
        raise ValueError(f"must be {what} (lowercase letters, digits and '-', at most 63 characters)")


def _dns_subdomain(value: str) -> None:
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        raise ValueError("must be a DNS-1123 subdomain (lowercase letters, digits, '-' and '.')")


def _node_name(value: str) -> None:
    """A Node name that is also a label value (offloading.liqo.io/nodename, multicloud.io/pool on the
    pool's objects): the 253 characters a Node name may have would make every ShadowPod unwritable."""
    _dns_subdomain(value)
    if len(value) > 63:
        raise ValueError(
            f"is {len(value)} characters; at most 63, as it is also a label value "
            "(offloading.liqo.io/nodename)"
        )


def _cluster_id(value: str) -> None:
    if value:
        _dns_label(value, "a cluster ID, a DNS-1123 label")


def _qualified_name(key: str, what: str) -> None:
    prefix, slash, name = key.rpartition("/")
    if slash and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        raise ValueError(f"{what} {key!r}: the prefix must be a DNS-1123 subdomain")
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        raise ValueError(f"{what} {key!r} is not a valid qualified name")


def _labels(value: dict[str, str]) -> None:
    for key, label in value.items():
        _qualified_name(key, "label key")
        if label and (len(label) > 63 or not _QUALIFIED_NAME.match(label)):
            raise ValueError(f"label value {label!r} of {key!r} is not valid")


def _annotations(value: dict[str, str]) -> None:
    for key in value:
        _qualified_name(key, "annotation key")


def _port_string(value: str) -> None:
    if value and not (value.isascii() and value.isdigit() and 0 < int(value) <= 65535):
        raise ValueError("must be a port number (1-65535)")


def _host_port(value: str) -> None:
    host, sep, port = value.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit() and int(port) <= 65535):
        raise ValueError("must be [host]:port with a numeric port")
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise ValueError("an IPv6 host must be in brackets, as in [::]:8082")


_VALIDATORS: Final[Mapping[str, Callable[[Any], None]]] = {
    "nodename": _node_name,
    "tenant_namespace": _dns_label,
    "liqo_namespace": _dns_label,
    "home_cluster_id": _cluster_id,
    "foreign_cluster_id": _cluster_id,
    "node_extra_labels": _labels,
    "node_extra_annotations": _annotations,
    "home_api_server_port": _port_string,
}


def _ip(raw: str) -> str:
    try:
        if "%" in raw:  # Go's net.ParseIP takes no zone
            raise ValueError
        ipaddress.ip_address(raw)
    except ValueError:
        raise ValueError("not an IP address") from None
    return raw


def _fraction(raw: str) -> float:
    try:
        value = Fraction(raw.strip())
    except (ValueError, ZeroDivisionError):
        raise ValueError("not a number (use 2/3 or 0.66)") from None
    if not 0 < value < 1:
        raise ValueError("must be between 0 and 1, exclusive")
    return float(value)


def _level(raw: str) -> int:
    value = parse_go_int(raw, 32)
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _convert(spec: FlagSpec, raw: str) -> Any:
    """One occurrence of a flag to its typed value; ValueError says what is wrong."""
    kind = spec.kind
    value: Any
    if kind == "string":
        value = raw
    elif kind == "bool":
        value = parse_go_bool(raw)
    elif kind == "duration":
        try:
            value = parse_go_duration(raw)
        except ValueError as exc:
            raise ValueError(f"{exc} (Go syntax, e.g. 40s, 1m30s, 500ms)") from None
        if value < 0:
            raise ValueError("must not be negative")
        if value == 0 and spec.dest in _POSITIVE_DURATIONS:
            raise ValueError("must be positive")
    elif kind in ("uint", "port"):
        try:
            value = parse_go_uint(raw, 16 if kind == "port" else 64)
        except ValueError as exc:
            raise ValueError(str(exc).replace("not a number", "not an unsigned integer")) from None
    elif kind == "level":
        value = _level(raw)
    elif kind == "enum":
        if raw not in spec.choices:
            raise ValueError(f"must be one of {', '.join(spec.choices)}")
        value = raw
    elif kind == "map":
        value = parse_string_map(raw)
    elif kind == "slice":
        value = parse_string_slice(raw)
    elif kind == "ip":
        value = _ip(raw)
    else:  # fraction
        value = _fraction(raw)
    validator = _VALIDATORS.get(spec.dest or "")
    if validator is not None:
        validator(value)
    return value


def _invalid(flag: str, raw: str, problem: str) -> UsageError:
    return UsageError(f"invalid value {json.dumps(raw, ensure_ascii=False)} for flag {flag}: {problem}")


# ---- argv --------------------------------------------------------------------------------------------------


def _tokenize(args: Sequence[str]) -> list[tuple[FlagSpec, str]]:
    """pflag's reading of argv, strictly: (flag, raw value) pairs in order; no positional arguments."""
    pairs: list[tuple[FlagSpec, str]] = []
    last_bare_bool: FlagSpec | None = None
    i = 0
    while i < len(args):
        tok = args[i]
        i += 1
        bare_bool, last_bare_bool = last_bare_bool, None
        if tok == "--":
            if i < len(args):
                raise UsageError(f"unexpected argument {json.dumps(args[i])}")
            break
        if tok.startswith("--"):
            body = tok[2:]
            if not body or body[0] in "-=":
                raise UsageError(f"bad flag syntax: {tok}")
            name, eq, value = body.partition("=")
            if name == "help":
                raise _HelpRequested
            spec = FLAGS_BY_NAME.get(name)  # --v as well as -v, as Kubernetes components take it
            if spec is None:
                raise UsageError(f"unknown flag: --{name}")
            if not eq:
                if spec.kind == "bool":
                    value = "true"
                    last_bare_bool = spec
                elif i < len(args):
                    value = args[i]
                    i += 1
                else:
                    raise UsageError(f"flag needs an argument: --{name}")
            pairs.append((spec, value))
        elif tok.startswith("-") and len(tok) > 1:
            if tok == "-h":
                raise _HelpRequested
            if not tok.startswith("-v"):
                raise UsageError(f"unknown shorthand flag: {tok[1]!r} in {tok}")
            value = tok[2:].removeprefix("=")
            if not tok[2:]:
                if i >= len(args):
                    raise UsageError("flag needs an argument: -v")
                value = args[i]
                i += 1
            pairs.append((FLAGS_BY_NAME["v"], value))
        else:
            hint = ""
            if bare_bool is not None:
                hint = f" (a boolean flag takes its value after '=': --{bare_bool.name}={tok})"
            raise UsageError(f"unexpected argument {json.dumps(tok)}{hint}")
    return pairs


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


class _Formatter(argparse.HelpFormatter):
    def _format_action_invocation(self, action: argparse.Action) -> str:
        return (
            action.metavar if isinstance(action.metavar, str) else super()._format_action_invocation(action)
        )


_DEFAULTS: Final = Settings()


def _default_text(spec: FlagSpec) -> str:
    if spec.dest is None or spec.name in ("node-lease-renew-interval", "klog.v"):
        return ""
    value = getattr(_DEFAULTS, spec.dest)
    if spec.kind == "duration":
        text = format_go_duration(value)
    elif spec.kind == "bool":
        text = "true" if value else "false"
    elif spec.kind == "fraction":
        text = "2/3" if spec.name == "cert-renew-fraction" else str(value)
    elif isinstance(value, (tuple, dict)) or value == "":
        return ""
    else:
        text = str(value)
    return f" (default {text})"


def build_parser(command: str = "run") -> argparse.ArgumentParser:
    """The argparse parser of `run` (or `doctor`): every flag, grouped, for --help and value collection."""
    prog = PROG if command == "run" else f"{PROG} {command}"
    parser = _Parser(
        prog=prog,
        usage=f"{PROG} [run] [flags]\n       {PROG} doctor [flags]\n       {PROG} version",
        description=(
            "Liqo v1.2 virtual kubelet, reimplemented in Python. `run` (the default) starts it; "
            "`doctor` checks the environment with the same flags; `version` prints the version. "
            "Flags use Go syntax: --flag=value or --flag value, booleans --flag or --flag=false, "
            "durations like 40s or 1m30s."
            if command == "run"
            else "Check the environment with the same flags as `run` (GUIDE §7.1); exit 1 if one fails."
        ),
        epilog=(
            "Environment: KUBECONFIG, POD_IP (default of --node-ip), POD_NAME, POD_NAMESPACE, "
            "VIRTUALNODE_NAME."
        ),
        formatter_class=_Formatter,
        allow_abbrev=False,
        add_help=False,
    )
    groups = {
        "liqo": parser.add_argument_group("Liqo virtual-kubelet flags"),
        "ignored": parser.add_argument_group("Liqo flags accepted and ignored (one warning each)"),
        "own": parser.add_argument_group("vkbridge flags"),
    }
    parser.add_argument("-h", "--help", action="store_true", help="show this help")
    own = {
        "log-format", "logging-format", "v", "cert-renew-fraction", "node-status-interval",
        "node-lease-renew-interval",
    }  # fmt: skip
    for spec in FLAGS:
        group = groups["ignored"] if spec.ignored else groups["own"] if spec.name in own else groups["liqo"]
        if spec.kind == "bool":
            invocation = f"--{spec.name}[=true|false]"
        elif spec.name == "v":
            invocation = "-v, --v LEVEL"
        else:
            shown = "|".join(spec.choices) if spec.choices else spec.kind.upper()
            invocation = f"--{spec.name}={shown}"
        group.add_argument(
            f"--{spec.name}",
            dest=spec.name,
            action="append",
            metavar=invocation,
            help=spec.help + _default_text(spec),
        )
    return parser


def parse_args(
    args: Sequence[str], env: Mapping[str, str] | None = None, *, command: str = "run"
) -> Settings:
    """Flags (without the program name or the command) and environment to Settings; UsageError if bad."""
    env = os.environ if env is None else env
    pairs = _tokenize(args)
    parser = build_parser(command)
    namespace = parser.parse_args([f"--{spec.name}={raw}" for spec, raw in pairs])
    raws: dict[str, list[str]] = {
        name: values for name, values in vars(namespace).items() if isinstance(values, list)
    }

    values: dict[str, Any] = {}
    last_raw: dict[str, tuple[str, str]] = {}  # Settings field -> (flag, raw) of the value it holds
    ignored: list[str] = []
    for spec, _ in pairs:
        if spec.ignored and spec.name not in ignored:
            ignored.append(spec.name)
    for spec, raw in ((FLAGS_BY_NAME[name], raw) for name, rs in raws.items() for raw in rs):
        try:
            value = _convert(spec, raw)
        except ValueError as exc:
            raise _invalid(spec.flag, raw, str(exc)) from None
        if spec.dest is None:
            continue
        if spec.kind == "slice":
            value = values.get(spec.dest, ()) + value
        elif spec.kind == "map":
            value = {**values.get(spec.dest, {}), **value}
        values[spec.dest] = value
        last_raw[spec.dest] = (spec.flag, raw)
    # Flags that share one setting (-v, --v and --klog.v; --log-format and --logging-format): the last
    # given on the line wins.
    for dest in ("verbosity", "log_format"):
        given = [(spec, raw) for spec, raw in pairs if spec.dest == dest]
        if given:
            values[dest] = _convert(*given[-1])

    _apply_env(values, env)
    if command == "run":
        for name in _REQUIRED_FOR_RUN:
            if not values.get(name.replace("-", "_")):
                raise UsageError(f"missing required flag --{name}")
    _cross_check(values, last_raw)

    warnings = [
        f"flag --{name} is accepted for Liqo compatibility and ignored: {UNIMPLEMENTED_FLAGS[name]}"
        for name in ignored
    ]
    vn_name = env.get("VIRTUALNODE_NAME", "")
    nodename = values.get("nodename", _DEFAULTS.nodename)
    if vn_name and vn_name != nodename:
        warnings.append(
            f"VIRTUALNODE_NAME ({vn_name}) differs from --nodename ({nodename}): the Node is {nodename}, "
            f"the VirtualNode read is {vn_name}"
        )
    return Settings(**values, ignored_flags=tuple(ignored), warnings=tuple(warnings))


def _apply_env(values: dict[str, Any], env: Mapping[str, str]) -> None:
    if "home_kubeconfig" not in values and env.get("KUBECONFIG"):
        values["home_kubeconfig"] = env["KUBECONFIG"]
    if "node_ip" not in values and env.get("POD_IP"):
        try:
            values["node_ip"] = _ip(env["POD_IP"])
        except ValueError as exc:
            raise _invalid("--node-ip", env["POD_IP"], f"{exc} (from $POD_IP)") from None
    for var, dest in (("POD_NAME", "pod_name"), ("POD_NAMESPACE", "pod_namespace")):
        if env.get(var):
            values[dest] = env[var]
    if env.get("VIRTUALNODE_NAME"):
        values["virtual_node_name"] = env["VIRTUALNODE_NAME"]


def _cross_check(values: Mapping[str, Any], last_raw: Mapping[str, tuple[str, str]]) -> None:
    """Relations between durations that client-go or the heartbeat would otherwise break at run time."""

    def get(dest: str) -> float:
        value: float = values.get(dest, getattr(_DEFAULTS, dest))
        return value

    def fail(blame: Sequence[str], problem: str) -> NoReturn:
        dest = next((d for d in blame if d in last_raw), blame[0])
        flag, raw = last_raw.get(dest, (f"--{dest.replace('_', '-')}", format_go_duration(get(dest))))
        raise _invalid(flag, raw, problem)

    def show(dest: str) -> str:
        return f"--{dest.replace('_', '-')} ({format_go_duration(get(dest))})"

    renew_given = "node_lease_renew_interval" in values
    if renew_given and get("node_lease_renew_interval") >= get("node_lease_duration"):
        fail(["node_lease_renew_interval"], f"must be shorter than {show('node_lease_duration')}")
    if get("vk_lease_duration") <= get("vk_lease_renew_interval"):
        fail(
            ["vk_lease_renew_interval", "vk_lease_duration"],
            f"--vk-lease-duration must be longer than --vk-lease-renew-interval, "
            f"here {format_go_duration(get('vk_lease_duration'))} "
            f"and {format_go_duration(get('vk_lease_renew_interval'))}",
        )
    if get("vk_lease_renew_interval") <= 1.2 * get("vk_lease_retry_period"):
        fail(
            ["vk_lease_retry_period", "vk_lease_renew_interval"],
            f"--vk-lease-renew-interval must exceed 1.2 x --vk-lease-retry-period (client-go), "
            f"here {format_go_duration(get('vk_lease_renew_interval'))} "
            f"and {format_go_duration(get('vk_lease_retry_period'))}",
        )
    if values.get("metrics_enabled"):
        address = values.get("metrics_address", _DEFAULTS.metrics_address)
        try:
            _host_port(address)
        except ValueError as exc:
            raise _invalid("--metrics-address", address, str(exc)) from None


# ---- process -----------------------------------------------------------------------------------------------


def _version() -> str:
    try:
        from importlib.metadata import PackageNotFoundError, version

        return version("vkbridge")
    except PackageNotFoundError:
        from vkbridge import __version__

        return __version__


def _call_entry(module_name: str, settings: Settings) -> int:
    """Lazy import so the CLI (and --help) works without the heavy runtime; `run(settings) -> int`."""
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:
            raise
        log.error(f"{module_name} is not part of this build: nothing to run")
        return 1
    entry = getattr(module, "run", None)
    if not callable(entry):
        log.error(f"{module_name} has no run(settings) entry point")
        return 1
    result = entry(settings)
    if inspect.iscoroutine(result):
        result = asyncio.run(result)
    return int(result) if result is not None else 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `vkbridge` script and `python -m vkbridge`: returns the exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    command = "run"
    if args and args[0] in _COMMANDS:
        command, args = args[0], args[1:]
    elif args and args[0] == "--version":
        command, args = "version", args[1:]
    try:
        if command == "version":
            if args:
                raise UsageError(f"unexpected argument {json.dumps(args[0])}")
            sys.stdout.write(f"{PROG} {_version()}\n")
            return 0
        settings = parse_args(args, command=command)
    except _HelpRequested:
        sys.stdout.write(build_parser(command).format_help())
        return 0
    except UsageError as exc:
        sys.stderr.write(f"{PROG}: {exc}\n")
        return 2
    setup_logging(settings.verbosity, settings.log_format)
    for warning in settings.warnings:
        log.warning(warning)
    return _call_entry("vkbridge.doctor" if command == "doctor" else "vkbridge.app", settings)
