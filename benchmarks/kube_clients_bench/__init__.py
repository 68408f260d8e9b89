"""The Kubernetes clients benchmark's parts; `benchmarks/kube_clients.py` is its command line."""
