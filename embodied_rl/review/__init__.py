"""`embodied-rl review`: a local web page over run directories (see docs/REVIEW.md)."""
