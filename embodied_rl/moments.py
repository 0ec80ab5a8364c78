"""Running statistics merged batch by batch: shared by reward normalisation and the privileged
critic's input normaliser, so neither the models nor the algorithms own it."""
from __future__ import annotations

from torch import Tensor


def merge_moments(count: float | Tensor, mean: float | Tensor, var: float | Tensor, b_count: float,
                  b_mean: float | Tensor, b_var: float | Tensor) -> tuple:
    """(count, mean, variance) of two sample sets merged from their own (Chan et al.'s parallel
    update); floats or tensors (per-feature moments) alike. count 0 takes the batch's moments."""
    total = count + b_count
    delta = b_mean - mean
    m2 = var * count + b_var * b_count + delta * delta * count * b_count / total
    return total, mean + delta * b_count / total, m2 / total
