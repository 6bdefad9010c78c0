"""deploy/'s monitoring and Liqo files cannot drift from the code: every metric the Grafana dashboard and
the PodMonitor name is one vkbridge exports, the PodMonitor scrapes the port deploy/deployment.yaml
declares, and deploy/liqo-values.yaml uses only keys Liqo v1.2's chart has."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from vkbridge.metrics import Metrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

#: Keys of Liqo v1.2.0's chart values, taken from deployments/liqo/values.yaml at tag v1.2.0 of
#: github.com/liqotech/liqo (the subset about the virtual kubelet and metrics; names only). A key here
#: is a leaf for this check: what is below it (a map of labels, resources, a list of args) is free.
LIQO_V12_VALUES_KEYS = frozenset(
    {
        "tag",
        "pullPolicy",
        "imagePullSecrets",
        "metrics.enabled",
        "metrics.prometheusOperator.enabled",
        "networking.reflectIPs",
        "offloading.createNode",
        "offloading.disableNetworkCheck",
        "virtualKubelet.replicas",
        "virtualKubelet.image.name",
        "virtualKubelet.image.version",
        "virtualKubelet.extra.annotations",
        "virtualKubelet.extra.labels",
        "virtualKubelet.extra.args",
        "virtualKubelet.extra.resources",
        "virtualKubelet.extra.tolerations",
        "virtualKubelet.virtualNode.extra.annotations",
        "virtualKubelet.virtualNode.extra.labels",
        "virtualKubelet.metrics.port",
        "virtualKubelet.metrics.podMonitor.interval",
        "virtualKubelet.metrics.podMonitor.scrapeTimeout",
        "virtualKubelet.metrics.podMonitor.labels",
    }
)

_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_LABEL_VALUES = re.compile(r"label_values\(\s*([a-zA-Z_:][\w:]*)[^)]*\)")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"(?<![\w:$.])([a-zA-Z_:][\w:]*)(?![\w:]|\s*\()")  # not a function's name
_KEYWORDS = frozenset(
    {"by", "without", "on", "ignoring", "bool", "offset", "and", "or", "unless", "inf", "nan"}
)


# ---- what deploy/ says ---------------------------------------------------------------------------------------


def promql_metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana ``label_values(metric, label)``) reads."""
    names = set(_LABEL_VALUES.findall(expr))
    expr = _LABEL_VALUES.sub(" ", expr)
    expr = _STRING.sub(" ", expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)  # selectors
    expr = re.sub(r"\[[^\]]*\]", " ", expr)  # ranges
    expr = re.sub(r"\$\{?\w+\}?", " ", expr)  # dashboard variables
    expr = _GROUPING.sub(" ", expr)
    return names | {n for n in _IDENT.findall(expr) if n.lower() not in _KEYWORDS}


def _walk(node: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(node, dict):
        for k, v in node.items():
            yield k, v
            yield from _walk(v)
    elif isinstance(node, list):
        for v in node:
            yield from _walk(v)


def dashboard_expressions(dashboard: dict[str, Any]) -> list[str]:
    """Every query of the dashboard: panel targets and templating variables."""
    out = [v for k, v in _walk(dashboard.get("panels", [])) if k == "expr" and isinstance(v, str)]
    for var in dashboard.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            q = var.get("query")
            out.append(q.get("query", "") if isinstance(q, dict) else str(q or ""))
    return out


def dashboard_metrics(dashboard: dict[str, Any]) -> dict[str, str]:
    """metric name -> the first expression that uses it."""
    out: dict[str, str] = {}
    for expr in dashboard_expressions(dashboard):
        for name in promql_metric_names(expr):
            out.setdefault(name, expr)
    return out


def podmonitor_metrics(podmonitor: dict[str, Any]) -> set[str]:
    """Metric names a PodMonitor's metricRelabelings select by ``__name__`` (keep or drop lists)."""
    out: set[str] = set()
    for endpoint in podmonitor["spec"]["podMetricsEndpoints"]:
        for rule in endpoint.get("metricRelabelings", []):
            if rule.get("sourceLabels") == ["__name__"] and "regex" in rule:
                out.update(rule["regex"].strip("()").split("|"))
    return out


def _load_yaml(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _only(kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in _load_yaml(name) if d.get("kind") == kind]
    return doc


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads((DEPLOY / "grafana-dashboard.json").read_text())
    return data


def value_keys(node: Any, prefix: str = "") -> Iterator[str]:
    """Dotted paths of a Helm values tree, stopping at a known key (what is below it is free-form)."""
    if prefix in LIQO_V12_VALUES_KEYS:
        yield prefix
        return
    if not isinstance(node, dict) or not node:
        yield prefix
        return
    for key, child in node.items():
        yield from value_keys(child, f"{prefix}.{key}" if prefix else str(key))


# ---- what the code exports -----------------------------------------------------------------------------------


def exported_series() -> set[str]:
    """Every series name vkbridge's registry can expose, with the suffixes its families' types add."""
    suffixes = {
        "counter": ("_total", "_created"),
        "histogram": ("_bucket", "_count", "_sum", "_created"),
        "summary": ("_count", "_sum", "_created", ""),
        "info": ("_info",),
    }
    out: set[str] = set()
    for family in Metrics().registry.collect():
        out.update(family.name + s for s in suffixes.get(family.type, ("",)))
        out.update(s.name for s in family.samples)
    return out


# ---- the tests -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "names"),
    [
        ('vkbridge_pool_reachable{namespace=~"$namespace", state="Connected"}', {"vkbridge_pool_reachable"}),
        (
            'histogram_quantile(0.99, sum by (name, le) (rate(x_bucket{a=~"b"}[$__rate_interval])))',
            {"x_bucket"},
        ),
        ("a - on (namespace, pod) b", {"a", "b"}),
        ("label_values(vkbridge_build_info, namespace)", {"vkbridge_build_info"}),
        ("sum(rate(c_total[5m])) / 1e3 > bool 0", {"c_total"}),
    ],
)
def test_promql_metric_names(expr: str, names: set[str]) -> None:
    assert promql_metric_names(expr) == names


def test_the_extraction_finds_what_the_dashboard_queries() -> None:
    """Guards the parser: if it stopped finding these, the next test would pass vacuously."""
    found = set(dashboard_metrics(_dashboard()))
    assert {
        "vkbridge_node_ready",
        "vkbridge_reflected_pods",
        "vkbridge_api_requests_total",
        "vkbridge_workqueue_queue_duration_seconds_bucket",
        "process_resident_memory_bytes",
        "vkbridge_serving_certificate_expiry_seconds",
        "vkbridge_build_info",
    } <= found
    assert len(found) >= 15


def test_every_metric_of_the_dashboard_and_podmonitor_is_exported() -> None:
    known = exported_series()
    used = dashboard_metrics(_dashboard())
    used.update(dict.fromkeys(podmonitor_metrics(_only("PodMonitor", "podmonitor.yaml")), "podmonitor.yaml"))
    missing = {name: where for name, where in used.items() if name not in known}
    assert not missing, f"metrics deploy/ queries that vkbridge does not export: {missing}"


def test_podmonitor_scrapes_the_deployment_metrics_port() -> None:
    pm = _only("PodMonitor", "podmonitor.yaml")
    dep = _only("Deployment", "deployment.yaml")
    pod = dep["spec"]["template"]
    (ctr,) = pod["spec"]["containers"]
    address = next(a.split("=", 1)[1] for a in ctr["args"] if a.startswith("--metrics-address="))
    (port,) = [p for p in ctr["ports"] if p["containerPort"] == int(address.rsplit(":", 1)[1])]
    assert pm["apiVersion"] == "monitoring.coreos.com/v1"
    assert [e["port"] for e in pm["spec"]["podMetricsEndpoints"]] == [port["name"]] == ["metrics"]
    assert pm["spec"]["selector"]["matchLabels"].items() <= pod["metadata"]["labels"].items()
    assert pm["spec"]["podMetricsEndpoints"][0].get("path", "/metrics") == "/metrics"


def test_liqo_values_use_only_keys_of_liqo_v1_2_chart() -> None:
    values = yaml.safe_load((DEPLOY / "liqo-values.yaml").read_text())
    keys = list(value_keys(values))
    unknown = [k for k in keys if k not in LIQO_V12_VALUES_KEYS]
    assert not unknown, f"deploy/liqo-values.yaml: not keys of Liqo v1.2's values.yaml: {unknown}"
    assert {"virtualKubelet.image.name", "virtualKubelet.image.version", "virtualKubelet.extra.args"} <= set(
        keys
    )


def test_liqo_values_agree_with_the_deployment() -> None:
    """The same metrics port and resources as deploy/deployment.yaml, and only args our CLI parses."""
    from vkbridge.cli import parse_args

    values = yaml.safe_load((DEPLOY / "liqo-values.yaml").read_text())["virtualKubelet"]
    (ctr,) = _only("Deployment", "deployment.yaml")["spec"]["template"]["spec"]["containers"]
    assert f"--metrics-address=:{values['metrics']['port']}" in ctr["args"]
    assert values["extra"]["resources"] == ctr["resources"]
    assert set(values["extra"]["args"]) <= set(ctr["args"])  # flags Liqo's VK knows as well
    required = ["--foreign-cluster-id=c1", "--foreign-kubeconfig-secret-name=kubeconfig-resourceslice-c1"]
    parse_args([*required, *values["extra"]["args"]], env={})


def test_value_keys_stop_at_free_form_maps() -> None:
    tree = {"virtualKubelet": {"extra": {"labels": {"a": "b"}}, "imagee": {"name": "x"}}, "metrics": {}}
    assert list(value_keys(tree)) == ["virtualKubelet.extra.labels", "virtualKubelet.imagee.name", "metrics"]


def _rules() -> list[dict[str, Any]]:
    rule = _only("PrometheusRule", "prometheusrule.yaml")
    return [r for group in rule["spec"]["groups"] for r in group["rules"]]


def test_every_alert_of_the_prometheusrule_queries_exported_metrics_and_says_what_to_do() -> None:
    """Issue 36 point 8: the alerts docs/operations.md describes, shipped; none can go quiet by a rename."""
    known = exported_series()
    rules = _rules()
    assert len(rules) >= 7
    for rule in rules:
        names = promql_metric_names(str(rule["expr"]))
        assert names and names <= known, f"{rule['alert']}: {names - known} not exported"
        assert rule["labels"]["severity"] in ("critical", "warning", "info"), rule["alert"]
        assert rule["annotations"]["summary"] and rule["annotations"]["description"], rule["alert"]
        assert re.fullmatch(r"\d+[smh]", rule["for"]), rule["alert"]
    alerted = set().union(*(promql_metric_names(str(r["expr"])) for r in rules))
    alerted |= {re.sub(r"_(bucket|count|sum)$", "", name) for name in alerted}  # a histogram's family
    operations = (DEPLOY.parent / "docs" / "operations.md").read_text()
    described = operations.split("Alert on:", 1)[1].split("\n\n", 1)[0]
    for name in re.findall(r"`(vkbridge_\w+|liqo_\w+)", described):
        assert name in alerted, (
            f"docs/operations.md says to alert on {name}; deploy/prometheusrule.yaml does not"
        )
    assert "deploy/prometheusrule.yaml" in described
