"""`python -m embodied_rl.cli ...` (same as `embodied-rl ...`)."""
import sys

from embodied_rl.cli import main

sys.exit(main())
