"""Discrete action tokens and dataset-statistics (un)normalisation, as in OpenVLA.

256 uniform bins on [-1, 1]; a normalised value `a` falls in bin d = digitize(a) in
[1, 256] and becomes token id `base_vocab - d` (so ids count down from the base vocabulary:
a = -1 -> base-1, a = +1 -> base-256). We expose *relative* tokens r = id - (base - 256)
in [0, 255]; r indexes the 256-wide slice of the LM-head logits directly.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import torch

from embodied_rl.errors import UserError

STATS_NAME = "dataset_statistics.json"
logger = logging.getLogger(__name__)


class ActionTokenizer:
    """Maps normalised actions in [-1, 1] to relative/absolute token ids and back."""

    def __init__(self, base_vocab_size: int, n_bins: int = 256) -> None:
        self.base_vocab_size = int(base_vocab_size)
        self.n_bins = int(n_bins)
        self.bins = torch.linspace(-1.0, 1.0, self.n_bins, dtype=torch.float64, device="cpu")
        self.bin_centers = (self.bins[:-1] + self.bins[1:]) / 2.0  # 255 centres
        self.first_id = self.base_vocab_size - self.n_bins  # absolute id of relative token 0

    def encode(self, actions: torch.Tensor) -> torch.Tensor:
        """float [..., A] in [-1, 1] -> int64 relative tokens [..., A] in [0, n_bins)."""
        a = actions.to(torch.float64).clamp(-1.0, 1.0)
        d = torch.bucketize(a, self.bins.to(a.device), right=True)  # == np.digitize: bins[d-1] <= a < bins[d]
        return self.to_relative(self.base_vocab_size - d)

    def decode(self, rel_tokens: torch.Tensor) -> torch.Tensor:
        """int relative tokens [...] -> float32 normalised actions [...] (bin centres)."""
        ids = self.to_absolute(rel_tokens)
        idx = (self.base_vocab_size - ids - 1).clamp(0, self.n_bins - 2)
        return self.bin_centers.to(rel_tokens.device)[idx].to(torch.float32)

    def to_absolute(self, rel_tokens: torch.Tensor) -> torch.Tensor:
        return rel_tokens.long() + self.first_id

    def to_relative(self, ids: torch.Tensor) -> torch.Tensor:
        return ids.long() - self.first_id


def load_dataset_statistics(ckpt_dir: str | Path) -> dict[str, Any]:
    path = Path(ckpt_dir) / STATS_NAME
    if not path.is_file():
        raise UserError(f"{path} not found; every OpenVLA-OFT checkpoint needs its action statistics file (make-model writes one)")
    with open(path) as f:
        return json.load(f)


def resolve_unnorm_key(stats: dict[str, Any], unnorm_key: str | None) -> str:
    """Pick the statistics entry: the given key, else '<key>_no_noops', else the only key."""
    keys = sorted(stats)
    if unnorm_key is None:
        if len(keys) == 1:
            return keys[0]
        raise UserError(f"actor.model.unnorm_key is required: {STATS_NAME} has several keys: {', '.join(keys)}")
    if unnorm_key in stats:
        return unnorm_key
    if f"{unnorm_key}_no_noops" in stats:
        logger.info("unnorm_key %r not in %s; using %r", unnorm_key, STATS_NAME, f"{unnorm_key}_no_noops")
        return f"{unnorm_key}_no_noops"
    raise UserError(f"actor.model.unnorm_key={unnorm_key!r} not in {STATS_NAME}; available keys: {', '.join(keys)}")


class BoundsQ99:
    """OpenVLA BOUNDS_Q99 normalisation of one statistics block ({'q01','q99','mask'?})."""

    def __init__(self, block: dict[str, Any], name: str) -> None:
        if "q01" not in block or "q99" not in block:
            raise UserError(f"{STATS_NAME}: '{name}' needs q01 and q99 lists")
        self.low = torch.tensor(block["q01"], dtype=torch.float32, device="cpu")
        self.high = torch.tensor(block["q99"], dtype=torch.float32, device="cpu")
        mask = block.get("mask", [True] * len(block["q01"]))
        self.mask = torch.tensor(mask, dtype=torch.bool, device="cpu")
        self.name = name

    @property
    def dim(self) -> int:
        return int(self.low.shape[0])

    def _check(self, x: torch.Tensor) -> None:
        if x.shape[-1] != self.dim:
            raise UserError(f"{STATS_NAME}: '{self.name}' statistics have {self.dim} dims but the data has {x.shape[-1]}; check action_dim / proprio_dim / unnorm_key")

    def unnormalize(self, a: torch.Tensor) -> torch.Tensor:
        """[-1, 1] -> dataset units where mask, identity elsewhere. a: float [..., D]."""
        self._check(a)
        low, high, mask = (t.to(a.device) for t in (self.low, self.high, self.mask))
        out = 0.5 * (a + 1.0) * (high - low + 1e-8) + low
        return torch.where(mask, out, a)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """Dataset units -> [-1, 1] (clipped) where mask, identity elsewhere. x: float [..., D]."""
        self._check(x)
        low, high, mask = (t.to(x.device) for t in (self.low, self.high, self.mask))
        out = (2.0 * (x - low) / (high - low + 1e-8) - 1.0).clamp(-1.0, 1.0)
        return torch.where(mask, out, x)
