"""`compute_advantages`: a rollout batch (embodied_rl/rollout_batch.py, which describes every
field) -> the same batch with its advantages, value targets and loss mask.

Order: reward_norm -> reward_clip -> KL shaping -> truncation bootstrap (bootstrap_type
standard) -> estimator -> normalize_advantages -> advantage_clip. An estimator (registered in
ADVANTAGE_ESTIMATORS) sees the processed rewards at its granularity as `RewardSteps`.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from embodied_rl.algorithms import estimators as est
from embodied_rl.algorithms.kl import kl_penalty
from embodied_rl.algorithms.masks import (
    build_loss_mask,
    expand_steps_to_entries,
    group_entries,
    masked_whiten,
)
from embodied_rl.algorithms.registry import ADVANTAGE_ESTIMATORS
from embodied_rl.algorithms.rewards import (
    RunningRewardStats,
    clip_rewards,
    normalize_rewards,
)
from embodied_rl.config.schema.algorithm import AlgorithmConfig
from embodied_rl.rollout_batch import RolloutBatch


@dataclass
class RewardSteps:
    """Processed rewards at the estimator's granularity K (C = per env step, 1 = per chunk)."""

    rewards: Tensor  # [T, N, K]
    dones: Tensor  # bool [T, N, K]
    mask: Tensor  # bool [T, N, K]
    values: Tensor | None  # [T + 1, N, Kv]: RolloutBatch.values_with_bootstrap()
    num_entries: int  # L


@dataclass
class EstimatorOutput:
    advantages: Tensor  # [T, N, K'] with L % K' == 0 (K' = K, or L for estimators per log-prob entry)
    returns: Tensor | None = None  # [T, N, Kv] value targets (critic-based estimators only)
    keep_envs: Tensor | None = None  # bool [N]: envs that stay in the loss (GRPO dynamic sampling)


def _to_time(x: Tensor) -> Tensor:
    """[T, N, K] -> [T*K, N] in execution order."""
    t, n, k = x.shape
    return x.permute(0, 2, 1).reshape(t * k, n)


def _from_time(x: Tensor, k: int) -> Tensor:
    tk, n = x.shape
    return x.reshape(tk // k, k, n).permute(0, 2, 1)


def _require_values(steps: RewardSteps, adv_type: str, allowed: tuple[int, ...]) -> Tensor:
    v = steps.values
    if v is None:
        raise ValueError(f"adv_type={adv_type} needs the rollout's values [T, N, K] and last_values [N, K] from the value head")
    t, n, _ = steps.rewards.shape
    if v.dim() != 3 or v.shape[0] != t + 1 or v.shape[1] != n or v.shape[2] not in allowed:
        raise ValueError(
            f"the rollout's values with their last row have shape {tuple(v.shape)}, adv_type={adv_type} needs [{t + 1}, {n}, K] with K in {allowed} "
            "(action_level values need actor.model value_type action_level, chunk_level one value per chunk)"
        )
    return v


@ADVANTAGE_ESTIMATORS.register("gae")
def _gae(cfg: AlgorithmConfig, steps: RewardSteps) -> EstimatorOutput:
    k = steps.rewards.shape[-1]
    values = _require_values(steps, "gae", (k,))
    flat_values = torch.cat([_to_time(values[:-1]), values[-1, :, 0].unsqueeze(0)], dim=0)
    adv, ret = est.gae(_to_time(steps.rewards), flat_values, _to_time(steps.dones), cfg.gamma, cfg.gae_lambda)
    adv = _from_time(adv, k)
    if cfg.group_baseline:  # value targets stay the critic's own returns
        adv = est.leave_one_out_centered(adv, steps.mask, cfg.group_size, cfg.norm_adv_by_std_in_grpo)
    return EstimatorOutput(adv, _from_time(ret, k))


@ADVANTAGE_ESTIMATORS.register("reinforce_pp")
def _reinforce_pp(cfg: AlgorithmConfig, steps: RewardSteps) -> EstimatorOutput:
    k = steps.rewards.shape[-1]
    ret = _from_time(est.discounted_returns(_to_time(steps.rewards), _to_time(steps.dones), cfg.gamma), k)
    return EstimatorOutput(masked_whiten(ret, steps.mask))


@ADVANTAGE_ESTIMATORS.register("grpo")
def _grpo(cfg: AlgorithmConfig, steps: RewardSteps) -> EstimatorOutput:
    episodes = (steps.dones & steps.mask).sum(dim=(0, 2))
    if bool((episodes > 1).any()):
        raise ValueError(
            "adv_type=grpo scores one episode per env and rollout epoch, but an env finished several; "
            "set env.train.auto_reset: false (or pass a step_mask that keeps only the first episode)"
        )
    scores = (steps.rewards * steps.mask).sum(dim=(0, 2))
    adv, uniform = est.group_normalized_scores(scores, cfg.group_size, cfg.norm_adv_by_std_in_grpo)
    keep = ~uniform if cfg.drop_uniform_groups else None
    return EstimatorOutput(adv.view(1, -1, 1).expand(steps.rewards.shape[0], -1, 1), keep_envs=keep)


@ADVANTAGE_ESTIMATORS.register("bi_level_gae")
def _bi_level_gae(cfg: AlgorithmConfig, steps: RewardSteps) -> EstimatorOutput:
    num_entries = steps.num_entries
    allowed = tuple(k for k in range(1, num_entries + 1) if num_entries % k == 0)
    values = _require_values(steps, "bi_level_gae", allowed)
    entry_values = expand_steps_to_entries(values, num_entries)
    adv, ret = est.bi_level_gae(
        steps.rewards[..., 0], entry_values, steps.dones[..., 0], cfg.gamma, cfg.gae_lambda, cfg.high_level_gamma
    )
    # value target of each value slot = return at its last entry (= chunk return G_t when K = 1)
    return EstimatorOutput(adv, group_entries(ret, num_entries // values.shape[-1])[..., -1])


def _num_entries(batch: RolloutBatch, num_actions: int, action_dim: int | None) -> int:
    return num_actions * action_dim if action_dim is not None else int(batch.logprobs.shape[-1])


def _step_mask(dones: Tensor, step_mask: Tensor | None, auto_reset: bool | None) -> Tensor:
    if step_mask is not None:
        m = step_mask.bool()
        return m.unsqueeze(-1).expand_as(dones) if m.dim() == 2 else m
    if auto_reset is None:
        raise ValueError("compute_advantages needs step_mask= or auto_reset= (env.train.auto_reset) to mask invalid steps")
    return build_loss_mask(dones, auto_reset)


def _kl_per_step(cfg: AlgorithmConfig, batch: RolloutBatch, num_entries: int, num_actions: int) -> Tensor:
    if batch.ref_logprobs is None:
        raise ValueError(f"algorithm.kl_beta > 0 with kl_penalty={cfg.kl_penalty} needs the rollout's ref_logprobs")
    kl = kl_penalty(batch.logprobs, batch.ref_logprobs, cfg.kl_penalty)  # [T, N, L]
    return group_entries(kl, num_entries // num_actions).sum(-1)  # [T, N, C]: KL of each action


def prepare_reward_steps(
    cfg: AlgorithmConfig,
    batch: RolloutBatch,
    step_mask: Tensor,
    num_entries: int,
    reward_stats: RunningRewardStats | None = None,
) -> RewardSteps:
    """Normalise, clip, KL-shape and bootstrap rewards at the configured granularity."""
    rewards = batch.rewards.float() * step_mask
    dones = batch.dones.bool()
    num_actions = rewards.shape[-1]
    chunk = cfg.reward_type == "chunk_level"
    if chunk:
        rewards, dones, mask = rewards.sum(-1, keepdim=True), dones.any(-1, keepdim=True), step_mask.any(-1, keepdim=True)
    else:
        mask = step_mask
    rewards = normalize_rewards(
        rewards, mask, cfg.reward_norm, group_size=cfg.group_size, shift_only=cfg.reward_shift,
        scale_only=cfg.reward_scale, stats=reward_stats,
    )
    rewards = clip_rewards(rewards, cfg.reward_clip)
    if cfg.kl_beta > 0:
        kl = _kl_per_step(cfg, batch, num_entries, num_actions) * step_mask
        rewards = rewards - cfg.kl_beta * (kl.sum(-1, keepdim=True) if chunk else kl)
    # bootstrap_type none: a truncation ends the task like a termination (dones already say so).
    has_trunc = cfg.bootstrap_type == "standard" and bool(batch.truncations.any())
    if has_trunc and batch.bootstrap_values is None and cfg.uses_critic:
        raise ValueError("the rollout has truncated episodes but no bootstrap_values (V(final_obs))")
    if has_trunc and batch.bootstrap_values is not None:  # critic-free estimators bootstrap only if given values
        trunc = (batch.truncations.bool() & step_mask).float()
        boot = batch.bootstrap_values.float()
        boot = boot.unsqueeze(-1) if boot.dim() == 2 else boot
        extra = trunc * boot  # [T, N, C]
        discount = cfg.high_level_gamma if cfg.adv_type == "bi_level_gae" else cfg.gamma
        rewards = rewards + discount * (extra.sum(-1, keepdim=True) if chunk else extra)
    return RewardSteps(rewards, dones, mask, batch.values_with_bootstrap(), num_entries)


def compute_advantages(
    cfg: AlgorithmConfig,
    batch: RolloutBatch,
    *,
    action_dim: int | None = None,
    auto_reset: bool | None = None,
    step_mask: Tensor | None = None,
    reward_stats: RunningRewardStats | None = None,
) -> RolloutBatch:
    """`batch` with the targets of the configured estimator set (see RolloutBatch): advantages,
    loss_mask, processed_rewards, and for critic-based estimators returns and value_mask.

    action_dim: entries per action (L = C * action_dim); default: L of batch.logprobs.
    step_mask: bool [T, N] or [T, N, C], the env steps that count; else built from the dones
    with auto_reset (env.train.auto_reset).
    """
    with torch.no_grad():
        num_actions = batch.rewards.shape[-1]
        num_entries = _num_entries(batch, num_actions, action_dim)
        step_mask = _step_mask(batch.dones.bool(), step_mask, auto_reset)
        steps = prepare_reward_steps(cfg, batch, step_mask, num_entries, reward_stats)
        out = ADVANTAGE_ESTIMATORS.get(cfg.adv_type)(cfg, steps)
        entry_mask = expand_steps_to_entries(step_mask, num_entries)
        if out.keep_envs is not None:
            entry_mask = entry_mask & out.keep_envs.view(1, -1, 1)
        adv = expand_steps_to_entries(out.advantages, num_entries)
        if cfg.normalize_advantages:
            adv = masked_whiten(adv, entry_mask)
        if cfg.advantage_clip is not None:
            adv = adv.clamp(-cfg.advantage_clip, cfg.advantage_clip)
        value_mask = None
        if out.returns is not None:
            value_mask = group_entries(entry_mask, num_entries // out.returns.shape[-1]).any(-1)
        return batch.with_targets(advantages=torch.where(entry_mask, adv, torch.zeros_like(adv)), loss_mask=entry_mask,
                                  processed_rewards=steps.rewards, returns=out.returns, value_mask=value_mask)
