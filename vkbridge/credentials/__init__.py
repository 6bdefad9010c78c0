"""The pool credential: kubeconfig Secret, hot swap, renewal; the kubelet serving certificate."""
