"""Masked statistics and the loss mask of a time-major rollout.

Shapes: T chunk steps, N envs, C actions per chunk, A log-prob entries per action, L = C * A.
"""
from __future__ import annotations

import torch
from torch import Tensor


def masked_sum(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() if dim is None else (x * mask).sum(dim)


def masked_mean(x: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean over entries where mask is true (0 when none is)."""
    count = mask.to(x.dtype).sum() if dim is None else mask.to(x.dtype).sum(dim)
    return masked_sum(x, mask, dim) / count.clamp(min=1.0)


def masked_var(x: Tensor, mask: Tensor, unbiased: bool = True) -> Tensor:
    """Variance over the masked entries (Bessel-corrected when unbiased and count > 1)."""
    mean = masked_mean(x, mask)
    count = mask.to(x.dtype).sum()
    var = masked_sum((x - mean) ** 2, mask) / count.clamp(min=1.0)
    if unbiased and count > 1:
        var = var * count / (count - 1)
    return var


def masked_whiten(x: Tensor, mask: Tensor, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """(x - mean) / std over the masked entries; entries outside the mask come back as 0."""
    mean, var = masked_mean(x, mask), masked_var(x, mask)
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(mask.bool(), out, torch.zeros_like(out))


def build_loss_mask(dones: Tensor, auto_reset: bool) -> Tensor:
    """Which env steps were really executed in the episode they are credited to.

    dones: bool [T, N, C] episode end (termination or truncation) after that env step.
    Returns bool [T, N, C].

    auto_reset=False: a sub-env idles after its first episode end, so every later step of
    that env is invalid. auto_reset=True: the env resets at the chunk boundary, so only the
    remaining actions of the chunk in which the episode ended are invalid (not executed).
    """
    if dones.dim() != 3:
        raise ValueError(f"dones must be [T, N, C], got shape {tuple(dones.shape)}")
    d = dones.bool()
    if auto_reset:
        # done strictly before step c inside the same chunk
        before = torch.cumsum(d.int(), dim=2) - d.int()
        return before == 0
    t, n, c = d.shape
    flat = d.permute(1, 0, 2).reshape(n, t * c)  # env-major, time order
    before = torch.cumsum(flat.int(), dim=1) - flat.int()
    return (before == 0).reshape(n, t, c).permute(1, 0, 2).contiguous()


def expand_steps_to_entries(x: Tensor, num_entries: int) -> Tensor:
    """Broadcast [T, N, K] (K = C per-step or 1 per-chunk) to [T, N, L] entries, L % K == 0."""
    k = x.shape[-1]
    if num_entries % k:
        raise ValueError(f"cannot spread {k} entries per chunk over {num_entries} log-prob entries")
    return x.repeat_interleave(num_entries // k, dim=-1)


def group_entries(x: Tensor, group: int) -> Tensor:
    """[B, L] -> [B, L // group, group] (entries of one action or one chunk side by side)."""
    if x.shape[-1] % group:
        raise ValueError(f"{x.shape[-1]} entries per chunk are not a multiple of {group}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // group, group)
