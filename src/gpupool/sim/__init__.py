"""The trace simulator's package: replay a cluster trace through the scheduling core.

Today it holds only the trace loaders: `gpupool.sim.openb` reads the Alibaba GPU-sharing trace
"openb" (shipped in `data/openb` of a source checkout) into frozen records and converts its nodes
into the core's `Node`. The replay itself comes later.
"""
