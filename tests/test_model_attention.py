"""Parallel decoding attends bidirectionally and ignores left padding."""
from __future__ import annotations

import pytest
import torch

from embodied_rl.models import build_policy
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.types import EnvObservation
from tests.observations import observations


@pytest.fixture(scope="module")
def ckpt(tiny_model) -> str:
    return str(tiny_model())


def obs(n: int = 2) -> EnvObservation:
    """Prompts of different lengths."""
    return observations(n, size=48, seed=1, instructions=["put the bowl on the plate", "push the block to the goal"])


def logits_values(policy, inputs):
    with torch.no_grad():
        return policy.vla(inputs["input_ids"], inputs["attention_mask"], policy.pixel_values(inputs),
                          policy.model_cfg.num_action_tokens, None, policy.model_cfg.append_stop_token)


def test_outputs_invariant_to_left_padding(ckpt):
    short = build_policy(OpenVLAOFTConfig(model_path=ckpt, max_prompt_length=30))
    long = build_policy(OpenVLAOFTConfig(model_path=ckpt, max_prompt_length=60))
    o = obs()
    a, b = short.prepare_inputs(o), long.prepare_inputs(o)
    assert a["input_ids"].shape[1] == 30 and b["input_ids"].shape[1] == 60
    assert (b["attention_mask"] == 0).sum() > (a["attention_mask"] == 0).sum()
    (la, ha), (lb, hb) = logits_values(short, a), logits_values(long, b)
    torch.testing.assert_close(la, lb, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ha, hb, atol=1e-5, rtol=1e-5)
    # Batched together with another prompt of a different length, a sample's outputs do not change either.
    single = short.prepare_inputs(obs(1))
    torch.testing.assert_close(logits_values(short, single)[0][0], la[0], atol=1e-5, rtol=1e-5)


def test_eager_equals_sdpa(ckpt):
    o = obs()
    eager = build_policy(OpenVLAOFTConfig(model_path=ckpt, attn_implementation="eager"))
    sdpa = build_policy(OpenVLAOFTConfig(model_path=ckpt, attn_implementation="sdpa"))
    inputs = eager.prepare_inputs(o)
    le, he = logits_values(eager, inputs)
    ls, hs = logits_values(sdpa, inputs)
    torch.testing.assert_close(le, ls, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(he, hs, atol=1e-5, rtol=1e-5)


def test_later_action_slot_changes_earlier_readout(ckpt):
    """With causal attention the first slot's readout could not see the last slot; here it must."""
    policy = build_policy(OpenVLAOFTConfig(model_path=ckpt, num_action_chunks=2))
    core, t = policy.vla, policy.model_cfg.num_action_tokens
    inputs = policy.prepare_inputs(obs())
    with torch.no_grad():
        embeds, mask = core.build_sequence(inputs["input_ids"], inputs["attention_mask"], policy.pixel_values(inputs), t, None, True)
        base_logits, base_hidden = core.decode_actions(embeds, mask, t, True)
        changed = embeds.clone()
        changed[:, -2] += 1.0  # the last action slot (position -1 is </s>)
        new_logits, new_hidden = core.decode_actions(changed, mask, t, True)
    # Readout 0 sits before slot 0, far before the changed last slot.
    assert (new_hidden[:, 0] - base_hidden[:, 0]).abs().max() > 1e-4
    assert (new_logits[:, 0] - base_logits[:, 0]).abs().max() > 1e-4


def test_causal_mode_is_explicit_and_causal(ckpt):
    """attention_mode=causal (for causally trained checkpoints): earlier readouts ignore later slots."""
    o = obs()
    causal = build_policy(OpenVLAOFTConfig(model_path=ckpt, attention_mode="causal"))
    bidir = build_policy(OpenVLAOFTConfig(model_path=ckpt))
    inputs = causal.prepare_inputs(o)
    assert (logits_values(causal, inputs)[0] - logits_values(bidir, inputs)[0]).abs().max() > 1e-5
    core, t = causal.vla, causal.model_cfg.num_action_tokens
    with torch.no_grad():
        embeds, mask = core.build_sequence(inputs["input_ids"], inputs["attention_mask"], causal.pixel_values(inputs), t, None, True)
        changed = embeds.clone()
        changed[:, -3] += 1.0  # the second-to-last slot, which is where the last readout sits
        (la, _), (lb, _) = core.decode_actions(embeds, mask, t, True), core.decode_actions(changed, mask, t, True)
    torch.testing.assert_close(la[:, :-1], lb[:, :-1], atol=1e-6, rtol=0)  # earlier readouts cannot see it
    assert (la[:, -1] - lb[:, -1]).abs().max() > 1e-4
    eager = build_policy(OpenVLAOFTConfig(model_path=ckpt, attention_mode="causal", attn_implementation="eager"))
    torch.testing.assert_close(logits_values(eager, inputs)[0], logits_values(causal, inputs)[0], atol=1e-5, rtol=1e-5)


def test_stop_token_layout_changes_outputs(ckpt):
    o = obs()
    with_stop = build_policy(OpenVLAOFTConfig(model_path=ckpt, append_stop_token=True))
    without = build_policy(OpenVLAOFTConfig(model_path=ckpt, append_stop_token=False))
    inputs = with_stop.prepare_inputs(o)
    assert (logits_values(with_stop, inputs)[0] - logits_values(without, inputs)[0]).abs().max() > 1e-5


def test_flash_attention_is_refused_without_cuda(ckpt):
    from embodied_rl.errors import ConfigError

    with pytest.raises(ConfigError, match="flash_attention_2 needs a CUDA device"):
        build_policy(OpenVLAOFTConfig(model_path=ckpt, attn_implementation="flash_attention_2"))
