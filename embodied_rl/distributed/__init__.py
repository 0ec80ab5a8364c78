"""Distributed machinery that knows nothing of RL: Ray worker groups, placement of workers on
resource slots, channels over shared memory or the object store, and RNG streams."""
