"""deploy/vkoptionstemplate.yaml through Liqo v1.2.0's generation rules (e2e/liqo_vkargs.py): the exact
args Liqo's controller-manager would write for Extend's VirtualNode, and for richer VirtualNodes, parse
with vkbridge's CLI. tests/integration/test_image_as_pod.py starts the image with them."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from e2e.binaries import REPO
from e2e.liqo_vkargs import forge_vk_args, liqo_vk_args, webhook_mutate_args
from vkbridge.cli import parse_args

SLUG, CONSUMER_ID, POD_IP = "c0123456789ab", "c-1a2b3c4d", "198.19.0.7"
ENV = {"POD_IP": POD_IP, "POD_NAME": f"vk-{SLUG}-5c8d-7xq2z", "POD_NAMESPACE": f"liqo-tenant-{SLUG}",
       "VIRTUALNODE_NAME": SLUG}  # fmt: skip


def template_spec() -> dict[str, Any]:
    doc = yaml.safe_load((REPO / "deploy/vkoptionstemplate.yaml").read_text().replace("__IMAGE__", "img"))
    return dict(doc["spec"])


def extend_virtual_node(**spec: Any) -> dict[str, Any]:
    """The VirtualNode Extend's bundle creates (e2e/bundle.py), plus spec overrides."""
    base = {"clusterID": SLUG, "createNode": True, "disableNetworkCheck": True,
            "kubeconfigSecretRef": {"name": f"kubeconfig-resourceslice-{SLUG}"}}  # fmt: skip
    return {"metadata": {"name": SLUG, "namespace": f"liqo-tenant-{SLUG}"}, "spec": {**base, **spec}}


def expand(args: list[str]) -> list[str]:
    """The kubelet's $(VAR) expansion of container args."""
    return [re.sub(r"\$\(([A-Za-z_]\w*)\)", lambda m: ENV.get(m.group(1), m.group(0)), a) for a in args]


def test_liqo_args_for_extends_virtual_node_are_the_deployments_and_parse() -> None:
    args = liqo_vk_args(template_spec(), extend_virtual_node(), home_cluster_id=CONSUMER_ID,
                        local_pod_cidrs=["10.52.0.0/14"])  # fmt: skip
    shipped = yaml.safe_load_all((REPO / "deploy/deployment.yaml").read_text())
    deployment = next(d for d in shipped if d and d["kind"] == "Deployment")
    want = [a.replace("__SLUG__", SLUG).replace("__CONSUMER_ID__", CONSUMER_ID)
            .replace("__LOCAL_POD_CIDR__", "10.52.0.0/14")
            for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]]  # fmt: skip
    assert args == want
    settings = parse_args(expand(args), env=ENV)
    assert (settings.nodename, settings.node_ip, settings.home_cluster_id) == (SLUG, POD_IP, CONSUMER_ID)
    assert settings.foreign_kubeconfig_secret_name == f"kubeconfig-resourceslice-{SLUG}"
    assert (settings.create_node, settings.node_check_network) == (True, False)
    assert settings.metrics_enabled is True and settings.metrics_address == ":5872"


def test_liqo_args_for_a_virtual_node_with_classes_labels_and_two_cidrs_parse() -> None:
    spec = {**template_spec(), "nodeExtraLabels": {"tier": "burst", "zone": "eu"},
            "nodeExtraAnnotations": {"example.com/owner": "team-a"}}  # fmt: skip
    vn = extend_virtual_node(
        storageClasses=[{"storageClassName": "slow"}, {"storageClassName": "fast", "default": True}],
        ingressClasses=[{"ingressClassName": "nginx"}],
        loadBalancerClasses=[{"loadBalancerClassName": "lb"}],
    )
    del vn["spec"]["createNode"]  # the webhook defaults it from the template
    args = liqo_vk_args(spec, vn, home_cluster_id=CONSUMER_ID, local_pod_cidrs=["10.52.0.0/14", "fd00::/64"])
    assert args[6:8] == ["--local-podcidr=10.52.0.0/14", "--local-podcidr=fd00::/64"]
    assert args[8:10] == ["--enable-storage", "--remote-real-storage-class-name=fast"]  # the default one
    settings = parse_args(expand(args), env=ENV)
    assert settings.node_extra_labels == {"tier": "burst", "zone": "eu"}
    assert settings.node_extra_annotations == {"example.com/owner": "team-a"}
    assert settings.create_node is True
    assert any("storage reflection is not implemented" in w for w in settings.warnings), settings.warnings


@pytest.mark.parametrize("metrics", [True, False])
def test_liqo_webhook_replaces_forced_args_in_place_and_metrics_toggle_parses(metrics: bool) -> None:
    spec = {**template_spec(), "metricsEnabled": metrics,
            "extraArgs": ["--create-node=false", "--enable-apiserver-support=true"]}  # fmt: skip
    vn = extend_virtual_node()
    forged = forge_vk_args(spec, vn, home_cluster_id=CONSUMER_ID)
    args = webhook_mutate_args(forged, spec, vn)
    assert args.count("--create-node=true") == 1 and "--create-node=false" not in args
    assert args.index("--create-node=true") == forged.index("--create-node=false")  # replaced where it was
    settings = parse_args(expand(args), env=ENV)
    assert settings.metrics_enabled is metrics and settings.create_node is True
