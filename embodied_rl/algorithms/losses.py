"""PPO/GRPO policy loss, value loss and the combined `compute_actor_critic_loss`.

The runtime flattens (time, env) into a micro-batch of B chunks: log-prob, entropy, advantage
and mask tensors are [B, L] (L = the policy's log-prob entries per chunk), value tensors [B, K] (K = C or 1, or L).
Per-entry loss terms are pure functions; aggregation follows `loss_agg_func` with one
row = one chunk.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from embodied_rl.algorithms.aggregation import aggregate_loss
from embodied_rl.algorithms.kl import kl_penalty
from embodied_rl.algorithms.masks import group_entries, masked_mean
from embodied_rl.config.schema.algorithm import AlgorithmConfig


def ppo_clipped_surrogate(
    logprobs: Tensor, old_logprobs: Tensor, advantages: Tensor, clip_low: float, clip_high: float, clip_c: float | None = None
) -> dict[str, Tensor]:
    """Per-entry PPO loss max(-A r, -A clip(r, 1-low, 1+high)), dual-clipped at -A c for A < 0.

    All inputs [B, S]. Returns dict of [B, S] tensors: loss, ratio, clipped (clip branch
    active), dual_clipped (dual-clip branch active).
    """
    log_ratio = (logprobs - old_logprobs).clamp(-20.0, 20.0)  # exp() must not overflow
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    loss = torch.maximum(unclipped, clipped)
    clip_active = clipped > unclipped
    dual_active = torch.zeros_like(clip_active)
    if clip_c is not None:
        cap = -advantages * clip_c
        dual_active = (advantages < 0) & (loss > cap)
        loss = torch.where(dual_active, cap, loss)
    return {"loss": loss, "ratio": ratio, "log_ratio": log_ratio, "clipped": clip_active, "dual_clipped": dual_active}


def value_loss(
    values: Tensor, old_values: Tensor, returns: Tensor, value_clip: float | None, huber_delta: float | None
) -> tuple[Tensor, Tensor]:
    """Per-entry value loss, [B, K] -> ([B, K] loss, [B, K] bool clip-branch-active).

    Error is Huber(delta) or 0.5 * squared; with value_clip the larger of the losses of the
    new and of the clipped values (old_values +- value_clip) is taken.
    """

    def err(pred: Tensor) -> Tensor:
        if huber_delta is None:
            return 0.5 * (returns - pred).square()
        return F.huber_loss(pred, returns, reduction="none", delta=huber_delta)

    loss = err(values)
    if value_clip is None:
        return loss, torch.zeros_like(loss, dtype=torch.bool)
    clipped_values = old_values + (values - old_values).clamp(-value_clip, value_clip)
    loss_clipped = err(clipped_values)
    return torch.maximum(loss, loss_clipped), loss_clipped > loss


def fit_value_loss(values: Tensor, returns: Tensor, mask: Tensor, huber_delta: float | None) -> Tensor:
    """Masked mean value loss without clipping (there are no rollout values to clip to), for a
    value-only pass: values, returns [B, K], mask bool [B, K] -> scalar."""
    loss, _ = value_loss(values, values.detach(), returns, None, huber_delta)
    return masked_mean(loss, mask)


def explained_variance_tensor(values: Tensor, returns: Tensor, mask: Tensor) -> Tensor:
    """1 - Var[returns - values] / Var[returns] over valid entries (nan if returns are constant),
    as a 0-dim tensor on the inputs' device (no host sync)."""
    def var(x: Tensor) -> Tensor:
        m = masked_mean(x, mask)
        return masked_mean((x - m) ** 2, mask)

    var_ret = var(returns)
    ev = 1.0 - var(returns - values) / var_ret
    return torch.where(var_ret == 0.0, torch.full_like(ev, float("nan")), ev)


def explained_variance(values: Tensor, returns: Tensor, mask: Tensor) -> float:
    """`explained_variance_tensor` as a float."""
    return float(explained_variance_tensor(values, returns, mask))


_GROUP = {"token_level": lambda a, l: 1, "action_level": lambda a, l: a, "chunk_level": lambda a, l: l}


def _regroup(x: Tensor, mask: Tensor, group: int, how: str) -> Tensor:
    """[B, L] -> [B, L // group] over each action's/chunk's valid entries.

    how: "sum" (log-probs, entropies: joint quantity of the executed entries), "mean"
    (advantages) or "any" (mask: an action/chunk counts if any of its entries is valid, e.g.
    a chunk whose episode ended mid-chunk keeps the executed part).
    """
    if group == 1:
        return x
    g, gm = group_entries(x, group), group_entries(mask, group)
    if how == "any":
        return gm.any(-1)
    total = (g * gm).sum(-1)
    return total if how == "sum" else total / gm.sum(-1).clamp(min=1)


def compute_actor_critic_loss(
    cfg: AlgorithmConfig,
    *,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    loss_mask: Tensor,
    entropy: Tensor | None = None,
    values: Tensor | None = None,
    old_values: Tensor | None = None,
    returns: Tensor | None = None,
    value_mask: Tensor | None = None,
    ref_logprobs: Tensor | None = None,
    action_dim: int | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Scalar training loss of one micro-batch and its metrics (detached 0-dim float tensors on
    the loss's device: the caller converts them once per training step, not once per metric).

    logprobs, old_logprobs, advantages, entropy, ref_logprobs: [..., L] (leading dims are
    flattened to B); loss_mask bool [..., L]; values, old_values, returns: [..., K] and
    value_mask bool [..., K] (default: derived from loss_mask), all None for critic-free
    estimators.
    action_dim (A) is needed for logprob_type/entropy_type action_level.
    loss = policy - entropy_bonus * entropy + kl_loss_coef * kl [+ value_loss_coef * value].
    """
    num_entries = logprobs.shape[-1]
    flat = lambda x: None if x is None else x.reshape(-1, x.shape[-1])
    logprobs, old_logprobs, advantages = flat(logprobs), flat(old_logprobs), flat(advantages)
    mask = flat(loss_mask).bool()
    if "action_level" in (cfg.logprob_type, cfg.entropy_type) and action_dim is None:
        raise ValueError("logprob_type/entropy_type action_level needs action_dim= (log-prob entries per action)")
    group = _GROUP[cfg.logprob_type](action_dim, num_entries)
    pg = ppo_clipped_surrogate(
        _regroup(logprobs, mask, group, "sum"), _regroup(old_logprobs, mask, group, "sum"),
        _regroup(advantages, mask, group, "mean"), cfg.clip_low, cfg.clip_high, cfg.clip_ratio_c,
    )
    pg_mask = _regroup(mask, mask, group, "any")
    policy_loss = aggregate_loss(pg["loss"], pg_mask, cfg.loss_agg_func)
    loss = policy_loss
    ratio = pg["ratio"].detach()
    any_valid = pg_mask.any()
    one = torch.ones((), dtype=ratio.dtype, device=ratio.device)
    # Without a valid entry the ratio metrics read 1 (no change); no boolean indexing, which syncs.
    ratio_max = torch.where(pg_mask, ratio, torch.full_like(ratio, -torch.inf)).max() if ratio.numel() else one
    m = {
        "actor/policy_loss": policy_loss,
        "actor/clip_fraction": masked_mean(pg["clipped"].float(), pg_mask),
        "actor/dual_clip_fraction": masked_mean(pg["dual_clipped"].float(), pg_mask),
        "actor/approx_kl": masked_mean(pg["ratio"] - 1.0 - pg["log_ratio"], pg_mask),
        "actor/ratio_mean": torch.where(any_valid, masked_mean(ratio, pg_mask), one),
        "actor/ratio_max": torch.where(any_valid, ratio_max, one),
        # Entries the policy can no longer sample (log-prob -inf, e.g. outside a truncated support): zero gradient.
        "actor/left_support_fraction": masked_mean(torch.isinf(logprobs).float(), mask),
    }
    if entropy is not None:
        egroup = _GROUP[cfg.entropy_type](action_dim, num_entries)
        ent_mask = _regroup(mask, mask, egroup, "any")
        ent = aggregate_loss(_regroup(flat(entropy), mask, egroup, "sum"), ent_mask, cfg.loss_agg_func)
        m["actor/entropy"] = ent
        if cfg.entropy_bonus > 0:
            loss = loss - cfg.entropy_bonus * ent
    elif cfg.entropy_bonus > 0:
        raise ValueError("algorithm.entropy_bonus > 0 needs the policy entropy (entropy=[B, L])")
    if cfg.use_kl_loss:
        if ref_logprobs is None:
            raise ValueError("algorithm.use_kl_loss needs ref_logprobs [B, L]")
        kl = aggregate_loss(kl_penalty(logprobs, flat(ref_logprobs), cfg.kl_penalty), mask, cfg.loss_agg_func)
        m["actor/kl_loss"] = kl
        loss = loss + cfg.kl_loss_coef * kl
    if values is not None:
        if old_values is None or returns is None:
            raise ValueError("the value loss needs values, old_values and returns together")
        values, old_values, returns = flat(values), flat(old_values), flat(returns)
        vmask = flat(value_mask).bool() if value_mask is not None else _regroup(mask, mask, num_entries // values.shape[-1], "any")
        v_loss_mat, v_clipped = value_loss(values, old_values, returns, cfg.value_clip, cfg.huber_delta)
        v_loss = masked_mean(v_loss_mat, vmask)
        loss = loss + cfg.value_loss_coef * v_loss
        m["critic/value_loss"] = v_loss
        m["critic/value_clip_fraction"] = masked_mean(v_clipped.float(), vmask)
        m["critic/explained_variance"] = explained_variance_tensor(values.detach(), returns, vmask)
    skip = torch.zeros((), dtype=torch.bool, device=loss.device)
    if cfg.early_stop_imp_ratio is not None:
        skip = m["actor/ratio_max"] > cfg.early_stop_imp_ratio
        # Zero loss that keeps the graph, so every rank still runs a (no-op) backward; chosen on
        # the device, so the decision costs no host sync.
        loss = torch.where(skip, loss * 0.0, loss)
    m["actor/skipped"] = skip.float()
    m["actor/total_loss"] = loss
    return loss, {k: v.detach().float() for k, v in m.items()}
