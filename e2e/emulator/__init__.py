"""Pool emulator: the Liqo v1.2 controllers around vkbridge, played on two real kube-apiservers.

Consumer side: NamespaceOffloading -> NamespaceMap, the CRD replicator, and approval of the VK's
CertificateSigningRequests. Provider side: remote
namespaces, ShadowPod -> Pod, ResourceSlice grant and certificates, Renew signing, and the ShadowPod quota
webhook. Run it with ``python -m e2e.emulator`` or :func:`launch_emulator`. Test infrastructure only.
"""

from .launcher import EmulatorError, EmulatorHandle, launch_emulator
from .names import identity_cn

__all__ = ["EmulatorError", "EmulatorHandle", "identity_cn", "launch_emulator"]
