"""One flag value, from its Go text to its typed Settings value: syntax (`vkbridge.goflags`) and checks.

Every function raises ValueError saying what is wrong; `vkbridge.cli.parse` adds the flag and the value.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping
from fractions import Fraction
from typing import Any, Final

from vkbridge.cli.flags import FlagSpec
from vkbridge.goflags import (
    parse_go_bool,
    parse_go_duration,
    parse_go_int,
    parse_go_uint,
    parse_string_map,
    parse_string_slice,
)

__all__ = ["check_host_port", "check_ip", "convert"]

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


def check_host_port(value: str) -> None:
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


def check_ip(raw: str) -> str:
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


def convert(spec: FlagSpec, raw: str) -> Any:
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
        value = check_ip(raw)
    else:  # fraction
        value = _fraction(raw)
    validator = _VALIDATORS.get(spec.dest or "")
    if validator is not None:
        validator(value)
    return value
