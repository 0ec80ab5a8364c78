"""PPO/value/KL losses and their aggregation, plus what each loss term means."""
from __future__ import annotations

import pytest
import torch

from embodied_rl.algorithms import compute_actor_critic_loss, ppo_clipped_surrogate
from embodied_rl.algorithms.aggregation import aggregate_loss
from embodied_rl.algorithms.kl import kl_penalty
from embodied_rl.algorithms.losses import value_loss
from embodied_rl.algorithms.rewards import RunningRewardStats, normalize_rewards
from embodied_rl.config.schema.algorithm import AlgorithmConfig
from embodied_rl.configure import load_config
from embodied_rl.errors import ConfigError


def test_ppo_at_ratio_one_is_advantage_weighted_logprob_gradient():
    torch.manual_seed(0)
    B, L = 6, 4
    old = -torch.rand(B, L)
    lp = old.clone().requires_grad_(True)
    adv, mask = torch.randn(B, L), torch.rand(B, L) > 0.3
    loss, m = compute_actor_critic_loss(AlgorithmConfig(), logprobs=lp, old_logprobs=old, advantages=adv, loss_mask=mask)
    loss.backward()
    want = -adv * mask / mask.sum()  # d/dlp of -mean(A * logp) over valid tokens
    torch.testing.assert_close(lp.grad, want)
    assert m["actor/ratio_mean"] == pytest.approx(1.0) and m["actor/clip_fraction"] == 0.0


def test_clipped_regions_have_zero_gradient():
    old = torch.zeros(4, 1)
    # (ratio, advantage): above 1+eps with A>0 and below 1-eps with A<0 are clipped
    ratio = torch.tensor([[1.5], [0.5], [1.5], [0.5]])
    adv = torch.tensor([[1.0], [-1.0], [-1.0], [1.0]])
    lp = ratio.log().requires_grad_(True)
    out = ppo_clipped_surrogate(lp, old, adv, 0.2, 0.2)
    out["loss"].sum().backward()
    assert lp.grad[:2].abs().max() == 0.0
    assert (lp.grad[2:].abs() > 0).all()
    assert out["clipped"][:, 0].tolist() == [True, True, False, False]


def test_asymmetric_clip_bounds():
    lp = torch.tensor([[1.25], [1.35]]).log().requires_grad_(True)
    out = ppo_clipped_surrogate(lp, torch.zeros(2, 1), torch.ones(2, 1), 0.2, 0.28)
    out["loss"].sum().backward()
    assert lp.grad[0, 0] != 0 and lp.grad[1, 0] == 0  # 1.25 inside [0.8, 1.28], 1.35 outside


def test_dual_clip_bounds_loss_for_negative_advantages():
    ratios = torch.tensor([[1.0], [2.0], [5.0], [50.0]])
    adv = -torch.ones(4, 1) * 2.0
    plain = ppo_clipped_surrogate(ratios.log(), torch.zeros(4, 1), adv, 0.2, 0.2)["loss"]
    dual = ppo_clipped_surrogate(ratios.log(), torch.zeros(4, 1), adv, 0.2, 0.2, clip_c=3.0)
    assert plain[-1, 0] == pytest.approx(100.0)  # unbounded without dual clip
    assert (dual["loss"] <= 2.0 * 3.0 + 1e-6).all()  # capped at -A * c
    assert dual["dual_clipped"][:, 0].tolist() == [False, False, True, True]
    pos = ppo_clipped_surrogate(ratios.log(), torch.zeros(4, 1), -adv, 0.2, 0.2, clip_c=3.0)
    assert not pos["dual_clipped"].any()  # positive advantages untouched


def test_value_loss_clip_and_huber():
    ret, old = torch.tensor([[1.0]]), torch.tensor([[0.0]])
    v = torch.tensor([[0.9]], requires_grad=True)
    loss, clipped = value_loss(v, old, ret, value_clip=0.2, huber_delta=None)
    # clipped value 0.2 has larger loss 0.5*0.8^2 than 0.5*0.1^2: it is taken, so no gradient
    assert loss.item() == pytest.approx(0.32) and clipped.all()
    loss.sum().backward()
    assert v.grad.item() == 0.0
    huber, _ = value_loss(torch.tensor([[5.0]]), old, ret, value_clip=None, huber_delta=1.0)
    assert huber.item() == pytest.approx(1.0 * (4.0 - 0.5))


def test_aggregation_modes_on_partial_masks():
    loss = torch.tensor([[1.0, 1.0, 1.0, 1.0], [4.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, True, True], [True, False, False, False]])
    assert aggregate_loss(loss, mask, "token-mean").item() == pytest.approx(8 / 5)
    assert aggregate_loss(loss, mask, "seq-mean-token-sum").item() == pytest.approx((4 + 4) / 2)
    assert aggregate_loss(loss, mask, "seq-mean-token-mean").item() == pytest.approx((1 + 4) / 2)
    assert aggregate_loss(loss, mask, "seq-mean-token-sum-norm").item() == pytest.approx((4 / 4 + 4 / 4) / 2)


def test_kl_kinds():
    lp, ref = torch.tensor([-1.0, -2.0]), torch.tensor([-1.5, -1.0])
    d = lp - ref
    torch.testing.assert_close(kl_penalty(lp, ref, "kl"), d)
    torch.testing.assert_close(kl_penalty(lp, ref, "abs"), d.abs())
    torch.testing.assert_close(kl_penalty(lp, ref, "mse"), 0.5 * d**2)
    torch.testing.assert_close(kl_penalty(lp, ref, "low_var_kl"), torch.exp(-d) + d - 1)
    # The rollout stores only sampled-token log-probs, so no exact full-distribution KL is offered.
    with pytest.raises(ConfigError, match="algorithm.kl_penalty='full' is not valid"):
        kl_penalty(lp, ref, "full")


def test_early_stop_skips_micro_batch_with_zero_gradient():
    lp = torch.tensor([[0.0, 2.0]], requires_grad=True)  # ratio e^2 ~ 7.4
    cfg = AlgorithmConfig(early_stop_imp_ratio=5.0)
    loss, m = compute_actor_critic_loss(cfg, logprobs=lp, old_logprobs=torch.zeros(1, 2),
                                        advantages=torch.ones(1, 2), loss_mask=torch.ones(1, 2, dtype=torch.bool))
    loss.backward()
    assert m["actor/skipped"] == 1.0 and loss.item() == 0.0 and lp.grad.abs().max() == 0.0


def test_metrics_names():
    B, L, K = 4, 6, 2
    cfg = AlgorithmConfig(use_kl_loss=True)
    _, m = compute_actor_critic_loss(
        cfg, logprobs=-torch.rand(B, L), old_logprobs=-torch.rand(B, L), advantages=torch.randn(B, L),
        loss_mask=torch.ones(B, L, dtype=torch.bool), entropy=torch.rand(B, L), values=torch.randn(B, K),
        old_values=torch.randn(B, K), returns=torch.randn(B, K), ref_logprobs=-torch.rand(B, L))
    for name in ("actor/policy_loss", "actor/clip_fraction", "actor/approx_kl", "actor/ratio_mean", "actor/ratio_max",
                 "actor/dual_clip_fraction", "actor/entropy", "actor/kl_loss", "critic/value_loss",
                 "critic/value_clip_fraction", "critic/explained_variance", "actor/skipped", "actor/left_support_fraction"):
        assert isinstance(m[name], torch.Tensor) and m[name].shape == () and not m[name].requires_grad, name


def test_tokens_that_left_the_top_k_support_are_counted_and_get_no_gradient():
    """A sampled bin that falls out of the top-k after an update has log-prob -inf under the
    processed logits: it is counted, and the loss cannot push it back (zero gradient)."""
    from embodied_rl.models.openvla_oft.sampling import process_logits, token_logprobs

    old_logits = torch.tensor([[[3.0, 2.0, 1.0, 0.0]]])  # bins 0-2 in the top 3; bin 2 sampled
    new_logits = torch.tensor([[[3.0, 2.0, 0.5, 1.0]]], requires_grad=True)  # bin 3 overtook bin 2
    token = torch.tensor([[2]])
    old_lp = token_logprobs(process_logits(old_logits, 1.0, 3), token)
    new_lp = token_logprobs(process_logits(new_logits, 1.0, 3), token)
    assert torch.isfinite(old_lp).all() and torch.isinf(new_lp).all()
    loss, m = compute_actor_critic_loss(AlgorithmConfig(), logprobs=torch.cat([new_lp, old_lp], -1),
                                        old_logprobs=torch.cat([old_lp, old_lp], -1).detach(),
                                        advantages=torch.ones(1, 2), loss_mask=torch.ones(1, 2, dtype=torch.bool))
    assert m["actor/left_support_fraction"] == 0.5
    loss.backward()
    assert new_logits.grad[0, 0, 2] == 0.0


def test_running_reward_stats_match_global_and_roundtrip():
    stats, chunks = RunningRewardStats(), [torch.randn(3, 4, 2) * 3 + 1 for _ in range(4)]
    for c in chunks:
        normalize_rewards(c, torch.ones_like(c, dtype=torch.bool), "running", stats=stats)
    allr = torch.cat([c.flatten() for c in chunks]).double()
    assert stats.mean == pytest.approx(float(allr.mean()), rel=1e-6)
    assert stats.var == pytest.approx(float(allr.var(unbiased=False)), rel=1e-6)
    other = RunningRewardStats()
    other.load_state_dict(stats.state_dict())
    assert other == stats


@pytest.mark.parametrize("key,value,match", [
    ("adv_type", "ppo2", "gae"), ("loss_agg_func", "sum", "token-mean"), ("kl_penalty", "js", "low_var_kl"),
    ("reward_norm", "zscore", "running"), ("logprob_type", "seq", "chunk_level"), ("bootstrap_type", "always", "none"),
])
def test_unknown_names_are_one_line_errors_listing_valid_names(key, value, match):
    with pytest.raises(ConfigError, match=match) as err:
        load_config("maniskill_ppo_tiny", [f"algorithm.{key}={value}"], plan=False)
    assert "\n" not in str(err.value) and f"algorithm.{key}" in str(err.value)


def test_bootstrap_type_none_without_a_critic_is_rejected():
    with pytest.raises(ConfigError, match="algorithm.bootstrap_type=none .* no critic") as err:
        load_config("maniskill_grpo_tiny", ["algorithm.bootstrap_type=none"], plan=False)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("kw", [
    {"adv_type": "grpo", "group_size": 1}, {"adv_type": "bi_level_gae", "reward_type": "action_level"},
    {"reward_scale": True}, {"reward_norm": "batch", "reward_scale": True, "reward_shift": True},
    {"clip_ratio_c": 1.0}, {"gamma": 1.5}, {"ratio_clip_eps": 1.0},
])
def test_contradictory_settings_are_rejected(kw):
    with pytest.raises(ConfigError):
        AlgorithmConfig(**kw)


def test_rollout_explained_variance_scores_the_collecting_critic_on_the_whole_batch():
    """rollout/explained_variance: the values the rollout recorded for its T steps [T, N, 1] (not
    the last value) against the value targets [T, N, 1], over the valid entries only."""
    from embodied_rl.rollout_batch import RolloutBatch
    from embodied_rl.workers.actor.batch import rollout_stats

    returns = torch.tensor([[1.0, 2.0], [3.0, 4.0]]).unsqueeze(-1)
    values = torch.tensor([[1.0, 2.0], [3.0, 5.0]]).unsqueeze(-1)
    mask = torch.ones(2, 2, 4, dtype=torch.bool)
    batch = RolloutBatch(rewards=torch.zeros(2, 2, 8), dones=torch.zeros(2, 2, 8, dtype=torch.bool),
                         truncations=torch.zeros(2, 2, 8, dtype=torch.bool), logprobs=torch.zeros(2, 2, 4),
                         values=values, last_values=torch.tensor([[9.0], [9.0]]), processed_rewards=torch.zeros(2, 2, 1),
                         advantages=torch.zeros(2, 2, 4), loss_mask=mask, returns=returns,
                         value_mask=torch.ones(2, 2, 1, dtype=torch.bool))
    ev = rollout_stats(batch)["rollout/explained_variance"]
    # residuals 0, 0, 0, -1 (mean -0.25, var 0.1875); returns var 1.25
    assert ev == pytest.approx(1 - 0.1875 / 1.25)
    batch.value_mask = torch.tensor([[True, True], [True, False]]).unsqueeze(-1)  # the wrong value drops out
    assert rollout_stats(batch)["rollout/explained_variance"] == pytest.approx(1.0)


def test_metrics_are_computed_on_the_device_without_a_host_read():
    """The caller reads them once per training step: computing them reads nothing to the host
    (a sync on a GPU), and they equal their definitions (ratio over valid entries, 1 with none)."""
    torch.manual_seed(1)
    B, L, K = 4, 6, 2
    mask = torch.rand(B, L) > 0.3
    inputs = {"logprobs": -torch.rand(B, L), "old_logprobs": -torch.rand(B, L), "advantages": torch.randn(B, L), "loss_mask": mask,
                  "entropy": torch.rand(B, L), "values": torch.randn(B, K), "old_values": torch.randn(B, K), "returns": torch.randn(B, K),
                  "ref_logprobs": -torch.rand(B, L)}
    cfg = AlgorithmConfig(use_kl_loss=True, early_stop_imp_ratio=5.0)
    reads = ("item", "tolist", "__float__", "__int__", "__bool__")
    originals = {name: getattr(torch.Tensor, name) for name in reads}

    def refuse(*_args, **_kw):
        raise AssertionError("a metric was read to the host")
    try:
        for name in reads:
            setattr(torch.Tensor, name, refuse)
        _, m = compute_actor_critic_loss(cfg, **inputs)
        _, none_valid = compute_actor_critic_loss(cfg, **{**inputs, "loss_mask": torch.zeros(B, L, dtype=torch.bool)})
    finally:
        for name, fn in originals.items():
            setattr(torch.Tensor, name, fn)
    ratio = (inputs["logprobs"] - inputs["old_logprobs"]).exp()[mask]
    assert float(m["actor/ratio_mean"]) == pytest.approx(ratio.mean().item(), rel=1e-6)
    assert float(m["actor/ratio_max"]) == ratio.max().item() and float(m["actor/skipped"]) == 0.0
    assert float(none_valid["actor/ratio_mean"]) == float(none_valid["actor/ratio_max"]) == 1.0
