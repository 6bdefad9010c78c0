"""Test infrastructure: local Kubernetes control planes and the Liqo pool emulator (never shipped)."""
