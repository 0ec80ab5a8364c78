"""vLLM rollout backend vs the HF policy on the tiny preset (fp32, 64 px, CPU; one engine in bf16).

Needs vLLM (the vllm extra); skipped where it is not importable. One in-process engine per
module: starting one costs a few seconds.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch

from embodied_rl.config.schema.model import model_config
from embodied_rl.models.create import create_model
from embodied_rl.models.generators import DeviceGenerators
from embodied_rl.models.openvla_oft import lora
from embodied_rl.models.registry import build_policy
from embodied_rl.types import EnvObservation
from tests.observations import observations

pytest.importorskip("vllm")
pytestmark = pytest.mark.vllm
os.environ.setdefault("OMP_NUM_THREADS", "2")  # vLLM's CPU worker is ~50x slower without an explicit count

from embodied_rl.models.openvla_oft.vllm.engine import VLLMOpenVLAOFT

TOL = 1e-4


def _cfg(path: Path, num_images: int = 1, **overrides):
    return model_config("openvla_oft", model_path=str(path), action_dim=7, num_images_in_input=num_images, proprio_dim=8,
                        unnorm_key="identity", use_proprio=True, add_value_head=True, **overrides)


def _obs(seed: int = 0, n: int = 3, wrist: bool = False) -> EnvObservation:
    return observations(n, size=64, seed=seed, wrist=wrist)


def _assert_acts_alike(out, ref, values: bool = True) -> None:
    """The engine's output `out` takes the HF policy's actions, with its log-probs (and values) within TOL."""
    assert torch.equal(out.action_record, ref.action_record)
    assert (out.logprobs - ref.logprobs).abs().max() < TOL
    if values:
        assert (out.values - ref.values).abs().max() < TOL


@pytest.fixture(scope="module")
def ckpt(tiny_model) -> Path:
    return tiny_model(image_size=64)


@pytest.fixture(scope="module")
def hf(ckpt):
    return build_policy(_cfg(ckpt), device="cpu", warn_untrained_value_head=False).eval()


@pytest.fixture(scope="module")
def engine(ckpt):
    eng = VLLMOpenVLAOFT(ckpt, _cfg(ckpt), max_num_seqs=8)
    yield eng
    eng.close()


def _core_outputs(hf, inputs):
    """The HF core's (bin logits, readout hidden) for the same inputs as the engine gets."""
    with torch.no_grad():
        extra = hf.proprio_projector(inputs["proprio"]).unsqueeze(1)
        return hf.vla(inputs["input_ids"], inputs["attention_mask"], hf.pixel_values(inputs),
                      hf.model_cfg.num_action_tokens, extra, hf.model_cfg.append_stop_token)


def test_engine_starts_next_to_libraries_that_break_vllms_module_scan(ckpt):
    """vLLM scans every loaded module at engine start on CPU. llvmlite's ffi.lib (numba) and
    trimesh's placeholders for missing optional modules (ManiSkill) broke that scan before
    register() guarded it; the whole test session has both loaded."""
    import llvmlite.binding.ffi  # noqa: F401

    pytest.importorskip("trimesh.boolean")

    eng = VLLMOpenVLAOFT(ckpt, _cfg(ckpt), max_num_seqs=2)
    eng.close()


def test_engine_runs_in_the_policy_precision_with_the_configured_gpu_share(ckpt):
    """Built as a rollout worker builds it: the engine in actor.model.precision (bf16) with
    rollout.gpu_memory_utilization, its heads in the same dtype; greedy actions and values as
    the HF policy loaded in bf16 gives them, up to two bf16 kernels' rounding."""
    from embodied_rl.models.rollout_backends import build_rollout_policy

    cfg = _cfg(ckpt, precision="bf16")
    eng = build_rollout_policy("vllm", cfg, device=torch.device("cpu"), gpu_memory_utilization=0.37)
    try:
        vllm_cfg = eng.llm.llm_engine.vllm_config
        assert vllm_cfg.cache_config.gpu_memory_utilization == 0.37
        assert vllm_cfg.model_config.dtype == torch.bfloat16
        assert eng.llm.apply_model(lambda model: {p.dtype for p in model.parameters()}) == [{torch.bfloat16}]
        assert {p.dtype for m in eng.host.components().values() if m is not None for p in m.parameters()} == {torch.bfloat16}
        hf = build_policy(cfg, device="cpu", warn_untrained_value_head=False).eval()
        inputs = hf.prepare_inputs(_obs())
        with torch.no_grad():
            ours, theirs = eng.predict(inputs, do_sample=False), hf.predict(inputs, do_sample=False)
        assert (ours.action_record == theirs.action_record).float().mean() >= 0.9
        assert torch.allclose(ours.values, theirs.values, atol=2e-2)
    finally:
        eng.close()


def test_sampling_uses_the_generator_of_the_engines_cpu_logits(engine, hf):
    """A rollout worker passes DeviceGenerators: the draw takes the CPU one, whatever device the
    worker's other tensors are on, and equals a plain CPU generator of the same seed."""
    inputs = hf.prepare_inputs(_obs())
    gens = DeviceGenerators(5)
    ours = engine.predict(inputs, do_sample=True, generator=gens)
    plain = engine.predict(inputs, do_sample=True, generator=torch.Generator().manual_seed(5))
    assert torch.equal(ours.action_record, plain.action_record)
    assert list(gens.get_state()) == ["cpu"]


def test_tiny_preset_uses_the_models_own_sdpa(engine):
    assert engine.attention == "sdpa"  # head size 16: vLLM's CPU kernels do not support it


def test_readout_logits_and_hidden_match_hf(hf, engine):
    inputs = hf.prepare_inputs(_obs(0))
    logits_hf, hidden_hf = _core_outputs(hf, inputs)
    logits, hidden = engine.logits_and_hidden(inputs)
    assert logits.shape == logits_hf.shape == (3, 56, 256)
    assert (logits - logits_hf).abs().max() < TOL
    assert (hidden - hidden_hf).abs().max() < TOL


def test_greedy_actions_logprobs_values_entropy_match_hf(hf, engine):
    inputs = hf.prepare_inputs(_obs(1))
    with torch.no_grad():
        ref = hf.predict(inputs, do_sample=False)
    out = engine.predict(inputs, do_sample=False)
    assert torch.equal(out.action_record, ref.action_record)
    assert torch.equal(out.actions, ref.actions)
    for name in ("logprobs", "entropy", "values"):
        assert (getattr(out, name) - getattr(ref, name)).abs().max() < TOL, name
    assert out.values.shape == (3, 8)


def test_sampled_tokens_rescore_equal_under_hf(hf, engine, monkeypatch):
    for policy in (hf, engine):  # actor.model.top_k=40 on both sides
        monkeypatch.setattr(policy, "model_cfg", dataclasses.replace(policy.model_cfg, top_k=40))
    inputs = hf.prepare_inputs(_obs(2))
    out = engine.predict(inputs, do_sample=True, temperature=1.3, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        scored = hf.evaluate_actions(out.forward_inputs, out.action_record, temperature=1.3)
    assert (scored["logprobs"] - out.logprobs).abs().max() < TOL
    assert (scored["entropy"] - out.entropy).abs().max() < TOL
    assert (scored["values"] - out.values).abs().max() < TOL


def test_attention_is_bidirectional(hf, engine):
    """The first action slot is read at the row before it; the only input after that row
    (besides the zeroed slots) is the closing stop token. Changing it changes the first
    slot's logits, as in the HF pass; under a causal mask it could not."""
    inputs = hf.prepare_inputs(_obs(3, n=1))
    base, _ = engine.logits_and_hidden(inputs)
    saved_engine, saved_hf = engine.stop_id, hf.vla.stop_token_id
    engine.stop_id = hf.vla.stop_token_id = 3
    try:
        moved, _ = engine.logits_and_hidden(inputs)
        moved_hf, _ = _core_outputs(hf, inputs)
    finally:
        engine.stop_id, hf.vla.stop_token_id = saved_engine, saved_hf
    assert (moved[0, 0] - base[0, 0]).abs().max() > 1e-3
    assert (moved - moved_hf).abs().max() < TOL
    # And the engine's result is not what a causal pass computes.
    hf.vla.causal = True
    try:
        causal, _ = _core_outputs(hf, inputs)
    finally:
        hf.vla.causal = False
    assert (causal - base).abs().max() > 1e-2


def test_image_and_proprio_reach_the_action_slots(hf, engine):
    inputs = hf.prepare_inputs(_obs(3, n=1))
    base, _ = engine.logits_and_hidden(inputs)
    for key, delta in (("images", 40), ("proprio", 0.5)):
        changed = {k: v.clone() for k, v in inputs.items()}
        changed[key] = (changed[key].float() + delta).clamp(max=255).to(inputs[key].dtype) if key == "images" else changed[key] + delta
        out, _ = engine.logits_and_hidden(changed)
        ref, _ = _core_outputs(hf, changed)
        assert (out[0, 0] - base[0, 0]).abs().max() > 1e-3, key
        assert (out - ref).abs().max() < TOL, key


def test_weight_sync_changes_actions_as_loading_into_hf_does(hf, engine, tiny_model):
    other = tiny_model(image_size=64, seed=1)
    new = build_policy(_cfg(other), device="cpu", warn_untrained_value_head=False, init_seed=1).trainable_state_dict()
    old = hf.trainable_state_dict()
    old = {k: v.clone() for k, v in old.items()}
    inputs = hf.prepare_inputs(_obs(4))
    before = engine.predict(inputs, do_sample=False)
    try:
        engine.load_trainable_state_dict(new)
        hf.load_trainable_state_dict(new)
        assert engine.weight_version == 1
        with torch.no_grad():
            ref = hf.predict(inputs, do_sample=False)
        out = engine.predict(inputs, do_sample=False)
        assert not torch.equal(out.action_record, before.action_record)
        _assert_acts_alike(out, ref)
    finally:
        engine.load_trainable_state_dict(old)
        hf.load_trainable_state_dict(old)
    assert torch.equal(engine.predict(inputs, do_sample=False).action_record, before.action_record)


def test_weight_sync_invalidates_vision_features_of_images_seen_before(hf, engine):
    """vLLM caches encoder (vision) outputs by image hash: after a sync that changes only the
    projector, the same images must be encoded again, as the HF policy does."""
    old = {k: v.clone() for k, v in hf.trainable_state_dict().items()}
    new = {k: v * 1.5 if k.startswith("vla.projector.") else v for k, v in old.items()}
    inputs = hf.prepare_inputs(_obs(9))
    before = engine.predict(inputs, do_sample=False)
    try:
        engine.load_trainable_state_dict(new)
        hf.load_trainable_state_dict(new)
        with torch.no_grad():
            ref = hf.predict(inputs, do_sample=False)
        out = engine.predict(inputs, do_sample=False)
        assert (ref.logprobs - before.logprobs).abs().max() > 100 * TOL  # the projector matters here
        _assert_acts_alike(out, ref, values=False)
    finally:
        engine.load_trainable_state_dict(old)
        hf.load_trainable_state_dict(old)


def test_batch_larger_than_the_engine_batch_keeps_request_order(hf, engine):
    """12 requests through an engine of max_num_seqs=8: two scheduler steps, outputs in order."""
    inputs = hf.prepare_inputs(_obs(6, n=12))
    with torch.no_grad():
        ref = hf.predict(inputs, do_sample=False)
    out = engine.predict(inputs, do_sample=False)
    _assert_acts_alike(out, ref, values=False)


def test_vllm_encoder_only_attention_path_with_two_cameras_matches_hf(tmp_path):
    """Tiny model with 2 heads (head size 32, so vLLM's own bidirectional CPU attention kernel
    runs) and two cameras (main + wrist: 2 x 16 patches per request)."""
    path = create_model("tiny", tmp_path / "hd32", image_size=64, num_images=2, seed=2).path
    config = json.loads((path / "config.json").read_text())
    config["text_config"].update(num_attention_heads=2, num_key_value_heads=2)
    (path / "config.json").write_text(json.dumps(config))
    cfg = _cfg(path, num_images=2)
    hf32 = build_policy(cfg, device="cpu", warn_untrained_value_head=False).eval()
    eng = VLLMOpenVLAOFT(path, cfg, max_num_seqs=8)
    try:
        assert eng.attention == "vllm"
        inputs = hf32.prepare_inputs(_obs(5, wrist=True))
        assert inputs["images"].shape[1] == 6
        with torch.no_grad():
            ref = hf32.predict(inputs, do_sample=False)
        out = eng.predict(inputs, do_sample=False)
        _assert_acts_alike(out, ref)
        # The wrist camera reaches the action slots.
        wrist = {k: v.clone() for k, v in inputs.items()}
        wrist["images"][:, 3:] = 255 - wrist["images"][:, 3:]
        changed, _ = eng.logits_and_hidden(wrist)
        base, _ = eng.logits_and_hidden(inputs)
        assert (changed - base).abs().max() > 1e-3
    finally:
        eng.close()


def _perturbed_adapters(policy, seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return {k: v + 0.05 * torch.randn(v.shape, generator=gen) if "lora_B" in k else v
            for k, v in policy.trainable_state_dict().items()}


def _core_weights_held(engine: VLLMOpenVLAOFT) -> list[str]:
    """Names of the host's core tensors that hold data, adapters aside."""
    return [n for n, t in [*lora.unwrap(engine.host.vla).named_parameters(), *engine.host.vla.named_buffers(remove_duplicate=False)]
            if "lora_" not in n and not t.is_meta and t.is_floating_point() and t.numel() > 1 and "inv_freq" not in n]


def test_lora_adapters_are_folded_into_the_engine_as_peft_applies_them(ckpt, tmp_path):
    """is_lora: the actor syncs adapters and heads only; the engine gets the adapted layers with
    the adapters folded in (Linear layers and the ViTs' Conv2d patch embeddings alike) and acts as
    the HF policy with those adapters does, sync after sync (each replaces the last fold). The
    host keeps no copy of the core: its base weights stay on the meta device and the fold reads
    them from the checkpoint. Saved adapters are folded in at start."""
    cfg = _cfg(ckpt, is_lora=True, lora_rank=4)
    hf_lora = build_policy(cfg, device="cpu", warn_untrained_value_head=False).eval()
    first, second = _perturbed_adapters(hf_lora, 0), _perturbed_adapters(hf_lora, 1)
    assert any("patch_embed.proj.lora_B" in k for k in first) and not any("base_layer" in k for k in first)
    engine = VLLMOpenVLAOFT(ckpt, cfg, max_num_seqs=8)
    inputs = hf_lora.prepare_inputs(_obs(11))
    try:
        assert _core_weights_held(engine) == []
        before = engine.predict(inputs, do_sample=False)
        for sd in (first, second):
            hf_lora.load_trainable_state_dict(sd)
            engine.load_trainable_state_dict(sd)
            with torch.no_grad():
                ref = hf_lora.predict(inputs, do_sample=False)
            out = engine.predict(inputs, do_sample=False)
            _assert_acts_alike(out, ref)
        assert not torch.equal(out.action_record, before.action_record)
    finally:
        engine.close()
    saved = tmp_path / "with_adapters"
    hf_lora.save_checkpoint(saved)
    restarted = VLLMOpenVLAOFT(saved, cfg, max_num_seqs=8)
    try:
        assert restarted.host.loaded_adapters and _core_weights_held(restarted) == []
        out = restarted.predict(inputs, do_sample=False)
    finally:
        restarted.close()
    _assert_acts_alike(out, ref, values=False)


def test_critic_saved_inside_the_main_weights_runs_on_the_host(tmp_path):
    """RLinf saves `value_head.*` in model.safetensors: the engine skips them and its host loads them, as HF does."""
    from safetensors.torch import load_file, save_file

    path = create_model("tiny", tmp_path / "rlinf", image_size=64, seed=3).path
    critic = build_policy(_cfg(path), warn_untrained_value_head=False, init_seed=7).value_head.state_dict()
    weights = load_file(str(path / "model.safetensors"))
    weights.update({f"value_head.{k}": v.contiguous() for k, v in critic.items()})
    save_file(weights, str(path / "model.safetensors"))
    hf3 = build_policy(_cfg(path), warn_untrained_value_head=False).eval()
    assert torch.equal(hf3.value_head.mlp[0].weight, critic["mlp.0.weight"])
    eng = VLLMOpenVLAOFT(path, _cfg(path), max_num_seqs=8)
    try:
        assert torch.equal(eng.host.value_head.mlp[0].weight, critic["mlp.0.weight"])
        inputs = hf3.prepare_inputs(_obs(7))
        with torch.no_grad():
            ref = hf3.predict(inputs, do_sample=False)
        out = eng.predict(inputs, do_sample=False)
        assert torch.equal(out.action_record, ref.action_record)
        assert (out.values - ref.values).abs().max() < TOL
    finally:
        eng.close()
