"""The virtual-kubelet args Liqo v1.2.0's controller-manager writes for a VirtualNode (pure, no I/O).

Re-stated in Python from Liqo's rules (read, not copied): ``pkg/vkMachinery/forge/forge.go``
``forgeVKContainers`` builds the args from the cluster identities, the VirtualNode's storage / ingress /
load-balancer classes and the VkOptionsTemplate; then the VirtualNode webhook
(``pkg/webhooks/virtualnode/mutate.go``: ``mutateSpec``, ``mutateSecretArg``, ``mutateNodeCreate``,
``mutateNodeCheckNetwork``) defaults ``createNode`` / ``disableNetworkCheck`` from the template and
replaces or appends the kubeconfig Secret, create-node and check-network args. Used to show that what
Liqo would pass parses with vkbridge's CLI (tests/unit/test_liqo_vk_generation.py) and starts the
image (tests/integration/test_image_as_pod.py checks the running pod's args are these).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

#: pkg/virtualKubelet/reflection/resources: Reflectors, then ReflectorsCustomizableType (Liqo's order).
REFLECTORS = ("pod", "service", "endpointslice", "ingress", "configmap", "secret", "serviceaccount",
              "persistentvolumeclaim", "event")  # fmt: skip
TYPED_REFLECTORS = ("service", "ingress", "configmap", "secret", "event")


def _default_class(classes: Sequence[Mapping[str, Any]], key: str) -> str:
    """The class marked default, else the first (Liqo's getDefault*Class)."""
    chosen = next((c for c in classes if c.get("default")), classes[0])
    return str(chosen[key])


def _string_map(values: Mapping[str, str]) -> str:
    """argsutils.StringMap.String: k=v joined by commas (Go map order; any order parses the same)."""
    return ",".join(f"{k}={v}" for k, v in values.items())


def _go_bool(value: bool) -> str:
    return "true" if value else "false"


def _replace_or_append(args: list[str], flag: str, value: str) -> None:
    """The webhook's mutate*Arg: the first arg starting with flag becomes flag=value, else it is appended."""
    arg = f"{flag}={value}"
    for i, have in enumerate(args):
        if have.startswith(flag):
            args[i] = arg
            return
    args.append(arg)


def forge_vk_args(
    template_spec: Mapping[str, Any], virtual_node: Mapping[str, Any], *, home_cluster_id: str,
    liqo_namespace: str = "liqo", local_pod_cidrs: Sequence[str] = (),
) -> list[str]:  # fmt: skip
    """forgeVKContainers' args for a VirtualNode (metadata + spec) and a VkOptionsTemplate spec."""
    meta, vn = virtual_node["metadata"], virtual_node["spec"]
    args = [
        f"--foreign-cluster-id={vn['clusterID']}",
        f"--nodename={meta['name']}",
        "--node-ip=$(POD_IP)",
        f"--tenant-namespace={meta['namespace']}",
        f"--liqo-namespace={liqo_namespace}",
        f"--home-cluster-id={home_cluster_id}",
    ]
    args += [f"--local-podcidr={cidr}" for cidr in local_pod_cidrs]
    for field, enable, flag, key in (
        ("storageClasses", "--enable-storage", "--remote-real-storage-class-name", "storageClassName"),
        ("ingressClasses", "--enable-ingress", "--remote-real-ingress-class-name", "ingressClassName"),
        ("loadBalancerClasses", "--enable-load-balancer", "--remote-real-load-balancer-class-name",
         "loadBalancerClassName"),
    ):  # fmt: skip
        if vn.get(field):
            args += [enable, f"{flag}={_default_class(vn[field], key)}"]
    reflectors = template_spec.get("reflectorsConfig")
    if reflectors is not None:
        args += [f"--{r}-reflection-workers={int(reflectors[r].get('workers') or 0)}"
                 for r in REFLECTORS if r in reflectors]  # fmt: skip
        args += [f"--{r}-reflection-type={reflectors[r].get('type') or ''}"
                 for r in TYPED_REFLECTORS if r in reflectors]  # fmt: skip
    if template_spec.get("nodeExtraAnnotations"):
        args.append(f"--node-extra-annotations={_string_map(template_spec['nodeExtraAnnotations'])}")
    if template_spec.get("nodeExtraLabels"):
        args.append(f"--node-extra-labels={_string_map(template_spec['nodeExtraLabels'])}")
    args += list(template_spec.get("extraArgs") or [])
    metrics = bool(template_spec.get("metricsEnabled"))
    args.append(f"--metrics-enabled={_go_bool(metrics)}")
    if metrics:
        args.append(f"--metrics-address={template_spec.get('metricsAddress', '')}")
    return args


def webhook_mutate_args(args: Sequence[str], template_spec: Mapping[str, Any],
                        virtual_node: Mapping[str, Any]) -> list[str]:  # fmt: skip
    """The VirtualNode webhook's forced args; createNode/disableNetworkCheck default to the template's."""
    vn = virtual_node["spec"]
    create = vn.get("createNode")
    create = bool(template_spec.get("createNode")) if create is None else bool(create)
    no_check = vn.get("disableNetworkCheck")
    no_check = bool(template_spec.get("disableNetworkCheck")) if no_check is None else bool(no_check)
    out = list(args)
    secret = (vn.get("kubeconfigSecretRef") or {}).get("name")
    if secret:
        _replace_or_append(out, "--foreign-kubeconfig-secret-name", secret)
    _replace_or_append(out, "--create-node", _go_bool(create))
    _replace_or_append(out, "--node-check-network", _go_bool(not no_check))
    return out


def liqo_vk_args(
    template_spec: Mapping[str, Any], virtual_node: Mapping[str, Any], *, home_cluster_id: str,
    liqo_namespace: str = "liqo", local_pod_cidrs: Sequence[str] = (),
) -> list[str]:  # fmt: skip
    """The container args of the Deployment ``vk-<name>`` Liqo generates (forge, then the webhook)."""
    args = forge_vk_args(template_spec, virtual_node, home_cluster_id=home_cluster_id,
                         liqo_namespace=liqo_namespace, local_pod_cidrs=local_pod_cidrs)  # fmt: skip
    return webhook_mutate_args(args, template_spec, virtual_node)
