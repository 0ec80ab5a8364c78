"""Advantage estimators against deliberately naive plain-loop references."""
from __future__ import annotations

import dataclasses
import math
import statistics

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from embodied_rl.algorithms import build_loss_mask, compute_advantages
from embodied_rl.config.schema.algorithm import AlgorithmConfig
from tests.algo_rollouts import make_rollout

G, LAM = 0.9, 0.8


def cfg(**kw) -> AlgorithmConfig:
    kw.setdefault("normalize_advantages", False)
    return AlgorithmConfig(gamma=kw.pop("gamma", G), gae_lambda=kw.pop("gae_lambda", LAM), **kw)


def tl(x: torch.Tensor) -> list:
    return x.tolist()


# ----------------------------------------------------------------- naive references
def ref_valid(dones, T, N, C, auto_reset):
    valid = [[[True] * C for _ in range(N)] for _ in range(T)]
    for n in range(N):
        idle = False
        for t in range(T):
            ended = False
            for c in range(C):
                valid[t][n][c] = not (idle or ended)
                if dones[t][n][c] and valid[t][n][c]:
                    ended = True
                    if not auto_reset:
                        idle = True
    return valid


def ref_gae_action(b, gamma, lam):
    r, d, tr, bv, v = tl(b.rewards), tl(b.dones), tl(b.truncations), tl(b.bootstrap_values), tl(b.values_with_bootstrap())
    T, N, C = len(r), len(r[0]), len(r[0][0])
    out = [[[0.0] * C for _ in range(N)] for _ in range(T)]
    for n in range(N):
        next_adv, next_value = 0.0, v[T][n][0]
        for i in range(T * C - 1, -1, -1):
            t, c = divmod(i, C)
            rew = r[t][n][c] + (gamma * bv[t][n][c] if tr[t][n][c] else 0.0)
            if d[t][n][c]:
                adv = rew - v[t][n][c]
            else:
                adv = rew + gamma * next_value - v[t][n][c] + gamma * lam * next_adv
            out[t][n][c] = adv
            next_adv, next_value = adv, v[t][n][c]
    return out


def ref_chunk_rewards(b, gamma):
    r, d, tr, bv = tl(b.rewards), tl(b.dones), tl(b.truncations), tl(b.bootstrap_values)
    T, N, C = len(r), len(r[0]), len(r[0][0])
    R = [[sum(r[t][n]) + sum(gamma * bv[t][n][c] for c in range(C) if tr[t][n][c]) for n in range(N)] for t in range(T)]
    D = [[any(d[t][n]) for n in range(N)] for t in range(T)]
    return R, D


def ref_gae_chunk(b, gamma, lam):
    R, D = ref_chunk_rewards(b, gamma)
    v = tl(b.values_with_bootstrap())
    T, N = len(R), len(R[0])
    out = [[0.0] * N for _ in range(T)]
    for n in range(N):
        acc = 0.0
        for t in range(T - 1, -1, -1):
            nxt = 0.0 if D[t][n] else v[t + 1][n][0]
            acc = R[t][n] + gamma * nxt - v[t][n][0] + (0.0 if D[t][n] else gamma * lam * acc)
            out[t][n] = acc
    return out


def ref_bi_level(b, gamma, lam, hgamma, L):
    R, D = ref_chunk_rewards(b, hgamma)
    vk = tl(b.values_with_bootstrap())
    T, N = len(R), len(R[0])
    K = len(vk[0][0])
    tv = lambda t, n, j: vk[t][n][j // (L // K)]
    out = [[[0.0] * L for _ in range(N)] for _ in range(T)]
    for n in range(N):
        high = 0.0
        for t in range(T - 1, -1, -1):
            nxt = 0.0 if D[t][n] else tv(t + 1, n, 0)
            high = R[t][n] + hgamma * nxt - tv(t, n, 0) + (0.0 if D[t][n] else hgamma * lam * high)
            ret = high + tv(t, n, 0)
            low = ret - tv(t, n, L - 1)
            out[t][n][L - 1] = low
            for j in range(L - 2, -1, -1):
                low = gamma * tv(t, n, j + 1) - tv(t, n, j) + gamma * lam * low
                out[t][n][j] = low
    return out


# ----------------------------------------------------------------- helpers
def token_view(adv: torch.Tensor, C: int) -> torch.Tensor:
    """[T, N, C*A] -> [T, N, C] first token of each action (all tokens of one action are equal)."""
    T, N, L = adv.shape
    return adv.reshape(T, N, C, L // C)[..., 0]


def assert_close_on(valid, got: torch.Tensor, want) -> None:
    want_t = torch.tensor(want, dtype=torch.float32)
    m = torch.tensor(valid)
    torch.testing.assert_close(got[m], want_t[m], rtol=1e-4, atol=1e-4)


# ----------------------------------------------------------------- tests
@pytest.mark.parametrize("auto_reset", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_gae_action_level_matches_reference(seed, auto_reset):
    T, N, C, A = 7, 5, 3, 2
    b = make_rollout(seed, T, N, C, A, auto_reset=auto_reset)
    out = compute_advantages(cfg(reward_type="action_level"), b, auto_reset=auto_reset)
    valid = ref_valid(tl(b.dones), T, N, C, auto_reset)
    assert torch.equal(build_loss_mask(b.dones, auto_reset), torch.tensor(valid))
    assert_close_on(valid, token_view(out.advantages, C), ref_gae_action(b, G, LAM))
    assert_close_on(valid, out.returns, (torch.tensor(ref_gae_action(b, G, LAM)) + b.values).tolist())
    assert torch.equal(out.loss_mask, torch.tensor(valid).repeat_interleave(A, -1))


@pytest.mark.parametrize("auto_reset", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_gae_chunk_level_matches_reference(seed, auto_reset):
    T, N, C, A = 8, 4, 4, 2
    b = make_rollout(seed, T, N, C, A, auto_reset=auto_reset, value_k=1)
    out = compute_advantages(cfg(reward_type="chunk_level"), b, auto_reset=auto_reset)
    want = ref_gae_chunk(b, G, LAM)
    valid = ref_valid(tl(b.dones), T, N, C, auto_reset)
    chunk_valid = [[any(valid[t][n]) for n in range(N)] for t in range(T)]
    assert_close_on(chunk_valid, out.advantages[..., 0], want)
    # every valid token of a chunk carries the chunk advantage
    tok_valid = torch.tensor(valid).repeat_interleave(A, -1)
    assert torch.allclose(out.advantages[tok_valid], out.advantages[..., :1].expand_as(out.advantages)[tok_valid])


@pytest.mark.parametrize("seed", range(3))
def test_bootstrap_type_none_ends_the_task_at_the_time_limit(seed):
    """bootstrap_type none: a truncated episode's value target is its return inside the
    episode, as if the truncation were a termination (no gamma * V(final_obs))."""
    T, N, C, A = 8, 4, 4, 2
    b = make_rollout(seed, T, N, C, A, auto_reset=True, value_k=1)
    assert b.truncations.any()
    out = compute_advantages(cfg(reward_type="chunk_level", bootstrap_type="none"), b, auto_reset=True)
    unboot = dataclasses.replace(b, bootstrap_values=torch.zeros_like(b.bootstrap_values))
    want = ref_gae_chunk(unboot, G, LAM)
    valid = ref_valid(tl(b.dones), T, N, C, True)
    assert_close_on([[any(valid[t][n]) for n in range(N)] for t in range(T)], out.advantages[..., 0], want)
    standard = compute_advantages(cfg(reward_type="chunk_level"), b, auto_reset=True)
    assert not torch.allclose(standard.returns, out.returns)


@pytest.mark.parametrize("seed", range(3))
def test_chunk_level_with_chunk_length_one_equals_action_level(seed):
    b = make_rollout(seed, 9, 4, 1, 3)
    a = compute_advantages(cfg(reward_type="action_level"), b, auto_reset=True)
    c = compute_advantages(cfg(reward_type="chunk_level"), b, auto_reset=True)
    torch.testing.assert_close(a.advantages, c.advantages)
    torch.testing.assert_close(a.returns, c.returns)


@pytest.mark.parametrize("value_k", [1, 6])
@pytest.mark.parametrize("seed", range(2))
def test_bi_level_gae_matches_reference(seed, value_k):
    T, N, C, A = 6, 4, 2, 3
    b = make_rollout(seed, T, N, C, A, value_k=value_k)
    c = cfg(adv_type="bi_level_gae", high_level_gamma=0.7)
    out = compute_advantages(c, b, auto_reset=True)
    want = ref_bi_level(b, G, LAM, 0.7, C * A)
    assert_close_on(out.loss_mask.tolist(), out.advantages, want)


@pytest.mark.parametrize("seed", range(3))
def test_bi_level_with_one_token_per_chunk_equals_chunk_level_gae(seed):
    b = make_rollout(seed, 10, 4, 1, 1, value_k=1)
    bi = compute_advantages(cfg(adv_type="bi_level_gae", high_level_gamma=G), b, auto_reset=True)
    ch = compute_advantages(cfg(adv_type="gae", reward_type="chunk_level"), b, auto_reset=True)
    torch.testing.assert_close(bi.advantages, ch.advantages)
    torch.testing.assert_close(bi.returns, ch.returns)


@pytest.mark.parametrize("norm_std", [True, False])
def test_grpo_matches_reference_and_groups_sum_to_zero(norm_std):
    T, N, C, A, gs = 6, 8, 3, 2, 4
    b = make_rollout(11, T, N, C, A, auto_reset=False, p_done=0.1)
    b.bootstrap_values = None  # critic-free: truncated episodes are scored as they are
    c = cfg(adv_type="grpo", group_size=gs, norm_adv_by_std_in_grpo=norm_std)
    out = compute_advantages(c, b, auto_reset=False)
    r = tl(b.rewards)
    valid = ref_valid(tl(b.dones), T, N, C, False)
    scores = [sum(r[t][n][k] for t in range(T) for k in range(C) if valid[t][n][k]) for n in range(N)]
    for g0 in range(0, N, gs):
        grp = scores[g0:g0 + gs]
        mu, sd = statistics.mean(grp), statistics.stdev(grp)
        for n in range(g0, g0 + gs):
            want = (scores[n] - mu) / (sd + 1e-6) if norm_std else scores[n] - mu
            tok = out.advantages[:, n][out.loss_mask[:, n]]
            assert torch.allclose(tok, torch.tensor(want), atol=1e-4)
        # one advantage per env: the group's advantages sum to zero
        per_env = [float(out.advantages[0, n, 0]) for n in range(g0, g0 + gs)]
        assert math.isclose(sum(per_env), 0.0, abs_tol=1e-4)


@pytest.mark.parametrize("auto_reset", [True, False])
@pytest.mark.parametrize("seed", range(3))
def test_group_baseline_subtracts_the_other_envs_mean_of_the_group(seed, auto_reset):
    T, N, C, A, gs = 6, 8, 2, 2, 4
    b = make_rollout(seed, T, N, C, A, auto_reset=auto_reset, value_k=1)
    plain = compute_advantages(cfg(group_size=gs), b, auto_reset=auto_reset)
    out = compute_advantages(cfg(group_size=gs, group_baseline=True, norm_adv_by_std_in_grpo=False), b, auto_reset=auto_reset)
    torch.testing.assert_close(out.returns, plain.returns)  # the critic's targets are untouched
    adv, valid = plain.advantages[..., 0], plain.loss_mask[..., 0]
    for t in range(T):
        for n in range(N):
            if not valid[t, n]:
                continue
            others = [m for m in range(n - n % gs, n - n % gs + gs) if m != n and valid[t, m]]
            base = sum(float(adv[t, m]) for m in others) / len(others) if others else 0.0
            assert math.isclose(float(out.advantages[t, n, 0]), float(adv[t, n]) - base, abs_tol=1e-5)


def test_group_baseline_makes_the_first_chunk_blind_to_the_critics_value_of_the_start():
    """gamma = lambda = 1, full episodes: the first chunk's advantage is the episode's return
    minus the mean return of the rest of its group, whatever the critic says of the start."""
    T, N, C, A, gs = 5, 8, 2, 1, 4
    b = make_rollout(4, T, N, C, A, auto_reset=False, p_done=0.0, value_k=1)
    c = cfg(gamma=1.0, gae_lambda=1.0, group_size=gs, group_baseline=True, norm_adv_by_std_in_grpo=False, bootstrap_type="none")
    b.values[0] = torch.arange(N // gs).repeat_interleave(gs).float().unsqueeze(-1)  # one value per start
    b.last_values[:] = 0.0
    first = compute_advantages(c, b, auto_reset=False).advantages[0, :, 0]
    returns = b.rewards.sum(dim=(0, 2)).reshape(N // gs, gs)
    want = returns - (returns.sum(dim=1, keepdim=True) - returns) / (gs - 1)
    torch.testing.assert_close(first, want.reshape(N))
    b.values[0] += 7.0
    torch.testing.assert_close(compute_advantages(c, b, auto_reset=False).advantages[0, :, 0], first)


def test_group_baseline_by_std_gives_every_start_the_same_weight():
    """norm_adv_by_std_in_grpo: each group's centred advantages at a step are divided by the
    std of that group's advantages, so a group whose returns differ by 100x weighs the same."""
    T, N, C, A, gs = 5, 8, 2, 1, 4
    b = make_rollout(5, T, N, C, A, auto_reset=False, p_done=0.0, value_k=1)
    b.rewards[:, :gs] *= 100.0
    mean_only = compute_advantages(cfg(group_size=gs, group_baseline=True, norm_adv_by_std_in_grpo=False), b, auto_reset=False)
    plain = compute_advantages(cfg(group_size=gs), b, auto_reset=False).advantages[..., 0]
    out = compute_advantages(cfg(group_size=gs, group_baseline=True), b, auto_reset=False).advantages[..., 0]
    groups = plain.reshape(T, N // gs, gs)
    want = mean_only.advantages[..., 0].reshape(T, N // gs, gs) / (groups.std(dim=2, keepdim=True) + 1e-6)
    torch.testing.assert_close(out, want.reshape(T, N))
    scale = out.reshape(T, N // gs, gs).abs().mean(dim=(0, 2))
    assert float(scale.max() / scale.min()) < 1.5


def test_grpo_drop_uniform_groups_masks_groups_with_equal_returns():
    b = make_rollout(3, 5, 6, 2, 2, auto_reset=False)
    b.bootstrap_values = None
    b.rewards[:, 2:4] = 0.0  # group 1 (envs 2, 3): all returns equal
    c = cfg(adv_type="grpo", group_size=2, drop_uniform_groups=True)
    out = compute_advantages(c, b, auto_reset=False)
    assert not out.loss_mask[:, 2:4].any()
    assert out.loss_mask[:, [0, 1, 4, 5]].any()


def test_grpo_rejects_several_episodes_per_env():
    b = make_rollout(0, 10, 4, 2, 1, auto_reset=True, p_done=0.4)
    with pytest.raises(ValueError, match="auto_reset: false"):
        compute_advantages(cfg(adv_type="grpo", group_size=2), b, auto_reset=True)


@pytest.mark.parametrize("reward_type", ["action_level", "chunk_level"])
def test_reinforce_pp_matches_reference(reward_type):
    T, N, C, A = 6, 5, 2, 2
    b = make_rollout(5, T, N, C, A)
    out = compute_advantages(cfg(adv_type="reinforce_pp", reward_type=reward_type), b, auto_reset=True)
    valid = ref_valid(tl(b.dones), T, N, C, True)
    if reward_type == "chunk_level":
        R, D = ref_chunk_rewards(b, G)
        rew = lambda t, n, k: R[t][n]
        done = lambda t, n, k: D[t][n]
        K, valid_k = 1, [[[any(valid[t][n])] for n in range(N)] for t in range(T)]
    else:
        r, d, tr, bv = tl(b.rewards), tl(b.dones), tl(b.truncations), tl(b.bootstrap_values)
        rew = lambda t, n, k: r[t][n][k] + (G * bv[t][n][k] if tr[t][n][k] else 0.0)
        done = lambda t, n, k: d[t][n][k]
        K, valid_k = C, valid
    ret = [[[0.0] * K for _ in range(N)] for _ in range(T)]
    for n in range(N):
        acc = 0.0
        for i in range(T * K - 1, -1, -1):
            t, k = divmod(i, K)
            acc = rew(t, n, k) + (0.0 if done(t, n, k) else G * acc)
            ret[t][n][k] = acc
    vals = [ret[t][n][k] for t in range(T) for n in range(N) for k in range(K) if valid_k[t][n][k]]
    mu, sd = statistics.mean(vals), statistics.stdev(vals)
    want = [[[(ret[t][n][k] - mu) / sd for k in range(K)] for n in range(N)] for t in range(T)]
    got = out.advantages.reshape(T, N, K, -1)[..., 0]
    assert_close_on(valid_k, got, want)


# ----------------------------------------------------------------- properties
shapes = st.tuples(st.integers(1, 5), st.integers(1, 4), st.integers(1, 3), st.integers(1, 3))


@settings(max_examples=25, deadline=None)
@given(shape=shapes, seed=st.integers(0, 10_000), auto_reset=st.booleans(), p_done=st.sampled_from([0.0, 0.2, 0.6]))
def test_property_gae_reference_and_masks(shape, seed, auto_reset, p_done):
    T, N, C, A = shape
    b = make_rollout(seed, T, N, C, A, auto_reset=auto_reset, p_done=p_done)
    out = compute_advantages(cfg(reward_type="action_level"), b, auto_reset=auto_reset)
    valid = ref_valid(tl(b.dones), T, N, C, auto_reset)
    assert_close_on(valid, token_view(out.advantages, C), ref_gae_action(b, G, LAM))
    assert out.advantages.shape == (T, N, C * A)
    assert (out.advantages[~out.loss_mask] == 0).all()


@settings(max_examples=25, deadline=None)
@given(shape=shapes, seed=st.integers(0, 10_000), adv_type=st.sampled_from(["gae", "bi_level_gae", "reinforce_pp"]))
def test_property_whitening_over_the_mask(shape, seed, adv_type):
    T, N, C, A = shape
    b = make_rollout(seed, T, N, C, A, value_k=1)
    out = compute_advantages(AlgorithmConfig(adv_type=adv_type, normalize_advantages=True), b, auto_reset=True)
    valid = out.advantages[out.loss_mask]
    assert torch.isfinite(out.advantages).all()
    if valid.numel() > 1 and valid.std() > 0:
        assert abs(float(valid.mean())) < 1e-4
        assert abs(float(valid.std()) - 1.0) < 1e-3


@settings(max_examples=20, deadline=None)
@given(groups=st.integers(1, 4), gs=st.integers(2, 4), seed=st.integers(0, 10_000), norm=st.booleans())
def test_property_grpo_group_sums_zero(groups, gs, seed, norm):
    b = make_rollout(seed, 4, groups * gs, 2, 1, auto_reset=False)
    out = compute_advantages(cfg(adv_type="grpo", group_size=gs, norm_adv_by_std_in_grpo=norm), b, auto_reset=False)
    per_env = out.advantages[0, :, 0].reshape(groups, gs)
    assert torch.allclose(per_env.sum(1), torch.zeros(groups), atol=1e-4)
