"""vkbridge: a Python asyncio reimplementation of the Liqo v1.2 virtual kubelet."""

__version__ = "0.1.0"
