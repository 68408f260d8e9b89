"""The API benchmark's parts; `benchmarks/api.py` is its command line."""
