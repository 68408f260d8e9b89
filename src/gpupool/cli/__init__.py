"""The `gpupool` command line."""
