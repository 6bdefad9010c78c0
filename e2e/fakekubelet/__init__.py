"""A small asyncio fake kubelet that plays the pool's worker nodes in integration tests.

Each node is registered with a Lease and a Ready condition; pods bound to it run as local processes
(or, with ``--no-exec``, as timers), and its kubelet HTTPS API serves logs and exec (WebSocket or
SPDY/3.1, as a real kubelet does) so that ``kubectl logs``/``exec`` through the pool API server work.
Test infrastructure only: it runs pod commands on this machine.
"""

from .launcher import FakeKubeletHandle, launch_fake_kubelets
from .podspec import ANN_EXIT_AFTER, ANN_EXIT_CODE, ANN_FAIL_START

__all__ = [
    "ANN_EXIT_AFTER",
    "ANN_EXIT_CODE",
    "ANN_FAIL_START",
    "FakeKubeletHandle",
    "launch_fake_kubelets",
]
