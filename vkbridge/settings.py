"""Process settings: one frozen object built by `vkbridge.cli` (the Go value syntax is `vkbridge.goflags`).

Field defaults are the Liqo v1.2 virtual-kubelet flag defaults (LIQO §9); the dataclass is their single
source. Durations are float seconds, maps are ``dict[str, str]``, repeatable flags are tuples.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal

__all__ = [
    "CERTIFICATE_TYPES",
    "LOG_FORMATS",
    "REFLECTION_TYPES",
    "CertificateType",
    "LogFormat",
    "ReflectionType",
    "Settings",
]

CertificateType = Literal["kubelet", "aws", "self-signed"]
ReflectionType = Literal["DenyList", "AllowList"]
LogFormat = Literal["text", "json"]
CERTIFICATE_TYPES: Final = ("kubelet", "aws", "self-signed")
REFLECTION_TYPES: Final = ("DenyList", "AllowList")
LOG_FORMATS: Final = ("text", "json")


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the process is told at start. Built once by the CLI; tests may build it directly."""

    # Identity and wiring (LIQO §1, §9).
    home_kubeconfig: str = ""  # "" = in-cluster; the CLI defaults it to $KUBECONFIG
    foreign_kubeconfig_secret_name: str = ""  # required for `run`
    nodename: str = "virtual-kubelet"
    tenant_namespace: str = "default"
    liqo_namespace: str = "liqo"
    home_cluster_id: str = ""
    foreign_cluster_id: str = ""  # required for `run`
    resync_period: float = 36000.0  # 10h; 0 disables informer resync

    # Virtual node and kubelet API.
    node_ip: str = ""  # the CLI defaults it to $POD_IP
    listen_port: int = 10250
    certificate_type: CertificateType = "kubelet"
    node_lease_duration: float = 40.0
    node_ping_interval: float = 10.0  # 0 disables the ping
    node_ping_timeout: float = 1.0
    node_check_network: bool = True
    node_extra_labels: dict[str, str] = field(default_factory=dict)
    node_extra_annotations: dict[str, str] = field(default_factory=dict)
    create_node: bool = True

    # Reflection (workers: 0 disables that reflector).
    pod_reflection_workers: int = 10
    service_reflection_workers: int = 3
    endpointslice_reflection_workers: int = 10
    ingress_reflection_workers: int = 3
    configmap_reflection_workers: int = 3
    secret_reflection_workers: int = 3
    serviceaccount_reflection_workers: int = 3
    persistentvolumeclaim_reflection_workers: int = 3
    event_reflection_workers: int = 3
    service_reflection_type: ReflectionType = "DenyList"
    ingress_reflection_type: ReflectionType = "DenyList"
    configmap_reflection_type: ReflectionType = "DenyList"
    secret_reflection_type: ReflectionType = "DenyList"
    event_reflection_type: ReflectionType = "DenyList"
    enable_apiserver_support: bool = False  # Liqo's Helm chart passes true
    disable_ip_reflection: bool = False
    local_podcidr: tuple[str, ...] = ()
    home_api_server_host: str = ""
    home_api_server_port: str = ""

    # API clients (local and remote).
    client_qps: int = 100
    client_max_burst: int = 100
    client_timeout: float = 0.0  # 0 = no timeout

    # Leader elections (per-node blocking one and the shared-resources one).
    vk_lease_enabled: bool = True
    vk_lease_duration: float = 15.0
    vk_lease_renew_interval: float = 10.0
    vk_lease_retry_period: float = 5.0

    # Observability.
    metrics_enabled: bool = False
    metrics_address: str = ":8082"
    health_probe_bind_address: str = ":8081"  # vkbridge's own: /livez, /readyz, /leaderz; "0" disables
    enable_profiling: bool = False

    # Accepted for Liqo compatibility, not implemented (see cli.UNIMPLEMENTED_FLAGS).
    enable_storage: bool = False
    virtual_storage_class_name: str = "liqo"
    remote_real_storage_class_name: str = ""
    enable_ingress: bool = False
    remote_real_ingress_class_name: str = ""
    enable_load_balancer: bool = False
    remote_real_load_balancer_class_name: str = ""
    remote_pod_cidr: tuple[str, ...] = ()  # Liqo after v1.2.0
    remote_pod_cidr_remap: tuple[str, ...] = ()
    remote_external_cidr: tuple[str, ...] = ()
    remote_external_cidr_remap: tuple[str, ...] = ()

    # vkbridge's own.
    log_format: LogFormat = "text"
    verbosity: int = 0  # klog-style V level (-v or --klog.v): see vkbridge.logs.setup_logging
    cert_renew_fraction: float = 2 / 3  # renew the pool client certificate at this fraction of its life
    node_status_interval: float = 60.0
    node_lease_renew_interval: float = 0.0  # 0 = node_lease_duration / 4

    # From the environment (downward API).
    pod_name: str = ""  # $POD_NAME: leader-election identity
    pod_namespace: str = ""  # $POD_NAMESPACE; "" = tenant_namespace
    virtual_node_name: str = ""  # $VIRTUALNODE_NAME: the VirtualNode object; "" = nodename

    # What the parse noticed: the ignored flags given (one INFO line) and the warnings to log.
    ignored_flags: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if self.node_lease_renew_interval == 0.0:
            object.__setattr__(self, "node_lease_renew_interval", self.node_lease_duration / 4)
        if not self.pod_namespace:
            object.__setattr__(self, "pod_namespace", self.tenant_namespace)
        if not self.virtual_node_name:
            object.__setattr__(self, "virtual_node_name", self.nodename)
