"""Metrics accumulated over an update's micro-batches: sums, or running extremes for `*_max` /
`*_min` names (averaged metrics are divided by the micro-batch count afterwards; extremes never)."""
from __future__ import annotations

import torch


def extreme(name: str) -> str | None:
    """'max' / 'min' for metrics that are extremes (reduced with max/min, never averaged)."""
    return "max" if name.endswith("_max") else "min" if name.endswith("_min") else None


def combine(name: str, acc: torch.Tensor | None, value: torch.Tensor) -> torch.Tensor:
    """Accumulate a metric over micro-batches: a sum, or the running extreme."""
    if acc is None:
        return value
    kind = extreme(name)
    return torch.maximum(acc, value) if kind == "max" else torch.minimum(acc, value) if kind == "min" else acc + value
