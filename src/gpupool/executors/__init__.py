"""Executors carry out the scheduler's decisions on machines: start and stop task launches,
report their exits, serve their logs. `base.Executor` is the seam; `simulated` declares nodes
whose tasks only pretend to run."""
