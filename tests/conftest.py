"""Test configuration: the control-plane and pool fixtures live in e2e/ as pytest plugins."""

import importlib.util

pytest_plugins = [
    name
    for name in (
        "e2e.fixtures_planes",
        "e2e.fixtures_pool",
        "e2e.fixtures_workers",
        "tests.fixtures_vkbridge",
    )
    if importlib.util.find_spec(name) is not None
]
