"""gpupool: pool the GPUs of many machines and share them by policy."""

__version__ = "0.1.0"
