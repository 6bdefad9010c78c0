"""Real pool workers: kubelet v1.36 + a testbed-owned containerd per node, on testbed-only addresses.

The fake kubelet (e2e/fakekubelet) stays for scale; these run the real thing so exec, logs and
port-forward meet a real kubelet. ``why_not()`` says why a machine cannot run them.
"""

from e2e.workers.testbed import RealNode, RealWorkers, why_not

__all__ = ["RealNode", "RealWorkers", "why_not"]
