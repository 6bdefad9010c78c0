"""Small primitives over the Kubernetes API: client, caches, work queues, events. No product logic."""
