"""The virtual Node: object, Lease heartbeat, pool reachability, re-creation."""
