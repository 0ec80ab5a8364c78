"""Reward processing before the advantage estimator (ROLL semantics): normalise, clip.

Rewards come at the estimator's granularity: [T, N, K] with K = C (action_level, one per
env step) or 1 (chunk_level). Statistics use only valid entries (mask [T, N, K]).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from embodied_rl.algorithms.masks import masked_mean, masked_var
from embodied_rl.moments import merge_moments


@dataclass
class RunningRewardStats:
    """Running mean/variance of rewards (merge_moments), for reward_norm: running.

    The runtime owns one instance per training run and checkpoints `state_dict()`.
    """

    count: float = 0.0
    mean: float = 0.0
    var: float = 1.0

    def update(self, x: Tensor) -> None:
        """Merge the statistics of the 1-D tensor x (float64 accumulation)."""
        if x.numel() == 0:
            return
        x = x.detach().double()
        self.count, self.mean, self.var = merge_moments(self.count, self.mean, self.var, float(x.numel()),
                                                        float(x.mean()), float(x.var(unbiased=False)))

    def state_dict(self) -> dict[str, float]:
        return {"count": self.count, "mean": self.mean, "var": self.var}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.count, self.mean, self.var = float(state["count"]), float(state["mean"]), float(state["var"])


def _apply(x: Tensor, mean: Tensor | float, std: Tensor | float, shift: bool, scale: bool) -> Tensor:
    """shift only: x - mean; scale only: x / std; neither flag: (x - mean) / std."""
    if shift:
        return x - mean
    if scale:
        return x / std
    return (x - mean) / std


def normalize_rewards(
    rewards: Tensor,
    mask: Tensor,
    mode: str,
    *,
    group_size: int = 1,
    shift_only: bool = False,
    scale_only: bool = False,
    stats: RunningRewardStats | None = None,
    eps: float = 1e-8,
) -> Tensor:
    """Normalise rewards [T, N, K] with statistics of the valid entries (mask [T, N, K]).

    mode: none | batch (whole batch) | group (envs n // group_size) | running (stats, which
    is updated with this batch first). Invalid entries are returned as 0.
    """
    valid = mask.bool()
    if mode == "none":
        out = rewards
    elif mode == "batch":
        out = _apply(rewards, masked_mean(rewards, valid), (masked_var(rewards, valid) + eps).sqrt(), shift_only, scale_only)
    elif mode == "group":
        t, n, k = rewards.shape
        if n % group_size:
            raise ValueError(f"{n} envs are not a multiple of algorithm.group_size={group_size}")
        # [G, T, group_size * K]: one row of statistics per group
        g = rewards.reshape(t, n // group_size, group_size * k).transpose(0, 1).reshape(n // group_size, -1)
        gm = valid.reshape(t, n // group_size, group_size * k).transpose(0, 1).reshape(n // group_size, -1).to(rewards.dtype)
        cnt = gm.sum(1, keepdim=True).clamp(min=1.0)
        mean = (g * gm).sum(1, keepdim=True) / cnt
        var = ((g - mean) ** 2 * gm).sum(1, keepdim=True) / (cnt - 1).clamp(min=1.0)
        normed = _apply(g, mean, (var + eps).sqrt(), shift_only, scale_only)
        out = normed.reshape(n // group_size, t, group_size * k).transpose(0, 1).reshape(t, n, k)
    elif mode == "running":
        if stats is None:
            raise ValueError("algorithm.reward_norm=running needs the runtime's RunningRewardStats (reward_stats=...)")
        stats.update(rewards[valid])
        out = _apply(rewards, stats.mean, (stats.var + eps) ** 0.5, shift_only, scale_only)
    else:
        raise ValueError(f"unknown reward_norm {mode!r}")
    return torch.where(valid, out, torch.zeros_like(out))


def clip_rewards(rewards: Tensor, bound: float | None) -> Tensor:
    return rewards if bound is None else rewards.clamp(-bound, bound)
