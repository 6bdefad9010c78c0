"""What tests share: unit-test doubles (an in-memory API at the client seam, a fake clock, scripted
transports) and integration helpers (an offloaded namespace with its steps, workloads on fake and real
workers, admin clients). One module per job; fixtures are loaded as plugins by tests/conftest.py."""
