"""Advantage estimators as pure functions of time-major tensors (CleanRL style).

S = reward steps (env steps at action level, chunks at chunk level), N = envs.
`dones[s]` means the episode ended after step s: nothing after it is credited to s.
Truncated episodes are bootstrapped by the caller (reward += gamma * V(final_obs)) and
then count as done, so a value never leaks across an auto-reset.
"""
from __future__ import annotations

import torch
from torch import Tensor


def gae(rewards: Tensor, values: Tensor, dones: Tensor, gamma: float, lam: float) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation.

    rewards: [S, N]; values: [S + 1, N] (last row = value after the last step, used to
    bootstrap the episode still running at the end of the rollout); dones: bool [S, N].
    Returns (advantages [S, N], returns [S, N] = advantages + values[:-1]).
    """
    not_done = 1.0 - dones.to(rewards.dtype)
    adv = torch.zeros_like(rewards)
    last = torch.zeros_like(rewards[0])
    for s in reversed(range(rewards.shape[0])):
        delta = rewards[s] + gamma * values[s + 1] * not_done[s] - values[s]
        last = delta + gamma * lam * not_done[s] * last
        adv[s] = last
    return adv, adv + values[:-1]


def discounted_returns(rewards: Tensor, dones: Tensor, gamma: float) -> Tensor:
    """Discounted reward-to-go cut at episode ends, no critic. rewards, dones: [S, N] -> [S, N]."""
    not_done = 1.0 - dones.to(rewards.dtype)
    out = torch.zeros_like(rewards)
    running = torch.zeros_like(rewards[0])
    for s in reversed(range(rewards.shape[0])):
        running = rewards[s] + gamma * not_done[s] * running
        out[s] = running
    return out


def group_normalized_scores(scores: Tensor, group_size: int, norm_by_std: bool, eps: float = 1e-6) -> tuple[Tensor, Tensor]:
    """GRPO: (score - group mean) [/ (group std + eps)] over consecutive groups of envs.

    scores: [N] episode returns, N % group_size == 0.
    Returns (advantages [N], uniform [N] bool: the env's group has all-equal scores).
    """
    n = scores.shape[0]
    if n % group_size:
        raise ValueError(f"{n} envs are not a multiple of algorithm.group_size={group_size}")
    g = scores.reshape(n // group_size, group_size)
    centered = g - g.mean(dim=1, keepdim=True)
    if norm_by_std:
        centered = centered / (g.std(dim=1, keepdim=True) + eps)
    uniform = (g == g[:, :1]).all(dim=1, keepdim=True).expand_as(g)
    return centered.reshape(n), uniform.reshape(n)


def leave_one_out_centered(adv: Tensor, valid: Tensor, group_size: int, norm_by_std: bool = False, eps: float = 1e-6) -> Tensor:
    """Subtract from each env's advantage the mean advantage of the other valid envs of its group.

    adv, valid: [S, N, K] with N % group_size == 0 (envs n, m grouped iff n // group_size ==
    m // group_size). The baseline of env i at step s is built only from the other envs of its
    group, which are independent of env i's actions given the shared start, so the policy
    gradient stays unbiased; it removes the part of the advantage that says how easy that
    start was. Steps where no other env of the group is valid are left unchanged.
    norm_by_std: then divide by the std of the group's advantages at that step (as GRPO divides
    by its group's std), so every start weighs the same in the batch, however much its
    episodes' returns differ; a step with fewer than 2 valid envs in its group is not divided.
    """
    s, n, k = adv.shape
    if n % group_size:
        raise ValueError(f"{n} envs are not a multiple of algorithm.group_size={group_size}")
    w = valid.to(adv.dtype).reshape(s, n // group_size, group_size, k)
    a = (adv * valid).reshape(s, n // group_size, group_size, k)
    count, total = w.sum(dim=2, keepdim=True), a.sum(dim=2, keepdim=True)
    others = count - w
    loo_mean = (total - a) / others.clamp(min=1.0)
    out = adv.reshape(s, n // group_size, group_size, k) - torch.where(others > 0, loo_mean, torch.zeros_like(loo_mean))
    if norm_by_std:
        mean = total / count.clamp(min=1.0)
        var = (((a - mean) * w) ** 2).sum(dim=2, keepdim=True) / (count - 1).clamp(min=1.0)
        out = torch.where(count > 1, out / (var.sqrt() + eps), out)
    return out.reshape(s, n, k)


def bi_level_gae(
    chunk_rewards: Tensor,
    entry_values: Tensor,
    chunk_dones: Tensor,
    gamma: float,
    lam: float,
    high_level_gamma: float,
) -> tuple[Tensor, Tensor]:
    """VAGEN's bi-level GAE with a chunk as the turn and its L log-prob entries as the response.

    chunk_rewards: [T, N]; chunk_dones: bool [T, N]; entry_values: [T + 1, N, L]
    (row T = values after the last chunk; a chunk's value is that of its first entry,
    which for the OFT value head is V(observation)).
    High level: GAE across chunks with high_level_gamma and lam gives the chunk advantage
    A_t and return G_t = A_t + V_t. Low level: GAE over the chunk's entries with gamma and
    lam, where the last entry receives G_t as its reward-plus-next-value, so a chunk of one
    entry gets exactly A_t.
    Returns (advantages [T, N, L], returns [T, N, L]) per entry.
    """
    chunk_values = entry_values[..., 0]
    _, high_ret = gae(chunk_rewards, chunk_values, chunk_dones, high_level_gamma, lam)
    v = entry_values[:-1]
    adv = torch.zeros_like(v)
    last = high_ret - v[..., -1]  # delta of the last entry
    adv[..., -1] = last
    for j in reversed(range(v.shape[-1] - 1)):
        delta = gamma * v[..., j + 1] - v[..., j]
        last = delta + gamma * lam * last
        adv[..., j] = last
    return adv, adv + v
