"""The read buffer of asyncio's TLS transport, sized for a process that holds many quiet connections.

asyncio's ``SSLProtocol`` allocates ``max_size`` = 256 KiB per connection, zero-filled and so resident at
once. A VK holds a watch per resource and reflected namespace on both API servers plus pooled request
connections: 30 connections in the bench's one-namespace testbed are 7.5 MB, and every offloaded namespace
adds about seven more. A TLS record carries at most 16 KiB, so 64 KiB reads cost nothing measurable.
The attribute is the class's only knob (asyncio offers no per-connection one); set once, before the loop.
"""

from __future__ import annotations

from asyncio import sslproto
from typing import Final

__all__ = ["TLS_READ_BUFFER", "limit_tls_read_buffer"]

TLS_READ_BUFFER: Final = 64 * 1024


def limit_tls_read_buffer(size: int = TLS_READ_BUFFER) -> None:
    """Every TLS connection opened from now on reads into a buffer of ``size`` bytes (at least 16 KiB)."""
    sslproto.SSLProtocol.max_size = max(size, 16 * 1024)
