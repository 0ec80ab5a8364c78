"""Simulators served from their own process or virtual environment: an env server (server.py)
runs the real backend, `ServedBackend` (client.py) stands for it in the env worker, and the two
speak the protocol of protocol.py (docs/ENVIRONMENTS.md, "Serving a simulator from its own environment")."""
