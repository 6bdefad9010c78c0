"""Shared test doubles for unit tests (an in-memory API at the client seam, a fake clock)."""
