"""The kubelet HTTPS API (logs, exec, stats, pods) and the metrics/health endpoints."""
