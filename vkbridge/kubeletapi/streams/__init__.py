"""The kubelet API's streams: exec, attach and port-forward over SPDY/3.1 or WebSocket, relayed to the pool.

- ``route``: where a stream request goes on the pool (route, namespace, dial before the upgrade).
- ``channels``: remote-command conventions shared by both fronts (protocols, framing, Status).
- ``rawhttp``: the HTTP/1.1 head of the SPDY/3.1 upgrade aiohttp cannot take.
- ``spdy``, ``spdydict``: SPDY/3.1 framing and its header-compression dictionary.
- ``spdyconn``: the server side of one SPDY connection and its exec front.
- ``wsfront``: the WebSocket exec/attach front.
- ``relay``: moves one exec/attach session between a front and the pool and decides its end.
- ``poolstream``, ``pooldial``, ``spdyclient``: the pool side of a session and how it is dialled.
- ``portforward``, ``pfserve``: port-forward relayed pair by pair (SPDY), and its WebSocket side.
"""
