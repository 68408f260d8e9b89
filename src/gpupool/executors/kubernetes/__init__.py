"""The Kubernetes executor: a cluster's nodes and pods as gpupool's nodes and tasks.

See docs/kubernetes.md. Modules: `settings` (what a server is told), `client` (lightkube, and
the decoder warm-up), `objects` (labels, annotations and names; nodes and pods read into
gpupool's terms), `manifests` (the pods, Bindings and Services gpupool creates), `informer`
(list + watch caches that survive API server restarts), `state` (what the executor knows and
which API calls it makes next: pure), `executor` (the `Executor`, one asyncio thread of I/O),
`fastpost` (the hot path's POSTs), `leader` (leader election with a Lease), `dcgm` (utilization
from Prometheus), `reserve` (the reservation pod's program).
"""
