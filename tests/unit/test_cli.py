"""vkbridge.cli and vkbridge.settings: Liqo v1.2's virtual-kubelet flags, with pflag syntax.

The Go value parsers themselves (vkbridge.goflags) are tested in test_goflags.py.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import fields
from pathlib import Path
from typing import Any

import pytest

from vkbridge import cli
from vkbridge.cli import FLAGS, IGNORED_FLAGS, UNIMPLEMENTED_FLAGS, UsageError, main, parse_args
from vkbridge.cli.values import convert
from vkbridge.goflags import parse_go_duration
from vkbridge.settings import Settings

REQUIRED = [
    "--foreign-cluster-id=c0123456789ab",
    "--foreign-kubeconfig-secret-name=kubeconfig-resourceslice-x",
]
REPO = Path(__file__).resolve().parents[2]


def parse(*args: str, env: dict[str, str] | None = None, required: bool = True) -> Settings:
    return parse_args([*(REQUIRED if required else []), *args], env or {})


def usage_error(*args: str, env: dict[str, str] | None = None) -> str:
    with pytest.raises(UsageError) as info:
        parse(*args, env=env)
    message = str(info.value)
    assert "\n" not in message
    return message


def invalid_value_problem(arg: str) -> str:
    """Why ``--flag=value`` is refused, after the prefix that names the flag and the value as given."""
    flag, _, raw = arg.partition("=")
    message = usage_error(arg)
    prefix = f'invalid value "{raw}" for flag {flag}: '
    assert message.startswith(prefix), message
    return message.removeprefix(prefix)


# ---- defaults ----------------------------------------------------------------------------------------------

# LIQO §9 (v1.2.0 defaults), written out independently of settings.py.
LIQO_DEFAULTS: dict[str, Any] = {
    "home_kubeconfig": "",
    "nodename": "virtual-kubelet",
    "tenant_namespace": "default",
    "liqo_namespace": "liqo",
    "resync_period": 10 * 3600.0,
    "home_cluster_id": "",
    "disable_ip_reflection": False,
    "local_podcidr": (),
    "node_ip": "",
    "certificate_type": "kubelet",
    "listen_port": 10250,
    "enable_profiling": False,
    "pod_reflection_workers": 10,
    "service_reflection_workers": 3,
    "endpointslice_reflection_workers": 10,
    "ingress_reflection_workers": 3,
    "configmap_reflection_workers": 3,
    "secret_reflection_workers": 3,
    "serviceaccount_reflection_workers": 3,
    "persistentvolumeclaim_reflection_workers": 3,
    "event_reflection_workers": 3,
    "service_reflection_type": "DenyList",
    "ingress_reflection_type": "DenyList",
    "configmap_reflection_type": "DenyList",
    "secret_reflection_type": "DenyList",
    "event_reflection_type": "DenyList",
    "node_lease_duration": 40.0,
    "node_ping_interval": 10.0,
    "node_ping_timeout": 1.0,
    "node_check_network": True,
    "node_extra_annotations": {},
    "node_extra_labels": {},
    "enable_apiserver_support": False,
    "enable_storage": False,
    "virtual_storage_class_name": "liqo",
    "remote_real_storage_class_name": "",
    "enable_ingress": False,
    "remote_real_ingress_class_name": "",
    "enable_load_balancer": False,
    "remote_real_load_balancer_class_name": "",
    "metrics_enabled": False,
    "metrics_address": ":8082",
    "home_api_server_host": "",
    "home_api_server_port": "",
    "create_node": True,
    "vk_lease_enabled": True,
    "vk_lease_duration": 15.0,
    "vk_lease_renew_interval": 10.0,
    "vk_lease_retry_period": 5.0,
    "client_timeout": 0.0,
    "client_qps": 100,
    "client_max_burst": 100,
}
OWN_DEFAULTS: dict[str, Any] = {
    "log_format": "text",
    "verbosity": 0,
    "cert_renew_fraction": 2 / 3,
    "node_status_interval": 60.0,
    "node_lease_renew_interval": 10.0,  # node_lease_duration / 4
    "pod_name": "",
    "pod_namespace": "default",  # the tenant namespace
    "virtual_node_name": "virtual-kubelet",  # the node name
}


def test_defaults_equal_liqo() -> None:
    settings = parse()
    for name, expected in {**LIQO_DEFAULTS, **OWN_DEFAULTS}.items():
        assert getattr(settings, name) == expected, name
    assert settings.warnings == () and settings.ignored_flags == ()


def test_every_settings_field_is_covered() -> None:
    from_flags = {spec.dest for spec in FLAGS if spec.dest}
    from_env = {"pod_name", "pod_namespace", "virtual_node_name"}
    outcome = {"ignored_flags", "warnings"}
    assert {f.name for f in fields(Settings)} == from_flags | from_env | outcome
    assert set(LIQO_DEFAULTS) | {"foreign_cluster_id", "foreign_kubeconfig_secret_name"} <= from_flags
    assert set(UNIMPLEMENTED_FLAGS) <= {spec.name for spec in FLAGS}


def test_settings_built_directly_fill_derived_values() -> None:
    s = Settings(node_lease_duration=8.0, tenant_namespace="t", nodename="n")
    assert (s.node_lease_renew_interval, s.pod_namespace, s.virtual_node_name) == (2.0, "t", "n")
    with pytest.raises(AttributeError):
        s.nodename = "x"  # type: ignore[misc]


# ---- a real Liqo v1.2 argument vector ----------------------------------------------------------------------

# As pkg/vkMachinery/forge/forge.go (v1.2.0) writes it, with the VkOptionsTemplate from the Helm chart
# (reflectorsConfig, extraArgs --enable-apiserver-support=true, metrics on :5872) and the virtualnode
# webhook's --foreign-kubeconfig-secret-name, --create-node and --node-check-network; $(POD_IP) expanded.
LIQO_ARGS = [
    "--foreign-cluster-id=c0123456789ab",
    "--nodename=c0123456789ab",
    "--node-ip=10.244.1.7",
    "--tenant-namespace=liqo-tenant-c0123456789ab",
    "--liqo-namespace=liqo",
    "--home-cluster-id=c-1a2b3c4d",
    "--local-podcidr=10.244.0.0/16",
    "--pod-reflection-workers=10",
    "--service-reflection-workers=3",
    "--endpointslice-reflection-workers=10",
    "--ingress-reflection-workers=3",
    "--configmap-reflection-workers=3",
    "--secret-reflection-workers=3",
    "--serviceaccount-reflection-workers=3",
    "--persistentvolumeclaim-reflection-workers=3",
    "--event-reflection-workers=3",
    "--service-reflection-type=DenyList",
    "--ingress-reflection-type=DenyList",
    "--configmap-reflection-type=DenyList",
    "--secret-reflection-type=DenyList",
    "--event-reflection-type=DenyList",
    "--node-extra-labels=multicloud.io/pool=c0123456789ab,liqo.io/provider=extend",
    "--enable-apiserver-support=true",
    "--metrics-enabled=true",
    "--metrics-address=:5872",
    "--foreign-kubeconfig-secret-name=kubeconfig-resourceslice-c0123456789ab",
    "--create-node=true",
    "--node-check-network=false",
]
LIQO_ENV = {
    "POD_IP": "10.244.1.7",
    "POD_NAME": "vk-c0123456789ab-5d9c7b8f6-abcde",
    "POD_NAMESPACE": "liqo-tenant-c0123456789ab",
    "VIRTUALNODE_NAME": "c0123456789ab",
    "KUBERNETES_SERVICE_PORT": "443",
}


def test_real_liqo_argument_vector() -> None:
    s = parse_args(LIQO_ARGS, LIQO_ENV)
    assert s.foreign_cluster_id == s.nodename == s.virtual_node_name == "c0123456789ab"
    assert s.home_cluster_id == "c-1a2b3c4d"
    assert s.tenant_namespace == s.pod_namespace == "liqo-tenant-c0123456789ab"
    assert s.foreign_kubeconfig_secret_name == "kubeconfig-resourceslice-c0123456789ab"
    assert s.node_ip == "10.244.1.7"
    assert s.pod_name == "vk-c0123456789ab-5d9c7b8f6-abcde"
    assert s.local_podcidr == ("10.244.0.0/16",)
    assert s.node_extra_labels == {"multicloud.io/pool": "c0123456789ab", "liqo.io/provider": "extend"}
    assert (s.enable_apiserver_support, s.metrics_enabled, s.create_node) == (True, True, True)
    assert (s.node_check_network, s.metrics_address) == (False, ":5872")
    assert s.ignored_flags == (
        "liqo-namespace",
        "local-podcidr",
        "service-reflection-workers",
        "endpointslice-reflection-workers",
        "ingress-reflection-workers",
        "serviceaccount-reflection-workers",
        "persistentvolumeclaim-reflection-workers",
        "service-reflection-type",
        "ingress-reflection-type",
        "event-reflection-type",
        "enable-apiserver-support",
        "node-check-network",
    )
    assert s.warnings == ()  # each is named in the one INFO line (test_main_...)


def test_liqo_variants_storage_bare_bools_and_metrics_off() -> None:
    s = parse(
        "--enable-storage",
        "--remote-real-storage-class-name=standard",
        "--disable-ip-reflection",
        "--metrics-enabled=false",
        "--certificate-type=aws",
        "--klog.v=4",
        "--klog.logtostderr",
        "--klog.log_file_max_size=0x10",
    )
    assert (s.enable_storage, s.remote_real_storage_class_name) == (True, "standard")
    assert (s.disable_ip_reflection, s.metrics_enabled, s.certificate_type, s.verbosity) == (
        True,
        False,
        "aws",
        4,
    )
    assert s.ignored_flags == (
        "enable-storage",
        "remote-real-storage-class-name",
        "klog.logtostderr",
        "klog.log_file_max_size",
    )
    assert s.warnings == (
        "flag --enable-storage=true asks for what vkbridge does not do, ignored: storage reflection is not "
        "implemented",
    )


def test_an_ignored_flag_is_named_once_and_judged_on_its_last_value() -> None:
    s = parse("--enable-ingress", "--enable-ingress=false", "--service-reflection-workers", "0")
    assert s.ignored_flags == ("enable-ingress", "service-reflection-workers")
    assert s.warnings == ()
    s = parse("--enable-ingress=false", "--enable-ingress", "--enable-ingress")
    assert s.ignored_flags == ("enable-ingress",) and len(s.warnings) == 1


#: Per ignored flag of Liqo v1.2: a value that stays quiet (Liqo's default or an off switch) and, where
#: one exists, a value that asks for what vkbridge does not do (one WARNING).
_QUIET_AND_ASKING: dict[str, tuple[str, str | None]] = {
    "enable-apiserver-support": ("true", None),
    "enable-profiling": ("false", "true"),
    "liqo-namespace": ("liqo", None),
    "resync-period": ("10h", None),
    "node-check-network": ("false", "true"),
    "serviceaccount-reflection-workers": ("3", None),
    "event-reflection-type": ("DenyList", "AllowList"),
    "home-api-server-host": ("", "10.0.0.1"),
    "home-api-server-port": ("", "6443"),
    **{f"{r}-reflection-workers": ("3", None) for r in ("service", "ingress", "persistentvolumeclaim")},
    "endpointslice-reflection-workers": ("10", None),
    "service-reflection-type": ("DenyList", None),
    "ingress-reflection-type": ("AllowList", None),
    "local-podcidr": ("10.244.0.0/16", None),
    "enable-storage": ("false", "true"),
    "virtual-storage-class-name": ("liqo", None),
    "remote-real-storage-class-name": ("standard", None),
    "enable-ingress": ("false", "true"),
    "remote-real-ingress-class-name": ("nginx", None),
    "enable-load-balancer": ("false", "true"),
    "remote-real-load-balancer-class-name": ("lb", None),
    "klog.log_dir": ("", "/var/log"),
    "klog.log_file": ("", "/var/log/vk.log"),
}


@pytest.mark.parametrize("name", sorted(n for n, row in IGNORED_FLAGS.items() if not row.newer))
def test_every_ignored_liqo_v1_2_flag_is_quiet_unless_its_value_asks_for_what_vkbridge_does_not_do(
    name: str,
) -> None:
    spec = cli.FLAGS_BY_NAME[name]
    default = {"bool": "false", "uint": "0", "string": "x"}.get(spec.kind, "1")
    quiet, asking = _QUIET_AND_ASKING.get(name, (default, None))
    s = parse(f"--{name}={quiet}")
    assert (s.ignored_flags, s.warnings) == ((name,), ())
    if asking is not None:
        s = parse(f"--{name}={asking}")
        assert s.ignored_flags == (name,)
        assert s.warnings == (
            f"flag --{name}={asking} asks for what vkbridge does not do, ignored: {UNIMPLEMENTED_FLAGS[name]}",
        )
    else:
        assert not IGNORED_FLAGS[name].asks(convert(spec, quiet))


def test_flags_of_newer_liqo_releases_are_accepted_with_one_warning_each() -> None:
    newer = {name: row for name, row in IGNORED_FLAGS.items() if row.newer}
    assert {"resourceslice-reflection-workers", "resourceclaim-reflection-workers"} <= set(newer)
    args = [f"--{name}={'3' if row.kind == 'uint' else '10.0.0.0/8'}" for name, row in newer.items()]
    s = parse(*args, *args)  # given twice: still one warning each
    assert s.ignored_flags == tuple(newer)
    assert s.warnings == tuple(
        f"flag --{name} of a newer Liqo release ({row.newer}), ignored: {row.reason}"
        for name, row in newer.items()
    )
    # Liqo's current chart passes them on the same line as v1.2's arguments.
    s = parse_args(
        [*LIQO_ARGS, "--resourceslice-reflection-workers=3", "--resourceclaim-reflection-workers=3"], LIQO_ENV
    )
    assert [w.split(" of ")[0] for w in s.warnings] == [
        "flag --resourceslice-reflection-workers",
        "flag --resourceclaim-reflection-workers",
    ]


@pytest.mark.parametrize(
    "flag", ["--frobnicate", "--resourcequota-reflection-workers=3", "--reflect-everything"]
)
def test_an_unknown_flag_of_no_liqo_release_exits_2(flag: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*REQUIRED, flag]) == 2
    name = flag.partition("=")[0]
    assert capsys.readouterr().err.splitlines() == [f"vkbridge: unknown flag: {name}"]


# ---- pflag syntax ------------------------------------------------------------------------------------------


def test_space_separated_values_and_last_one_wins() -> None:
    s = parse("--nodename", "a", "--nodename=b", "--listen-port", "8443", "--metrics-address", ":1")
    assert (s.nodename, s.listen_port, s.metrics_address) == ("b", 8443, ":1")


def test_a_value_may_start_with_a_dash_when_separate() -> None:
    assert parse("--virtual-storage-class-name", "-odd-").virtual_storage_class_name == "-odd-"


def test_lists_append_and_split_like_csv() -> None:
    s = parse(
        "--local-podcidr=10.0.0.0/8,192.168.0.0/16", "--local-podcidr", "172.16.0.0/12", "--local-podcidr="
    )
    assert s.local_podcidr == ("10.0.0.0/8", "192.168.0.0/16", "172.16.0.0/12")
    assert parse('--remote-pod-cidr="a,b",c').remote_pod_cidr == ("a,b", "c")


def test_maps_merge() -> None:
    s = parse(
        "--node-extra-annotations=a=1,b=2", "--node-extra-annotations=b=3,c=x=y", "--node-extra-labels="
    )
    assert s.node_extra_annotations == {"a": "1", "b": "3", "c": "x=y"}
    assert s.node_extra_labels == {}


@pytest.mark.parametrize(
    ("arg", "expected"),
    [
        ("--create-node", True),
        ("--create-node=true", True),
        ("--create-node=false", False),
        ("--create-node=1", True),
        ("--create-node=0", False),
        ("--create-node=T", True),
        ("--create-node=F", False),
        ("--create-node=TRUE", True),
        ("--create-node=False", False),
    ],
)
def test_go_booleans(arg: str, expected: bool) -> None:
    assert parse(arg).create_node is expected


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--create-node", "false"],
            "unexpected argument \"false\" (a boolean flag takes its value after '=': --create-node=false)",
        ),
        (["extra"], 'unexpected argument "extra"'),
        (["--", "x"], 'unexpected argument "x"'),
        (["--nosuch"], "unknown flag: --nosuch"),
        (["--nosuch=1"], "unknown flag: --nosuch"),
        (["--klog.nosuch=1"], "unknown flag: --klog.nosuch"),
        (["--v"], "flag needs an argument: --v"),
        (["-nodename=x"], "unknown shorthand flag: 'n' in -nodename=x"),
        (["---nodename=x"], "bad flag syntax: ---nodename=x"),
        (["--=x"], "bad flag syntax: --=x"),
        (["--nodename"], "flag needs an argument: --nodename"),
        (["-v"], "flag needs an argument: -v"),
    ],
)
def test_syntax_errors(args: list[str], message: str) -> None:
    assert usage_error(*args).startswith(message)


def test_the_double_dash_alone_is_fine() -> None:
    assert parse("--").nodename == "virtual-kubelet"


# ---- values ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("40s", 40.0),
        ("1m30s", 90.0),
        ("10h", 36000.0),
        ("500ms", 0.5),
        ("1.5h", 5400.0),
        ("1h1m1s1ms1us1ns", 3661.001001001),
        (".5s", 0.5),
        ("5.s", 5.0),
        ("1µs", 1e-6),
        ("1μs", 1e-6),
        ("0", 0.0),
        ("+0", 0.0),
        ("0s", 0.0),
        ("2562047h47m16.854775807s", 9223372036.854775807),
    ],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds, abs=1e-12)
    assert parse(f"--resync-period={text}").resync_period == pytest.approx(seconds, abs=1e-12)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("40", "missing unit in duration"),
        ("1x", 'unknown unit "x" in duration'),
        ("", "invalid duration"),
        ("s", "invalid duration"),
        (".s", "invalid duration"),
        ("1 s", 'unknown unit " s" in duration'),
        ("1e3s", 'unknown unit "e" in duration'),
        ("2562047h47m16.854775808s", "invalid duration"),
        ("-1s", "must not be negative"),
    ],
)
def test_bad_durations_exit_naming_the_flag(text: str, problem: str) -> None:
    assert invalid_value_problem(f"--node-ping-interval={text}").startswith(problem)


@pytest.mark.parametrize(
    "flag",
    [
        "node-lease-duration",
        "node-ping-timeout",
        "node-status-interval",
        "vk-lease-duration",
        "vk-lease-renew-interval",
        "vk-lease-retry-period",
        "node-lease-renew-interval",
    ],
)
def test_durations_that_must_be_positive(flag: str) -> None:
    assert invalid_value_problem(f"--{flag}=0s") == "must be positive"


def test_durations_where_zero_means_off() -> None:
    s = parse("--node-ping-interval=0", "--client-timeout=0s", "--resync-period=0")
    assert (s.node_ping_interval, s.client_timeout, s.resync_period) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize(
    ("arg", "field", "value"),
    [
        ("--client-qps=0x10", "client_qps", 16),
        ("--client-qps=010", "client_qps", 8),
        ("--client-qps=0b11", "client_qps", 3),
        ("--client-qps=1_000", "client_qps", 1000),
        ("--client-max-burst=18446744073709551615", "client_max_burst", 2**64 - 1),
        ("--pod-reflection-workers=0", "pod_reflection_workers", 0),
        ("--listen-port=65535", "listen_port", 65535),
        ("--listen-port=0x2805", "listen_port", 10245),
    ],
)
def test_go_unsigned_integers(arg: str, field: str, value: int) -> None:
    assert getattr(parse(arg), field) == value


LABEL_CHARS = "(lowercase letters, digits and '-', at most 63 characters)"
SUBDOMAIN_CHARS = "(lowercase letters, digits, '-' and '.')"


@pytest.mark.parametrize(
    ("arg", "problem"),
    [
        # numbers
        ("--listen-port=65536", "out of range (maximum 65535)"),
        ("--listen-port=-1", "not an unsigned integer"),
        ("--listen-port=", "not an unsigned integer"),
        ("--listen-port=http", "not an unsigned integer"),
        ("--client-qps=1.5", "not an unsigned integer"),
        ("--client-qps=+1", "not an unsigned integer"),
        ("--client-qps=1__0", "not an unsigned integer"),
        ("--client-qps=18446744073709551616", "out of range (maximum 18446744073709551615)"),
        ("--pod-reflection-workers=ten", "not an unsigned integer"),
        ("--event-reflection-workers=08", "not an unsigned integer"),
        # enums
        ("--certificate-type=Kubelet", "must be one of kubelet, aws, self-signed"),
        ("--certificate-type=", "must be one of kubelet, aws, self-signed"),
        ("--configmap-reflection-type=denylist", "must be one of DenyList, AllowList"),
        ("--event-reflection-type=None", "must be one of DenyList, AllowList"),
        ("--log-format=yaml", "must be one of text, json"),
        ("--logging-format=yaml", "must be one of text, json"),
        ("--create-node=yes", "not a boolean (use true or false)"),
        ("--create-node=", "not a boolean (use true or false)"),
        # names
        ("--nodename=Bad_Name", f"must be a DNS-1123 subdomain {SUBDOMAIN_CHARS}"),
        ("--tenant-namespace=", f"must be a DNS-1123 label {LABEL_CHARS}"),
        ("--foreign-cluster-id=C0", f"must be a cluster ID, a DNS-1123 label {LABEL_CHARS}"),
        ("--home-cluster-id=a.b", f"must be a cluster ID, a DNS-1123 label {LABEL_CHARS}"),
        # maps
        ("--node-extra-labels=a=b,c", "'c' has no '=' (use key=value,key2=value2)"),
        ("--node-extra-labels==v", "label key '' is not a valid qualified name"),
        ("--node-extra-labels=a=b c", "label value 'b c' of 'a' is not valid"),
        ("--node-extra-labels=Bad/k=v", "label key 'Bad/k': the prefix must be a DNS-1123 subdomain"),
        ("--node-extra-annotations=novalue", "'novalue' has no '=' (use key=value,key2=value2)"),
        ("--node-extra-annotations=-k=v", "annotation key '-k' is not a valid qualified name"),
        # others
        ("--cert-renew-fraction=1", "must be between 0 and 1, exclusive"),
        ("--cert-renew-fraction=0", "must be between 0 and 1, exclusive"),
        ("--cert-renew-fraction=two thirds", "not a number (use 2/3 or 0.66)"),
        ("--cert-renew-fraction=1/0", "not a number (use 2/3 or 0.66)"),
        ("--home-api-server-port=0", "must be a port number (1-65535)"),
        ("--home-api-server-port=https", "must be a port number (1-65535)"),
        ("-v=-1", "must not be negative"),
        ("--klog.v=x", "not a number"),
    ],
)
def test_bad_values_exit_naming_the_flag_the_value_and_the_problem(arg: str, problem: str) -> None:
    assert invalid_value_problem(arg) == problem


@pytest.mark.parametrize("ip", ["10.0.0.1", "::1", "2001:db8::7", "::ffff:10.0.0.1", "0.0.0.0"])
def test_node_ip(ip: str) -> None:
    assert parse(f"--node-ip={ip}").node_ip == ip


@pytest.mark.parametrize(
    "ip", ["notanip", "010.0.0.1", "1.2.3", "256.0.0.1", "fe80::1%eth0", "$(POD_IP)", "[::1]"]
)
def test_bad_node_ip(ip: str) -> None:
    assert invalid_value_problem(f"--node-ip={ip}") == "not an IP address"


def test_annotation_values_are_free_text() -> None:
    assert parse("--node-extra-annotations=example.com/note=a b:c").node_extra_annotations == {
        "example.com/note": "a b:c"
    }


def test_cert_renew_fraction_forms() -> None:
    assert parse("--cert-renew-fraction=3/4").cert_renew_fraction == 0.75
    assert parse("--cert-renew-fraction=0.5").cert_renew_fraction == 0.5


@pytest.mark.parametrize(
    ("args", "verbosity"),
    [(["-v", "4"], 4), (["-v=5"], 5), (["-v6"], 6), (["--klog.v=3"], 3), (["-v", "1", "--klog.v=7"], 7)],
)
def test_verbosity(args: list[str], verbosity: int) -> None:
    assert parse(*args).verbosity == verbosity


@pytest.mark.parametrize(
    ("args", "verbosity"),
    [(["--v=2"], 2), (["--v", "5"], 5), (["--v=3", "-v", "1"], 1), (["--klog.v=7", "--v=4"], 4)],
)
def test_verbosity_takes_kubernetes_double_dash_v(args: list[str], verbosity: int) -> None:
    assert parse(*args).verbosity == verbosity


@pytest.mark.parametrize(
    ("args", "fmt"),
    [
        (["--logging-format=json"], "json"),
        (["--logging-format", "json"], "json"),
        (["--logging-format=json", "--log-format=text"], "text"),
        (["--log-format=text", "--logging-format=json"], "json"),
    ],
)
def test_logging_format_is_an_alias_of_log_format_last_wins(args: list[str], fmt: str) -> None:
    assert parse(*args).log_format == fmt


def test_help_shows_kubernetes_style_logging_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--logging-format=text|json" in help_text and "-v, --v LEVEL" in help_text


def test_metrics_address_is_checked_when_metrics_are_on() -> None:
    assert parse("--metrics-address=nonsense").metrics_address == "nonsense"
    assert parse("--metrics-enabled", "--metrics-address=[::]:9090").metrics_address == "[::]:9090"
    assert usage_error("--metrics-enabled", "--metrics-address=nonsense").startswith(
        'invalid value "nonsense" for flag --metrics-address: must be [host]:port'
    )
    assert usage_error("--metrics-enabled", "--metrics-address=::1:80").startswith(
        'invalid value "::1:80" for flag --metrics-address: an IPv6 host must be in brackets'
    )


def test_lease_timings_must_make_sense_together() -> None:
    assert parse("--node-lease-duration=8s").node_lease_renew_interval == 2.0
    assert parse("--node-lease-renew-interval=3s").node_lease_renew_interval == 3.0
    assert usage_error("--node-lease-renew-interval=40s") == (
        'invalid value "40s" for flag --node-lease-renew-interval: must be shorter than --node-lease-duration (40s)'
    )
    assert usage_error("--vk-lease-renew-interval=15s").startswith(
        'invalid value "15s" for flag --vk-lease-renew-interval: --vk-lease-duration must be longer'
    )
    assert usage_error("--vk-lease-duration=10s").startswith(
        'invalid value "10s" for flag --vk-lease-duration:'
    )
    assert usage_error("--vk-lease-retry-period=9s").startswith(
        'invalid value "9s" for flag --vk-lease-retry-period: --vk-lease-renew-interval must exceed 1.2 x'
    )
    s = parse("--vk-lease-duration=3s", "--vk-lease-renew-interval=2s", "--vk-lease-retry-period=1s")
    assert (s.vk_lease_duration, s.vk_lease_renew_interval, s.vk_lease_retry_period) == (3.0, 2.0, 1.0)


# ---- required flags and environment ------------------------------------------------------------------------


def test_required_flags_for_run_only() -> None:
    with pytest.raises(UsageError, match=r"^missing required flag --foreign-cluster-id$"):
        parse_args(["--foreign-kubeconfig-secret-name=s"], {})
    with pytest.raises(UsageError, match=r"^missing required flag --foreign-kubeconfig-secret-name$"):
        parse_args(["--foreign-cluster-id=c1"], {})
    with pytest.raises(UsageError, match=r"^missing required flag --foreign-cluster-id$"):
        parse_args(["--foreign-cluster-id=", "--foreign-kubeconfig-secret-name=s"], {})
    assert parse_args([], {}, command="doctor").foreign_cluster_id == ""


def test_environment() -> None:
    env = {
        "POD_IP": "10.1.2.3",
        "KUBECONFIG": "/etc/kube/config",
        "POD_NAME": "vk-x-1",
        "POD_NAMESPACE": "liqo-tenant-x",
        "VIRTUALNODE_NAME": "virtual-kubelet",
    }
    s = parse(env=env)
    assert (s.node_ip, s.home_kubeconfig, s.pod_name, s.pod_namespace) == (
        "10.1.2.3",
        "/etc/kube/config",
        "vk-x-1",
        "liqo-tenant-x",
    )
    assert s.virtual_node_name == "virtual-kubelet" and s.warnings == ()
    flags_win = parse("--node-ip=10.9.9.9", "--home-kubeconfig=", env=env)
    assert (flags_win.node_ip, flags_win.home_kubeconfig) == ("10.9.9.9", "")
    assert usage_error(env={"POD_IP": "pending"}) == (
        'invalid value "pending" for flag --node-ip: not an IP address (from $POD_IP)'
    )


def test_virtualnode_name_is_not_the_node_name_default() -> None:
    s = parse(env={"VIRTUALNODE_NAME": "c0123456789ab"})
    assert s.nodename == "virtual-kubelet"  # Liqo's default; Liqo always passes --nodename anyway
    assert s.virtual_node_name == "c0123456789ab"
    assert s.warnings == (
        "VIRTUALNODE_NAME (c0123456789ab) differs from --nodename (virtual-kubelet): the Node is "
        "virtual-kubelet, the VirtualNode read is c0123456789ab",
    )


# ---- main() ------------------------------------------------------------------------------------------------


@pytest.fixture
def root_logging() -> Iterator[None]:
    """main() installs the process's log handler on the root logger: put pytest's back afterwards."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


@pytest.fixture
def fake_entries(monkeypatch: pytest.MonkeyPatch, root_logging: None) -> list[tuple[str, Settings]]:
    """`vkbridge.app.run` and `vkbridge.doctor.run` record their call instead of starting anything."""
    from vkbridge import app, doctor

    calls: list[tuple[str, Settings]] = []

    def entry(name: str, code: int) -> Callable[[Settings], int]:
        def run(settings: Settings) -> int:
            calls.append((name, settings))
            return code

        return run

    monkeypatch.setattr(app, "run", entry("app", 7))
    monkeypatch.setattr(doctor, "run", entry("doctor", 3))
    return calls


def test_main_runs_the_app_with_the_settings_and_logs_each_warning_once(
    fake_entries: list[tuple[str, Settings]], capsys: pytest.CaptureFixture[str]
) -> None:
    env_free = [a for a in LIQO_ARGS]
    assert main(["run", *env_free, "--enable-profiling"]) == 7
    assert main(env_free) == 7  # `run` is the default command
    assert [(name, s.nodename) for name, s in fake_entries] == [("app", "c0123456789ab")] * 2
    err = capsys.readouterr().err
    assert err.count("flag --enable-profiling=true asks for what vkbridge does not do") == 1
    assert err.count("Liqo flags accepted and ignored") == 2  # once per run


def test_a_start_with_liqos_chart_arguments_logs_no_warning(
    fake_entries: list[tuple[str, Settings]],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for var, value in LIQO_ENV.items():
        monkeypatch.setenv(var, value)
    assert main([*LIQO_ARGS, "--logging-format=json"]) == 7
    lines = [json.loads(line) for line in capsys.readouterr().err.splitlines()]
    assert [line["severity"] for line in lines] == ["INFO"]
    ignored = fake_entries[0][1].ignored_flags
    assert "enable-apiserver-support" in ignored and len(ignored) == 12
    assert lines[0]["msg"].endswith(": " + ", ".join(f"--{name}" for name in ignored))


@pytest.mark.parametrize(
    "args",
    [
        ["--logging-format=json", "--listen-port=99999"],
        ["--listen-port=99999", "--log-format", "json"],
        ["--logging-format=json", "--frobnicate"],
    ],
)
def test_a_fatal_configuration_error_is_one_json_line_with_exit_2(
    args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*REQUIRED, *args]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1
    line = json.loads(lines[0])
    assert (line["severity"], line["logger"]) == ("ERROR", "vkbridge.cli")
    assert line["msg"].startswith("vkbridge: ") and "Traceback" not in out.err
    assert ("--listen-port" if "--listen-port=99999" in args else "--frobnicate") in line["msg"]
    assert main(["--logging-format=json", "--nodename=n"]) == 2  # a missing required flag too
    missing = capsys.readouterr().err.splitlines()
    assert len(missing) == 1 and json.loads(missing[0])["msg"].startswith("vkbridge: missing required flag")


def test_a_fatal_startup_error_is_one_log_line_with_exit_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from vkbridge import app
    from vkbridge.logs import setup_logging

    async def refuse(self: app.VirtualKubelet) -> None:
        raise app.StartupError("cannot use the consumer kubeconfig: /nowhere: no such file")

    monkeypatch.setattr(app.VirtualKubelet, "run", refuse)
    setup_logging(0, "json")
    assert app.run(parse()) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1
    assert json.loads(lines[0])["msg"] == "cannot use the consumer kubeconfig: /nowhere: no such file"


def test_main_doctor_runs_the_doctor_with_the_same_flags(fake_entries: list[tuple[str, Settings]]) -> None:
    assert main(["doctor", "--nodename=n1"]) == 3  # no required flags for doctor
    assert [(name, s.nodename) for name, s in fake_entries] == [("doctor", "n1")]


@pytest.mark.parametrize(
    "args",
    [
        ["--node-ip=notanip"],
        ["--listen-port=99999"],
        ["--node-lease-duration=forty"],
        ["--certificate-type=acme"],
        ["--frobnicate"],
        ["--create-node", "false"],
    ],
)
def test_main_bad_values_exit_2_with_one_line(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*REQUIRED, *args]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("vkbridge: ")
    name = args[0].split("=")[0]
    assert name in lines[0]


def test_main_help_version_and_doctor(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    assert help_text.startswith("usage: vkbridge [run] [flags]")
    for spec in FLAGS:
        assert (f"--{spec.name}" if spec.name != "v" else "-v LEVEL") in help_text
    flat = " ".join(help_text.split())
    assert "(default 10h0m0s)" in flat and "(default virtual-kubelet)" in flat
    assert main(["run", "-h"]) == 0
    assert "Liqo flags accepted and ignored" in capsys.readouterr().out
    assert main(["version"]) == 0
    assert capsys.readouterr().out.startswith("vkbridge ")
    assert main(["version", "extra"]) == 2
    assert main(["doctor", "--help"]) == 0
    assert "usage:" in capsys.readouterr().out
    assert main(["doctor", "--node-ip=x"]) == 2


@pytest.mark.parametrize("command", ["run", "doctor"])
def test_nodename_over_63_characters_exits_2_naming_the_flag(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 15 item 20: a 65-character node name used to crash start-up building the serving CSR."""
    name = "n" * 65
    assert main([command, *REQUIRED, f"--nodename={name}"]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert lines == [
        f'vkbridge: invalid value "{name}" for flag --nodename: is 65 characters; at most 63, as it is also '
        "a label value (offloading.liqo.io/nodename)"
    ]
    assert parse(f"--nodename={'n' * 63}").nodename == "n" * 63
    assert "--nodename" in usage_error(f"--nodename={'a.' * 40}b")


def test_python_dash_m_exits_2_for_real() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "vkbridge", "--node-ip=notanip", *REQUIRED],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr == 'vkbridge: invalid value "notanip" for flag --node-ip: not an IP address\n'
    assert proc.stdout == ""
