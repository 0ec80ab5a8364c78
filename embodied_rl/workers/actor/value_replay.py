"""The value targets of the last few training steps, for the asymmetric critic's replay pass.

A batch of tens of episodes is little data for a critic fitted to it alone. Its inputs
(privileged states) are small, so the actor keeps the last steps' (state, return) pairs and
fits the critic to all of them after each step's updates.
"""
from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

import torch
from torch import Tensor

if TYPE_CHECKING:
    from embodied_rl.workers.actor.batch import Samples

KEYS = ("privileged", "returns", "value_mask")


class ValueReplay:
    """The (privileged state [M, P], return [M, Kv], value mask [M, Kv]) samples of the current
    step and the `steps` before it, on CPU; a state_dict travels in the actor's checkpoint."""

    def __init__(self, steps: int) -> None:
        self.batches: deque[dict[str, Tensor]] = deque(maxlen=steps + 1)

    def add(self, flat: Samples) -> None:
        """Keep the critic's inputs and targets of a step's samples."""
        sample = {"privileged": flat.forward_inputs["privileged"], "returns": flat.returns, "value_mask": flat.value_mask}
        self.batches.append({k: v.detach().cpu() for k, v in sample.items()})

    def samples(self) -> dict[str, Tensor]:
        """Every kept sample, oldest batch first."""
        return {k: torch.cat([b[k] for b in self.batches]) for k in KEYS}

    def state_dict(self) -> list[dict[str, Tensor]]:
        return list(self.batches)

    def load_state_dict(self, batches: list[dict[str, Tensor]]) -> None:
        self.batches.clear()
        self.batches.extend(batches)  # the deque keeps the newest `steps + 1`
