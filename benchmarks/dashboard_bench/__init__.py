"""The dashboard benchmark's parts; `benchmarks/dashboard.py` is its command line."""
