"""Action tokens, un-normalisation, log-probs, greedy decoding, entropy."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from embodied_rl.errors import UserError
from embodied_rl.models import build_policy
from embodied_rl.models.openvla_oft import sampling as S
from embodied_rl.models.openvla_oft.actions import (
    ActionTokenizer,
    BoundsQ99,
    resolve_unnorm_key,
)
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.types import EnvObservation
from tests.observations import observations

HALF_BIN = 1.0 / 255  # bins are 2/255 wide


def test_token_round_trip_within_half_bin_and_official_ids():
    tok = ActionTokenizer(base_vocab_size=32000)
    a = torch.cat([torch.linspace(-1, 1, 1001), torch.tensor([-1.0, 1.0, 0.0, 0.5])])
    rel = tok.encode(a)
    assert rel.min() >= 0 and rel.max() <= 255
    assert (tok.decode(rel) - a).abs().max() <= HALF_BIN + 1e-6
    # Absolute ids follow the official formula: vocab_size - digitize(a, linspace(-1, 1, 256)).
    expected = 32000 - np.digitize(a.numpy(), np.linspace(-1, 1, 256))
    assert torch.equal(tok.to_absolute(rel), torch.from_numpy(expected).long())
    assert tok.to_absolute(tok.encode(torch.tensor([-1.0, 1.0]))).tolist() == [31999, 31744]


def test_unnormalisation_matches_hand_computation(tmp_path):
    stats = {"libero_spatial_no_noops": {"action": {"q01": [-0.5, 0.0, 1.0], "q99": [0.5, 2.0, 3.0], "mask": [True, True, False]}}}
    (tmp_path / "dataset_statistics.json").write_text(json.dumps(stats))
    key = resolve_unnorm_key(json.loads((tmp_path / "dataset_statistics.json").read_text()), "libero_spatial")
    assert key == "libero_spatial_no_noops"  # _no_noops fallback
    norm = BoundsQ99(stats[key]["action"], key)
    a = torch.tensor([[-1.0, 0.5, 0.7], [0.0, -0.25, -1.0]])
    out = norm.unnormalize(a)
    hand = [[-0.5, 0.5 * 1.5 * 2.0 + 0.0, 0.7], [0.0, 0.5 * 0.75 * 2.0, -1.0]]  # 0.5*(a+1)*(q99-q01)+q01; masked dim unchanged
    torch.testing.assert_close(out, torch.tensor(hand), atol=1e-6, rtol=0)
    torch.testing.assert_close(norm.normalize(out), a, atol=1e-6, rtol=0)


def test_unknown_unnorm_key_lists_keys():
    stats = {"bridge_orig": {}, "libero_10_no_noops": {}}
    with pytest.raises(UserError, match=r"unnorm_key='nope'.*available keys: bridge_orig, libero_10_no_noops") as e:
        resolve_unnorm_key(stats, "nope")
    assert "\n" not in str(e.value)
    with pytest.raises(UserError, match="unnorm_key is required"):
        resolve_unnorm_key(stats, None)
    assert resolve_unnorm_key({"only": {}}, None) == "only"


def test_sampling_functions():
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 256) * 3
    p = S.process_logits(logits, temperature=1.0, top_k=0)
    ent = S.token_entropy(p)
    assert (ent >= 0).all() and (ent <= math.log(256) + 1e-5).all()
    uniform = S.token_entropy(torch.zeros(1, 1, 256))
    torch.testing.assert_close(uniform, torch.tensor([[math.log(256)]]))
    # top-k keeps k bins: samples stay in them and the entropy is at most ln k.
    pk = S.process_logits(logits, temperature=1.0, top_k=4)
    tokens = S.sample_tokens(pk, do_sample=True)
    top4 = logits.topk(4, dim=-1).indices
    assert (top4 == tokens.unsqueeze(-1)).any(-1).all()
    assert (S.token_entropy(pk) <= math.log(4) + 1e-5).all() and torch.isfinite(S.token_entropy(pk)).all()
    # Higher temperature flattens the distribution.
    assert (S.token_entropy(S.process_logits(logits, 2.0, 0)) > ent).all()
    with pytest.raises(ValueError, match="temperature"):
        S.process_logits(logits, 0.0, 0)


def test_a_bin_window_keeps_samples_near_the_greedy_bin_and_scores_them_within_it():
    """A bimodal token (modes 100 bins apart): top-k keeps both modes, the window only the bins
    around the most likely one; the log-probs are those of the windowed distribution, and the
    greedy token is the same with or without the window."""
    logits = torch.full((200, 3, 256), -10.0)
    logits[..., 40], logits[..., 41], logits[..., 39], logits[..., 140] = 3.0, 2.5, 2.0, 2.8
    gen = torch.Generator().manual_seed(0)
    wide = S.sample_tokens(S.process_logits(logits, 1.0, 4), True, gen)
    assert (wide == 140).any()  # top-4 reaches the far mode
    windowed = S.process_logits(logits, 1.0, 4, window=2)
    tokens = S.sample_tokens(windowed, True, gen)
    assert ((tokens - 40).abs() <= 2).all() and set(tokens.unique().tolist()) == {39, 40, 41}
    near = torch.tensor([3.0, 2.5, 2.0]).log_softmax(0)  # bins 40, 41, 39 alone
    torch.testing.assert_close(S.token_logprobs(windowed, torch.full((200, 3), 41)), torch.full((200, 3), float(near[1])))
    assert torch.equal(S.process_logits(logits, 1.0, 0, window=2).argmax(-1), logits.argmax(-1))
    tokens, logprobs, _, extra = S.sample_and_score(logits, do_sample=True, temperature=1.0, top_k=0, logprob_top_k=None, window=2)
    assert ((tokens - 40).abs() <= 2).all() and torch.isfinite(logprobs).all()
    # An update moves the most likely bin to 42: re-scored in the rollout's window (around 40),
    # token 39 keeps a finite log-prob; a window around the new mode would give it -inf.
    moved = logits.clone()
    moved[..., 42] = 3.5
    center = extra[S.WINDOW_CENTER]
    assert (center == 40).all()
    assert torch.isfinite(S.token_logprobs(S.process_logits(moved, 1.0, 0, 2, center), torch.full((200, 3), 39))).all()
    assert torch.isinf(S.token_logprobs(S.process_logits(moved, 1.0, 0, 2), torch.full((200, 3), 39))).all()


@pytest.fixture(scope="module")
def policy(tiny_model):
    return build_policy(OpenVLAOFTConfig(model_path=str(tiny_model()), add_value_head=True, value_type="chunk_level"))


def _obs() -> EnvObservation:
    return observations(3, seed=2, instructions=["lift the peg", "stack the cube", "open the drawer"])


def _sampling(policy, monkeypatch, **keys) -> None:
    """Give the policy these sampling keys of its model config (actor.model.top_k, logprobs_over)."""
    monkeypatch.setattr(policy, "model_cfg", dataclasses.replace(policy.model_cfg, **keys))


@pytest.mark.parametrize("temperature,top_k", [(1.0, None), (1.6, None), (0.6, 20)])
def test_rollout_logprobs_equal_rescored(policy, monkeypatch, temperature, top_k):
    _sampling(policy, monkeypatch, top_k=top_k)
    inputs = policy.prepare_inputs(_obs())
    gen = torch.Generator().manual_seed(3)
    with torch.no_grad():
        out = policy.predict(inputs, do_sample=True, temperature=temperature, generator=gen)
    ev = policy.evaluate_actions(out.forward_inputs, out.action_record, temperature=temperature)
    torch.testing.assert_close(ev["logprobs"], out.logprobs, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ev["entropy"], out.entropy, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(ev["values"], out.values, atol=1e-6, rtol=1e-6)
    assert ((out.entropy >= 0) & (out.entropy <= math.log(256) + 1e-5)).all()
    assert (out.logprobs <= 0).all() and out.values.shape == (3, 1)
    # Decoded actions are the bin centres of the tokens (identity statistics of the tiny preset).
    centres = policy.action_tokenizer.decode(out.action_record).view(3, 8, 7)
    torch.testing.assert_close(out.actions, centres, atol=1e-6, rtol=0)


def test_top_k_samples_scored_over_all_bins(policy, monkeypatch):
    """logprobs_over=all_bins: tokens come from the top k, their log-probs (rollout and rescored
    alike) from the temperature-scaled policy over all bins, finite where top-k's are -inf."""
    _sampling(policy, monkeypatch, top_k=3, logprobs_over="all_bins")
    inputs = policy.prepare_inputs(_obs())
    with torch.no_grad():
        out = policy.predict(inputs, do_sample=True, temperature=0.5, generator=torch.Generator().manual_seed(3))
        logits, _ = policy.vla(inputs["input_ids"], inputs["attention_mask"], policy.pixel_values(inputs), 56, None, True)
    assert (logits.topk(3, dim=-1).indices == out.action_record.unsqueeze(-1)).any(-1).all()
    full = torch.log_softmax(logits.float() / 0.5, -1).gather(-1, out.action_record.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(out.logprobs, full, atol=1e-5, rtol=1e-5)
    ev = policy.evaluate_actions(out.forward_inputs, out.action_record, temperature=0.5)
    torch.testing.assert_close(ev["logprobs"], out.logprobs, atol=1e-6, rtol=1e-6)
    # A sampled bin outside the top 1 has no probability under top-k = 1, but keeps one over all bins.
    top1 = S.token_logprobs(S.process_logits(logits, 0.5, 1), out.action_record)
    moved = out.action_record != logits.argmax(-1)
    assert moved.any() and torch.isinf(top1[moved]).all() and torch.isfinite(out.logprobs).all()


def test_greedy_is_deterministic_and_the_mode(policy):
    inputs = policy.prepare_inputs(_obs())
    with torch.no_grad():
        a = policy.predict(inputs, do_sample=False, temperature=1.0)
        b = policy.predict(inputs, do_sample=False, temperature=1.0)
        logits, _ = policy.vla(inputs["input_ids"], inputs["attention_mask"], policy.pixel_values(inputs), 56, None, True)
    assert torch.equal(a.action_record, b.action_record) and torch.equal(a.actions, b.actions)
    assert torch.equal(a.action_record, logits.argmax(-1))
    # Greedy still reports the log-prob of the chosen token (the maximum one).
    torch.testing.assert_close(a.logprobs, torch.log_softmax(logits, -1).max(-1).values, atol=1e-6, rtol=0)


def test_top_k_truncates_sampling_but_not_greedy_or_the_likelihood(policy, monkeypatch):
    """actor.model.top_k: samples stay in the top k and are scored there; greedy decoding is
    the argmax with or without it; scoring="likelihood" (SFT, BC) is over all bins at temperature 1."""
    inputs = policy.prepare_inputs(_obs())
    with torch.no_grad():
        plain = policy.predict(inputs, do_sample=False)
        logits, _ = policy.vla(inputs["input_ids"], inputs["attention_mask"], policy.pixel_values(inputs), 56, None, True)
        _sampling(policy, monkeypatch, top_k=2)
        greedy = policy.predict(inputs, do_sample=False)
        out = policy.predict(inputs, do_sample=True, temperature=2.0, generator=torch.Generator().manual_seed(4))
        rollout = policy.evaluate_actions(out.forward_inputs, out.action_record, temperature=2.0)
        likelihood = policy.evaluate_actions(out.forward_inputs, out.action_record, scoring="likelihood")
    assert torch.equal(greedy.action_record, plain.action_record)
    assert (logits.topk(2, dim=-1).indices == out.action_record.unsqueeze(-1)).any(-1).all()
    torch.testing.assert_close(rollout["logprobs"], out.logprobs, atol=1e-6, rtol=1e-6)
    full = torch.log_softmax(logits.float(), -1).gather(-1, out.action_record.unsqueeze(-1)).squeeze(-1)
    torch.testing.assert_close(likelihood["logprobs"], full, atol=1e-5, rtol=1e-5)


def test_sampling_keys_live_in_the_model_config():
    from embodied_rl.configure import load_config
    from embodied_rl.runtime.groups import sampling_specs
    from embodied_rl.workers.protocol import SamplingSpec

    for over, train_k in (("top_k", 3), ("all_bins", 0)):
        cfg = load_config("maniskill_ppo_tiny", ["actor.model.top_k=3", f"actor.model.logprobs_over={over}"], plan=False)
        assert (cfg.actor.model.top_k, cfg.actor.model.logprob_top_k) == (3, train_k)
    # The rollout's specs carry what every policy shares; the policy reads its own keys.
    assert {f.name for f in dataclasses.fields(SamplingSpec)} == {"do_sample", "temperature"}
    assert not sampling_specs(cfg)["greedy"].do_sample


def test_a_windowed_rollout_is_rescored_in_its_own_window_after_an_update(policy, monkeypatch):
    """The window's centre travels with the forward inputs: the same log-probs before an update,
    finite ones after it (the updated policy's mode may sit elsewhere)."""
    monkeypatch.setattr(policy, "model_cfg", dataclasses.replace(policy.model_cfg, action_bin_window=1))
    inputs = policy.prepare_inputs(_obs())
    with torch.no_grad():
        out = policy.predict(inputs, do_sample=True, temperature=1.0, generator=torch.Generator().manual_seed(1))
    assert out.forward_inputs[S.WINDOW_CENTER].shape == out.action_record.shape
    ev = policy.evaluate_actions(out.forward_inputs, out.action_record, temperature=1.0)
    torch.testing.assert_close(ev["logprobs"], out.logprobs, atol=1e-6, rtol=1e-6)
    state = {k: v.clone() for k, v in policy.state_dict().items()}
    try:
        with torch.no_grad():
            for p in policy.parameters():
                p.add_(torch.randn_like(p) * 0.05)
            moved = policy.evaluate_actions(out.forward_inputs, out.action_record, temperature=1.0)["logprobs"]
        assert torch.isfinite(moved).all() and not torch.equal(moved, out.logprobs)
    finally:
        policy.load_state_dict(state)


def test_a_window_keeps_bins_when_the_updated_top_k_left_it():
    """Top-k within the rollout's window: the updated policy's top 3 all lie far from the window's
    centre, yet the bins inside the window keep finite log-probs and the entropy stays finite."""
    logits = torch.full((2, 4, 256), -10.0)
    logits[..., 40], logits[..., 41] = 1.0, 0.5  # the rollout's mode
    logits[..., 200:203] = 5.0  # after an update: the top 3 moved away
    center = torch.full((2, 4), 40)
    processed = S.process_logits(logits, 1.0, 3, window=3, center=center)
    assert torch.isfinite(S.token_logprobs(processed, torch.full((2, 4), 41))).all()
    assert torch.isfinite(S.token_entropy(processed)).all()
    assert torch.isinf(processed[..., 200]).all()
