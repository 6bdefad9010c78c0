"""Small synchronous helpers for integration tests over ControlPlane.api (raw JSON)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from e2e.bundle import Bundle
from e2e.controlplane import ControlPlane

SHADOWPODS = "/apis/offloading.liqo.io/v1beta1"


def wait_until(cond: Callable[[], Any], timeout: float, what: str, interval: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        last = cond()
        if last:
            return last
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(interval)


def get(plane: ControlPlane, path: str) -> dict[str, Any] | None:
    status, body = plane.api("GET", path)
    if status == 404:
        return None
    assert status == 200, f"GET {path}: {status} {body}"
    return body  # type: ignore[no-any-return]


def must(plane: ControlPlane, method: str, path: str, body: Any = None, **kw: Any) -> dict[str, Any]:
    status, out = plane.api(method, path, body, **kw)
    assert 200 <= status < 300, f"{method} {path}: {status} {out}"
    return out  # type: ignore[no-any-return]


def pod_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods" + (f"/{name}" if name else "")


def shadow_path(ns: str, name: str = "") -> str:
    return f"{SHADOWPODS}/namespaces/{ns}/shadowpods" + (f"/{name}" if name else "")


def pool_pod(slug: str, name: str | None = None, *, command: str = "echo hello from the pool; sleep 3600",
             restart: str = "Always", cpu: str = "100m", memory: str = "64Mi", labels: dict[str, str] | None = None,
             annotations: dict[str, str] | None = None, node_name: str | None = None,
             extra_spec: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """A pod that opts in to the pool the GUIDE §4 way (toleration + nodeSelector)."""
    spec: dict[str, Any] = {
        "tolerations": [
            {"key": "multicloud.io/pool", "operator": "Equal", "value": slug, "effect": "NoSchedule"}
        ],
        "nodeSelector": {"multicloud.io/pool": slug},
        "restartPolicy": restart,
        "terminationGracePeriodSeconds": 2,
        "containers": [
            {
                "name": "hello",
                "image": "busybox:1.36",
                "command": ["sh", "-c", command],
                "resources": {"requests": {"cpu": cpu, "memory": memory}},
            }
        ],
    }
    if node_name:
        spec["nodeName"] = node_name
    spec.update(extra_spec or {})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name or f"p-{uuid.uuid4().hex[:8]}",
            "labels": labels or {"app": "burst"},
            "annotations": annotations or {},
        },
        "spec": spec,
    }


def phase(plane: ControlPlane, ns: str, name: str) -> str | None:
    pod = get(plane, pod_path(ns, name))
    return None if pod is None else (pod.get("status") or {}).get("phase")


def events_for(plane: ControlPlane, ns: str, name: str) -> list[dict[str, Any]]:
    body = must(plane, "GET", f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name={name}")
    return list(body.get("items") or [])


DEFAULT = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}


def rs_path(bundle: Bundle) -> str:
    return f"/apis/authentication.liqo.io/v1beta1/namespaces/{bundle.tenant_ns}/resourceslices/{bundle.slug}"


def set_grant(consumer: ControlPlane, bundle: Bundle, resources: dict[str, str]) -> None:
    """Ask the pool for `resources` (spec) and wait until it granted them and our node shows them."""
    must(consumer, "PATCH", rs_path(bundle), {"spec": {"resources": resources}},
         content_type="application/merge-patch+json")  # fmt: skip

    def granted() -> bool:
        st = ((get(consumer, rs_path(bundle)) or {}).get("status") or {}).get("resources") or {}
        node = get(consumer, f"/api/v1/nodes/{bundle.slug}") or {}
        cap = (node.get("status") or {}).get("capacity") or {}
        return all(st.get(k) == v and cap.get(k) == v for k, v in resources.items())

    wait_until(granted, 30, f"the grant {resources} on the ResourceSlice and the node")


def node_pods_active(consumer: ControlPlane, node: str) -> list[str]:
    body = must(consumer, "GET", f"/api/v1/pods?fieldSelector=spec.nodeName={node}")
    return [
        f"{p['metadata']['namespace']}/{p['metadata']['name']}"
        for p in body["items"]
        if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
    ]
