"""The argument vector and environment to `Settings`: pflag's reading of argv, --help, cross-checks.

pflag's syntax: ``--flag=value`` or ``--flag value``; booleans as ``--flag`` or ``--flag=true|false``
(``--flag false`` is refused: pflag would read it as ``--flag`` plus a stray word); repeated flags: the
last wins, lists append, maps merge. Any bad value is one UsageError line:
``invalid value "<v>" for flag --<name>: <what is wrong>``.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any, Final, NoReturn

from vkbridge.cli.flags import FLAGS, FLAGS_BY_NAME, IGNORED_FLAGS, FlagSpec
from vkbridge.cli.values import check_host_port, check_ip, convert
from vkbridge.goflags import format_go_duration
from vkbridge.settings import Settings

__all__ = [
    "PROG",
    "HelpRequested",
    "UsageError",
    "build_parser",
    "ignored_flags_line",
    "parse_args",
    "requested_log_format",
]

PROG: Final = "vkbridge"
_REQUIRED_FOR_RUN: Final = ("foreign-cluster-id", "foreign-kubeconfig-secret-name")


class UsageError(Exception):
    """A bad command line: its message is the one line printed after "vkbridge: "; exit code 2."""


class HelpRequested(Exception):
    """-h or --help was given: `main` prints the help of the command and exits 0."""


def _invalid(flag: str, raw: str, problem: str) -> UsageError:
    return UsageError(f"invalid value {json.dumps(raw, ensure_ascii=False)} for flag {flag}: {problem}")


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
                raise HelpRequested
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
                raise HelpRequested
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
        "ignored": parser.add_argument_group(
            "Liqo flags accepted and ignored (named in one INFO line at start; a warning when the value "
            "asks for what vkbridge does not do, or the flag is of a newer Liqo release)"
        ),
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
    ignored_values: dict[str, tuple[str, Any]] = {}  # ignored flag -> (raw, value) of its last use
    ignored: list[str] = []
    for spec, _ in pairs:
        if spec.ignored and spec.name not in ignored:
            ignored.append(spec.name)
    for spec, raw in ((FLAGS_BY_NAME[name], raw) for name, rs in raws.items() for raw in rs):
        try:
            value = convert(spec, raw)
        except ValueError as exc:
            raise _invalid(spec.flag, raw, str(exc)) from None
        if spec.ignored:
            ignored_values[spec.name] = (raw, value)
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
            values[dest] = convert(*given[-1])

    _apply_env(values, env)
    if command == "run":
        for name in _REQUIRED_FOR_RUN:
            if not values.get(name.replace("-", "_")):
                raise UsageError(f"missing required flag --{name}")
    _cross_check(values, last_raw)

    warnings = [_ignored_warning(name, *ignored_values[name]) for name in ignored]
    warnings = [w for w in warnings if w]
    vn_name = env.get("VIRTUALNODE_NAME", "")
    nodename = values.get("nodename", _DEFAULTS.nodename)
    if vn_name and vn_name != nodename:
        warnings.append(
            f"VIRTUALNODE_NAME ({vn_name}) differs from --nodename ({nodename}): the Node is {nodename}, "
            f"the VirtualNode read is {vn_name}"
        )
    return Settings(**values, ignored_flags=tuple(ignored), warnings=tuple(warnings))


def _ignored_warning(name: str, raw: str, value: Any) -> str:
    """The WARNING an ignored flag is worth (IGNORED_FLAGS decides), or "" when the INFO line is enough."""
    row = IGNORED_FLAGS[name]
    if row.newer:
        return f"flag --{name} of a newer Liqo release ({row.newer}), ignored: {row.reason}"
    if row.asks(value):
        return f"flag --{name}={raw} asks for what vkbridge does not do, ignored: {row.reason}"
    return ""


def ignored_flags_line(settings: Settings) -> str:
    """The one INFO line of start-up naming every ignored flag given ("" when none was)."""
    if not settings.ignored_flags:
        return ""
    names = ", ".join(f"--{name}" for name in settings.ignored_flags)
    return f"Liqo flags accepted and ignored (not implemented by vkbridge, docs/operations.md): {names}"


def requested_log_format(args: Sequence[str]) -> str:
    """The log format the command line asks for, read leniently (to report a usage error in it)."""
    fmt = "text"
    for i, tok in enumerate(args):
        for flag in ("--log-format", "--logging-format"):
            if tok == flag and i + 1 < len(args):
                fmt = args[i + 1]
            elif tok.startswith(flag + "="):
                fmt = tok.partition("=")[2]
    return fmt if fmt in ("text", "json") else "text"


def _apply_env(values: dict[str, Any], env: Mapping[str, str]) -> None:
    if "home_kubeconfig" not in values and env.get("KUBECONFIG"):
        values["home_kubeconfig"] = env["KUBECONFIG"]
    if "node_ip" not in values and env.get("POD_IP"):
        try:
            values["node_ip"] = check_ip(env["POD_IP"])
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
    health = values.get("health_probe_bind_address", _DEFAULTS.health_probe_bind_address)
    if health != "0":
        try:
            check_host_port(health)
        except ValueError as exc:
            raise _invalid("--health-probe-bind-address", health, str(exc)) from None
    if values.get("metrics_enabled"):
        address = values.get("metrics_address", _DEFAULTS.metrics_address)
        try:
            check_host_port(address)
        except ValueError as exc:
            raise _invalid("--metrics-address", address, str(exc)) from None
