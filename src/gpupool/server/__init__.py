"""The control-plane service: HTTP API, database, and the scheduling loop over the core."""
