"""The Kubernetes executor: a cluster's nodes and pods as gpupool's nodes and tasks.

See docs/kubernetes.md. Modules: `settings` (what a server is told), `client` (the API
client, lightkube), `objects` (pure translations between Kubernetes objects and gpupool's
nodes, launches and external workloads), `informer` (list + watch caches that survive API
server restarts), `executor` (the `Executor`), `reservations` (devices held for sharing pods),
`lease` (leader election), `dcgm` (utilization from Prometheus), `reserve` (the reservation
pod's program).
"""
