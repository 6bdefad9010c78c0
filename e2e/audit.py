"""Audit logs for the planes' API servers: who wrote what, by user agent (bench.apicalls, the differential
suite). The API server has no other record of a request's client.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


def audit_args(
    policy_file: Path, rules: list[dict[str, Any]], logs: Mapping[str, Path]
) -> dict[str, dict[str, list[str]]]:
    """Write an audit Policy of ``rules`` to ``policy_file`` and return the plane extra args (plane name ->
    component -> flags) that make each named plane's kube-apiserver log by it, as JSON lines, to its file
    in ``logs`` (never rotated: a measurement reads the whole log)."""
    policy = {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"]}
    policy_file.write_text(yaml.safe_dump({**policy, "rules": rules}))
    return {
        name: {
            "kube-apiserver": [
                f"--audit-policy-file={policy_file}",
                f"--audit-log-path={path}",
                "--audit-log-format=json",
                "--audit-log-maxsize=0",
            ]
        }
        for name, path in logs.items()
    }
