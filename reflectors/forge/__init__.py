"""The pure translation layer: raw object dicts in, raw object dicts out; no I/O, no clients, no clock.

Everything here is deterministic (time is passed in as ``now``) and is covered by table tests alone. The
import-linter contract forbids asyncio, aiohttp, kubernetes_asyncio, socket, subprocess and vkbridge.kube.
"""
