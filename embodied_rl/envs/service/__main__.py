"""`python -m embodied_rl.envs.service --listen ADDRESS [--once]`: an env server (server.py)."""
import sys

from embodied_rl.envs.service.server import run

sys.exit(run())
