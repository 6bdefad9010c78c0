"""The tunnel in a subprocess of its own, so the bench's watch clients never compete with it for the GIL.

python -m bench.tunnel_proc <target-port> <ready-file>   (started by the Testbed)
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path

from e2e.controlplane import free_port
from e2e.tunnel import TunnelProxy


def _tunnel_main(target_port: int, ready: Path) -> int:
    proxy = TunnelProxy("127.0.0.1", target_port, listen_port=free_port())
    proxy.start()
    tmp = ready.with_suffix(".tmp")
    tmp.write_text(str(proxy.port))
    tmp.replace(ready)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    parent = os.getppid()
    while not stop.wait(1.0):
        if os.getppid() != parent:
            break
    proxy.stop()
    return 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        print("usage: python -m bench.tunnel_proc <target-port> <ready-file>", file=sys.stderr)
        sys.exit(2)
    sys.exit(_tunnel_main(int(sys.argv[1]), Path(sys.argv[2])))
