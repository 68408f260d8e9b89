"""HTTP routes: parse, check access, call a service, return its model. Nothing else."""
