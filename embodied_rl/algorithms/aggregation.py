"""loss_agg_func: how a [B, S] matrix of per-entry losses becomes a scalar (ROLL semantics).

A row is one sequence = one action chunk; S is its number of loss entries (the policy's L log-prob
entries at token_level, C actions at action_level, 1 at chunk_level). mask: bool [B, S].
"""
from __future__ import annotations

from torch import Tensor

from embodied_rl.algorithms.registry import LOSS_AGGREGATIONS


def _valid_rows(mask: Tensor) -> Tensor:
    return mask.any(dim=-1)


@LOSS_AGGREGATIONS.register("token-mean")
def entry_mean(loss: Tensor, mask: Tensor) -> Tensor:
    """Mean over all valid entries of the batch: every entry weighs the same."""
    m = mask.to(loss.dtype)
    return (loss * m).sum() / m.sum().clamp(min=1.0)


@LOSS_AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_entry_sum(loss: Tensor, mask: Tensor) -> Tensor:
    """Sum over each chunk's valid entries, then mean over chunks with any valid entry."""
    rows = _valid_rows(mask).to(loss.dtype)
    seq = (loss * mask.to(loss.dtype)).sum(dim=-1)
    return (seq * rows).sum() / rows.sum().clamp(min=1.0)


@LOSS_AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_entry_mean(loss: Tensor, mask: Tensor) -> Tensor:
    """Mean over each chunk's valid entries, then mean over chunks: every chunk weighs the same."""
    m = mask.to(loss.dtype)
    rows = _valid_rows(mask).to(loss.dtype)
    seq = (loss * m).sum(dim=-1) / m.sum(dim=-1).clamp(min=1.0)
    return (seq * rows).sum() / rows.sum().clamp(min=1.0)


@LOSS_AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_entry_sum_norm(loss: Tensor, mask: Tensor) -> Tensor:
    """Entry sum divided by the constant chunk length S (not the valid count), mean over chunks.

    Masked-out entries of a partially valid chunk thus shrink its weight (Dr. GRPO style).
    """
    rows = _valid_rows(mask).to(loss.dtype)
    seq = (loss * mask.to(loss.dtype)).sum(dim=-1) / loss.shape[-1]
    return (seq * rows).sum() / rows.sum().clamp(min=1.0)


def aggregate_loss(loss: Tensor, mask: Tensor, mode: str) -> Tensor:
    return LOSS_AGGREGATIONS.get(mode)(loss, mask)
