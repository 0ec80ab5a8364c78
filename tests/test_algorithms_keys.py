"""Every AlgorithmConfig key has an effect: no key is accepted and then ignored.

Each case changes exactly one key from a base config and shows that the advantages or the
loss and its gradient change. A new field without a case (or a RUNTIME_KEYS entry saying
who consumes it) fails test_every_key_has_a_case.
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from embodied_rl.algorithms import (
    RunningRewardStats,
    compute_actor_critic_loss,
    compute_advantages,
)
from embodied_rl.config.schema.algorithm import (
    RUNTIME_KEYS,
    AlgorithmConfig,
    algorithm_keys,
)
from tests.algo_rollouts import make_rollout

T, N, C, A = 5, 8, 2, 3
L = C * A


def adv_probe(cfg: AlgorithmConfig) -> torch.Tensor:
    """Advantages, mask and value targets on a rollout with partial chunks and truncations."""
    value_k = C if cfg.reward_type == "action_level" else 1
    auto_reset = cfg.adv_type != "grpo"
    b = make_rollout(7, T, N, C, A, auto_reset=auto_reset, p_done=0.15, value_k=value_k)
    b.rewards[:, 4:6] = 0.0  # one GRPO group (size 2) with all-equal returns
    b.bootstrap_values[:, 4:6] = 0.0
    b.rewards[:, 0] += 3.0  # a large reward for clipping to bite
    stats = RunningRewardStats(count=10.0, mean=0.5, var=4.0)
    out = compute_advantages(cfg, b, auto_reset=auto_reset, reward_stats=stats)
    parts = [out.advantages.flatten(), out.loss_mask.float().flatten()]
    if out.returns is not None:
        parts.append(out.returns.flatten())
    return torch.cat(parts)


def loss_probe(cfg: AlgorithmConfig) -> torch.Tensor:
    """Loss and its gradients w.r.t. log-probs and values on a fixed micro-batch."""
    g = torch.Generator().manual_seed(3)
    B = 16
    old = -torch.rand(B, L, generator=g) * 2
    lp = (old + torch.randn(B, L, generator=g) * 0.5).requires_grad_(True)
    adv = torch.randn(B, L, generator=g) * 2
    mask = torch.ones(B, L, dtype=torch.bool)
    mask[:4, 4:] = False  # chunks whose episode ended after the first action (action = 3 tokens)
    old_v = torch.randn(B, C, generator=g)
    v = (old_v + torch.randn(B, C, generator=g) * 0.5).requires_grad_(True)
    ret = old_v + torch.randn(B, C, generator=g) * 3
    loss, _ = compute_actor_critic_loss(
        cfg, logprobs=lp, old_logprobs=old, advantages=adv, loss_mask=mask,
        entropy=torch.rand(B, L, generator=g) * (1 + lp), values=v, old_values=old_v, returns=ret,
        ref_logprobs=old - 0.3 * torch.rand(B, L, generator=g), action_dim=A,
    )
    loss.backward()
    return torch.cat([loss.detach().view(1), lp.grad.flatten(), v.grad.flatten()])


# key: (base overrides, new value, probe)
CASES: dict[str, tuple[dict, object, object]] = {
    "adv_type": ({}, "reinforce_pp", adv_probe),
    "reward_type": ({"adv_type": "reinforce_pp"}, "action_level", adv_probe),
    "gamma": ({}, 0.8, adv_probe),
    "gae_lambda": ({}, 0.5, adv_probe),
    "high_level_gamma": ({"adv_type": "bi_level_gae"}, 0.5, adv_probe),
    "group_size": ({"adv_type": "grpo", "group_size": 2}, 4, adv_probe),
    "norm_adv_by_std_in_grpo": ({"adv_type": "grpo", "group_size": 2, "normalize_advantages": False}, False, adv_probe),
    "drop_uniform_groups": ({"adv_type": "grpo", "group_size": 2}, True, adv_probe),
    "group_baseline": ({"group_size": 2}, True, adv_probe),
    "normalize_advantages": ({}, False, adv_probe),
    "advantage_clip": ({}, 0.5, adv_probe),
    "bootstrap_type": ({}, "none", adv_probe),
    "reward_norm": ({}, "batch", adv_probe),
    "reward_scale": ({"reward_norm": "running"}, True, adv_probe),
    "reward_shift": ({"reward_norm": "running"}, True, adv_probe),
    "reward_clip": ({}, 0.5, adv_probe),
    "kl_beta": ({}, 0.5, adv_probe),
    "kl_penalty": ({"kl_beta": 0.5}, "mse", adv_probe),
    "logprob_type": ({}, "chunk_level", loss_probe),
    "entropy_type": ({"entropy_bonus": 0.1}, "action_level", loss_probe),
    "ratio_clip_eps": ({}, 0.05, loss_probe),
    "clip_ratio_low": ({}, 0.05, loss_probe),
    "clip_ratio_high": ({}, 0.05, loss_probe),
    "clip_ratio_c": ({}, 1.5, loss_probe),
    "loss_agg_func": ({}, "seq-mean-token-sum-norm", loss_probe),
    "entropy_bonus": ({}, 0.1, loss_probe),
    "use_kl_loss": ({}, True, loss_probe),
    "kl_loss_coef": ({"use_kl_loss": True}, 0.5, loss_probe),
    "early_stop_imp_ratio": ({}, 2.0, loss_probe),
    "value_loss_coef": ({}, 0.25, loss_probe),
    "value_clip": ({}, None, loss_probe),
    "huber_delta": ({}, 0.5, loss_probe),
}


def test_every_key_has_a_case():
    missing = [k for k in algorithm_keys() if k not in CASES and k not in RUNTIME_KEYS]
    assert not missing, f"AlgorithmConfig keys without an effect test or a RUNTIME_KEYS consumer: {missing}"
    assert all(reason.strip() for reason in RUNTIME_KEYS.values())
    assert set(CASES) | set(RUNTIME_KEYS) == set(algorithm_keys())


@pytest.mark.parametrize("key", sorted(CASES))
def test_changing_one_key_changes_the_result(key):
    base_kw, value, probe = CASES[key]
    base = AlgorithmConfig(**base_kw)
    changed = dataclasses.replace(base, **{key: value})
    assert [f.name for f in dataclasses.fields(base) if getattr(base, f.name) != getattr(changed, f.name)] == [key]
    a, b = probe(base), probe(changed)
    assert a.shape != b.shape or not torch.allclose(a, b, atol=1e-6), f"algorithm.{key}={value!r} had no effect"


def test_kl_penalty_also_changes_the_kl_loss():
    base = AlgorithmConfig(use_kl_loss=True, kl_loss_coef=1.0)
    assert not torch.allclose(loss_probe(base), loss_probe(dataclasses.replace(base, kl_penalty="low_var_kl")))


def test_ratio_clip_eps_is_the_default_of_both_sides():
    cfg = AlgorithmConfig(ratio_clip_eps=0.1)
    assert (cfg.clip_low, cfg.clip_high) == (0.1, 0.1)
    cfg = AlgorithmConfig(ratio_clip_eps=0.1, clip_ratio_high=0.28)
    assert (cfg.clip_low, cfg.clip_high) == (0.1, 0.28)
    # an explicit side that equals the shorthand gives the same loss as the shorthand alone
    assert torch.equal(loss_probe(AlgorithmConfig(ratio_clip_eps=0.1)),
                       loss_probe(AlgorithmConfig(ratio_clip_eps=0.3, clip_ratio_low=0.1, clip_ratio_high=0.1)))


def test_direction_of_effects():
    """Spot checks that keys act as documented, not just 'differently'."""
    adv = compute_advantages(AlgorithmConfig(advantage_clip=0.5), make_rollout(1, T, N, C, A, value_k=1), auto_reset=True)
    assert adv.advantages.abs().max() <= 0.5
    b = make_rollout(2, T, N, C, A, value_k=1)
    b.rewards *= 10
    b.truncations[:] = False  # the bootstrap V(final_obs) is added after clipping
    clipped = compute_advantages(AlgorithmConfig(reward_clip=1.0), b, auto_reset=True).processed_rewards
    assert clipped.abs().max() <= 1.0 + 1e-6
    shaped = compute_advantages(AlgorithmConfig(kl_beta=1.0, kl_penalty="abs"), b, auto_reset=True).processed_rewards
    plain = compute_advantages(AlgorithmConfig(), b, auto_reset=True).processed_rewards
    assert (shaped <= plain + 1e-6).all() and (shaped < plain).any()  # a non-negative KL only lowers rewards
