"""`python -m embodied_rl.review RUN_DIR ...` (same as `embodied-rl review`)."""
import sys

from embodied_rl.review.cli import main

sys.exit(main(sys.argv[1:]))
