"""LoRA adapters through peft, merge-and-export, weight-sync state dicts."""
from __future__ import annotations

import json

import pytest
import torch

from embodied_rl.errors import UserError
from embodied_rl.models import build_policy
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.types import EnvObservation
from tests.observations import observations


@pytest.fixture(scope="module")
def tiny(tiny_model):
    return tiny_model()


def _obs() -> EnvObservation:
    return observations(2, size=60, seed=5, instructions=["insert the peg", "turn on the stove"])


def _lora_cfg(path, **kw) -> OpenVLAOFTConfig:
    return OpenVLAOFTConfig(model_path=str(path), is_lora=True, lora_rank=4, lora_alpha=8, add_value_head=True, num_action_chunks=2, **kw)


def _trained_lora_policy(path):
    policy = build_policy(_lora_cfg(path))
    with torch.no_grad():  # stands in for training: non-zero B so adapters change the outputs
        for n, p in policy.named_parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)
    return policy


def _greedy(policy):
    with torch.no_grad():
        return policy.predict(policy.prepare_inputs(_obs()), do_sample=False, temperature=1.0)


def test_adapters_round_trip_through_peft(tiny, tmp_path):
    policy = _trained_lora_policy(tiny)
    base = build_policy(OpenVLAOFTConfig(model_path=str(tiny), num_action_chunks=2))
    assert (_greedy(policy).logprobs - _greedy(base).logprobs).abs().max() > 1e-4  # adapters matter
    policy.save_checkpoint(tmp_path / "ck")
    cfg = json.loads((tmp_path / "ck" / "lora_adapter" / "adapter_config.json").read_text())
    assert cfg["r"] == 4 and cfg["lora_alpha"] == 8 and "lm_head" in cfg["target_modules"]
    # From the saved checkpoint (adapters found beside the base weights) ...
    again = build_policy(_lora_cfg(tmp_path / "ck"))
    # ... and from the base checkpoint plus lora_path (the value head starts fresh there, so compare the actor).
    via_path = build_policy(_lora_cfg(tiny, lora_path=str(tmp_path / "ck" / "lora_adapter")))
    ref = _greedy(policy)
    for other in (again, via_path):
        out = _greedy(other)
        assert torch.equal(out.action_record, ref.action_record)
        torch.testing.assert_close(out.logprobs, ref.logprobs, atol=1e-6, rtol=0)
    torch.testing.assert_close(_greedy(again).values, ref.values, atol=1e-6, rtol=0)
    assert all(p.requires_grad == ("lora_" in n or n.startswith("value_head")) for n, p in via_path.named_parameters())
    with pytest.raises(UserError, match="holds LoRA adapters.*is_lora=true"):
        build_policy(OpenVLAOFTConfig(model_path=str(tmp_path / "ck")))


def test_merge_and_export_equals_adapted_model(tiny, tmp_path):
    policy = _trained_lora_policy(tiny)
    policy.export_merged(tmp_path / "merged")
    assert not (tmp_path / "merged" / "lora_adapter").exists()
    merged = build_policy(OpenVLAOFTConfig(model_path=str(tmp_path / "merged"), add_value_head=True, num_action_chunks=2))
    a, b = _greedy(policy), _greedy(merged)
    torch.testing.assert_close(b.logprobs, a.logprobs, atol=1e-5, rtol=0)
    torch.testing.assert_close(b.values, a.values, atol=1e-5, rtol=0)
    with torch.no_grad():
        inputs = policy.prepare_inputs(_obs())
        la, _ = policy.vla(inputs["input_ids"], inputs["attention_mask"], policy.pixel_values(inputs), 14, None, True)
        lb, _ = merged.vla(inputs["input_ids"], inputs["attention_mask"], merged.pixel_values(inputs), 14, None, True)
    torch.testing.assert_close(lb, la, atol=1e-5, rtol=0)
    # The policy keeps its adapters after exporting.
    assert any("lora_" in n for n, _ in policy.named_parameters())


def test_trainable_state_dict_syncs_weights(tiny):
    src = _trained_lora_policy(tiny)
    dst = build_policy(_lora_cfg(tiny))
    sd = src.trainable_state_dict()
    assert sd and all("lora_" in k or k.startswith("value_head.") for k in sd)
    dst.load_trainable_state_dict(sd)
    torch.testing.assert_close(_greedy(dst).logprobs, _greedy(src).logprobs, atol=0, rtol=0)
    with pytest.raises(ValueError, match="trainable state dict mismatch"):
        dst.load_trainable_state_dict({k: v for k, v in sd.items() if not k.startswith("value_head.")})
    full = build_policy(OpenVLAOFTConfig(model_path=str(tiny)))
    assert set(full.trainable_state_dict()) == set(full.state_dict())


def test_lora_target_modules_select_wrapped_layers(tiny):
    policy = build_policy(OpenVLAOFTConfig(model_path=str(tiny), is_lora=True, lora_rank=2, lora_target_modules=["q_proj", "fc3"]))
    wrapped = {n.rsplit(".lora_A", 1)[0] for n, _ in policy.named_parameters() if ".lora_A" in n}
    assert wrapped and all(w.endswith(("q_proj", "projector.fc3")) for w in wrapped)


def test_weights_a_checkpoint_lacks_are_the_same_in_every_process(tiny):
    """A value head / proprio projector the checkpoint does not hold starts from (init_seed,
    component): several rollout workers of an eval-only run (no weight sync) act alike."""
    cfg = OpenVLAOFTConfig(model_path=str(tiny), use_proprio=True, proprio_dim=8, add_value_head=True)

    def fresh(global_seed: int, init_seed: int) -> dict[str, torch.Tensor]:
        torch.manual_seed(global_seed)  # each worker process has its own RNG stream
        policy = build_policy(cfg, device="cpu", init_seed=init_seed)
        return {k: v.clone() for k, v in policy.state_dict().items() if k.startswith(("proprio_projector", "value_head"))}

    a, b, c = fresh(1, init_seed=7), fresh(2, init_seed=7), fresh(1, init_seed=8)
    assert a and sorted(a) == sorted(b)
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], c[k]) for k in a)
