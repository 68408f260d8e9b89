"""The cycle benchmark's parts; `benchmarks/cycle.py` is its command line."""
