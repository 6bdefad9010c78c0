"""Test configuration: the control-plane and pool fixtures live in e2e/ as pytest plugins."""

import importlib.util
import signal

from e2e.binaries import k8s_version_in_use
from e2e.procs import raise_interrupt

pytest_plugins = [
    name
    for name in (
        "e2e.fixtures_planes",
        "e2e.fixtures_pool",
        "e2e.fixtures_workers",
        "tests.fixtures_vkbridge",
        "tests.support.admin_clients",
        "tests.support.workloads",
    )
    if importlib.util.find_spec(name) is not None
]

# Hypothesis' default 200 ms deadline per example measures the machine, not the code: on the 2-core CI
# machine a pure example once took 714 ms while two control planes started (35 ms on a rerun). Examples
# still run to the end and their failures still fail; only wall-clock time no longer does.
try:
    from hypothesis import settings as _hypothesis_settings
except ImportError:  # pragma: no cover - hypothesis is a dev dependency
    pass
else:
    _hypothesis_settings.register_profile("vkbridge", deadline=None)
    _hypothesis_settings.load_profile("vkbridge")


def pytest_configure() -> None:
    """SIGTERM (CI's timeout, hack/test.sh ending a lane) ends the session like Ctrl-C: pytest tears the
    session's fixtures down and the atexit handlers end the planes and workers; TERM's default action would
    exit at once and leave them all running."""
    signal.signal(signal.SIGTERM, raise_interrupt)


def pytest_report_header() -> str:
    """Every session says which Kubernetes it runs on, so a run on a fallback version shows in CI's log."""
    return k8s_version_in_use()
