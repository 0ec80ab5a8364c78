"""Action and state normalisation from dataset_statistics.json (OpenVLA's format, which the demos
write: per entry an 'action' and a 'proprio' block of q01/q99 bounds and a mask), so a demo-trained
checkpoint acts in the units of its demos."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from embodied_rl.errors import CheckpointError, ConfigError
from embodied_rl.models.checkpoint_spec import STATS_FILE, stats_entry

IDENTITY_KEY = "identity"


def identity_statistics(action_dim: int, state_dim: int, key: str = IDENTITY_KEY) -> dict[str, Any]:
    """Bounds [-1, 1] everywhere: normalisation is the identity."""
    def block(dim: int) -> dict[str, Any]:
        return {"mean": [0.0] * dim, "std": [1.0] * dim, "min": [-1.0] * dim, "max": [1.0] * dim,
                "q01": [-1.0] * dim, "q99": [1.0] * dim, "mask": [True] * dim}
    return {key: {"action": block(action_dim), "proprio": block(state_dim), "num_transitions": 0, "num_trajectories": 0}}


def load_statistics(path: Path) -> dict[str, Any]:
    if not (path / STATS_FILE).is_file():
        raise CheckpointError(f"{path / STATS_FILE} not found; every cnn_gaussian checkpoint has one (make-model writes identity statistics)")
    return json.loads((path / STATS_FILE).read_text())


def pick_entry(stats: dict[str, Any], unnorm_key: str | None) -> str:
    key = stats_entry(stats, unnorm_key)
    if key is None:
        raise ConfigError(f"actor.model.unnorm_key={unnorm_key!r} does not pick one entry of {STATS_FILE} "
                          f"(keys: {', '.join(sorted(stats))}); set it to one of them")
    return key


class Bounds:
    """x in [q01, q99] <-> [-1, 1] per dimension where mask (elsewhere the identity), as OpenVLA's BOUNDS_Q99."""

    def __init__(self, block: dict[str, Any], name: str, dim: int, key: str) -> None:
        if not isinstance(block, dict) or "q01" not in block or "q99" not in block:
            raise ConfigError(f"{STATS_FILE}: '{name}' needs q01 and q99 lists")
        # on the CPU even when the policy is built on the meta device (a skeleton still prepares inputs)
        self.low = torch.tensor(block["q01"], dtype=torch.float32, device="cpu")
        self.high = torch.tensor(block["q99"], dtype=torch.float32, device="cpu")
        self.mask = torch.tensor(block.get("mask", [True] * len(block["q01"])), dtype=torch.bool, device="cpu")
        if self.low.shape[0] != dim:
            raise ConfigError(f"actor.model.{key}={dim} but {STATS_FILE} '{name}' has {self.low.shape[0]} dims; set {key}={self.low.shape[0]}")

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """float [..., D] in data units -> [-1, 1] (clipped) where mask."""
        low, high, mask = (t.to(x.device) for t in (self.low, self.high, self.mask))
        out = (2.0 * (x - low) / (high - low + 1e-8) - 1.0).clamp(-1.0, 1.0)
        return torch.where(mask, out, x)

    def unnormalize(self, a: torch.Tensor) -> torch.Tensor:
        """float [..., D] in [-1, 1] -> data units where mask."""
        low, high, mask = (t.to(a.device) for t in (self.low, self.high, self.mask))
        return torch.where(mask, 0.5 * (a + 1.0) * (high - low + 1e-8) + low, a)
