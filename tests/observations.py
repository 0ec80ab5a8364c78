"""The observation factory of the model tests: `observations(n)` is an EnvObservation of n
sub-envs with random camera images and states, seeded, so a test sees the same batch every run."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from embodied_rl.types import EnvObservation

#: Prompts of different lengths, so a batch of them is left-padded.
INSTRUCTIONS = ("pick up the red cube", "open the top drawer of the cabinet", "push")


def observations(n: int, *, size: int = 56, seed: int = 0, wrist: bool = False, state_dim: int = 8, state_bound: float = 1.0,
                 instructions: Sequence[str] | None = None, privileged_dim: int | None = None, start: int = 0) -> EnvObservation:
    """Rows start .. start + n - 1 of a seeded run of observations: uint8 size x size images
    (a wrist camera too with `wrist`), float32 states uniform in [-state_bound, state_bound],
    a privileged state of `privileged_dim` standard-normal values, and the instructions
    (default INSTRUCTIONS) in turn, row k taking instructions[k % len(instructions)].

    The arrays are drawn from np.random.default_rng(seed) for all start + n rows, in this
    order: main images, states, wrist images, privileged states; `start` keeps the last n
    rows, so `observations(2)` and `observations(3, start=2)` are the first 2 and the last 3 rows
    of a batch of 5, with different contents.
    """
    rows = start + n
    rng = np.random.default_rng(seed)
    image = lambda: rng.integers(0, 256, (rows, size, size, 3), dtype=np.uint8)
    main = image()
    states = rng.uniform(-state_bound, state_bound, (rows, state_dim)).astype(np.float32)
    wrist_images = image() if wrist else None
    privileged = rng.standard_normal((rows, privileged_dim)).astype(np.float32) if privileged_dim is not None else None
    texts = INSTRUCTIONS if instructions is None else instructions
    keep = slice(start, rows)
    return EnvObservation(main_images=main[keep], states=states[keep], task_descriptions=[texts[k % len(texts)] for k in range(start, rows)],
                          wrist_images=None if wrist_images is None else wrist_images[keep],
                          privileged_states=None if privileged is None else privileged[keep])
