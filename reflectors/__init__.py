"""The reflection engine: local Pods and their Secrets/ConfigMaps to the pool, status and Events back."""
