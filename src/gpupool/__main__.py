"""`python -m gpupool` is the `gpupool` command."""

from gpupool.cli.main import app

app()
