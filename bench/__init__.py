"""Benchmarks of vkbridge on the local planes (not part of the test run): see bench/README.md."""
