"""The server fixtures live in tests/conftest.py so every test directory sees them:
`live_server` (a real `gpupool server` child process per test: simulated nodes 2x4, SQLite in a
temp dir, a cycle every 0.1 s) and `api_server` (one per module, on SQLite and on PostgreSQL).
Helpers are in tests/liveserver.py: `from liveserver import LiveServer, unique, wait_for`."""
