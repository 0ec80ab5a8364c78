"""Forward and backward of the policy (where gradients go) and its FSDP2 wrap."""
from __future__ import annotations

import socket

import pytest
import torch

from embodied_rl.models import build_policy
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.types import EnvObservation
from tests.observations import observations

IMG = 56


@pytest.fixture(scope="module")
def ckpt(tiny_model) -> str:
    return str(tiny_model(image_size=IMG, num_images=2))


def make_obs() -> EnvObservation:
    return observations(2, size=64, wrist=True, instructions=["pick up the red cube", "open the top drawer"])


def cfg(path: str, **kw) -> OpenVLAOFTConfig:
    return OpenVLAOFTConfig(model_path=path, num_images_in_input=2, num_action_chunks=2, add_value_head=True, **{"value_type": "action_level", **kw})


def loss_of(policy, obs: EnvObservation) -> torch.Tensor:
    inputs = policy.prepare_inputs(obs)
    with torch.no_grad():
        out = policy.predict(inputs, do_sample=True, temperature=1.0)
    ev = policy.evaluate_actions(inputs, out.action_record, temperature=1.0)
    return ev["logprobs"].sum() + ev["values"].sum() + ev["entropy"].mean()


def test_full_finetune_forward_backward_shapes_and_grads(ckpt):
    policy = build_policy(cfg(ckpt, use_proprio=True))
    obs = make_obs()
    with torch.no_grad():
        out = policy.predict(policy.prepare_inputs(obs), do_sample=True, temperature=1.0)
    assert out.actions.shape == (2, 2, 7) and out.actions.dtype == torch.float32
    assert out.action_record.shape == (2, 14) and out.action_record.dtype == torch.int64
    assert out.logprobs.shape == out.entropy.shape == (2, 14)
    assert out.values.shape == (2, 2)  # action_level: one value per action of the chunk
    assert set(out.forward_inputs) == {"input_ids", "attention_mask", "images", "proprio"}
    assert out.forward_inputs["images"].dtype == torch.uint8 and out.forward_inputs["images"].shape == (2, 6, IMG, IMG)
    loss_of(policy, obs).backward()
    grads = {n: p.grad for n, p in policy.named_parameters()}
    for name in ("value_head.mlp.0.weight", "proprio_projector.fc1.weight", "vla.projector.fc1.weight",
                 "vla.language_model.lm_head.weight", "vla.language_model.model.layers.0.self_attn.q_proj.weight",
                 "vla.vision_backbone.featurizer.blocks.0.attn.qkv.weight",
                 "vla.vision_backbone.fused_featurizer.blocks.0.mlp.fc1.weight"):
        assert grads[name] is not None and grads[name].abs().sum() > 0, name


def test_lora_gradients_reach_only_adapters_and_value_head(ckpt):
    policy = build_policy(cfg(ckpt, is_lora=True, lora_rank=4))
    trainable = {n for n, p in policy.named_parameters() if p.requires_grad}
    assert trainable and all("lora_" in n or n.startswith("value_head.") for n in trainable)
    # LoRA covers both ViTs, the projector, the LLM and lm_head.
    for part in ("featurizer.blocks.0.attn.qkv", "fused_featurizer.blocks.0.mlp.fc2", "projector.fc3",
                 "layers.0.mlp.down_proj", "lm_head"):
        assert any(part in n for n in trainable), part
    # peft's gaussian init has B = 0; perturb it so gradients reach A as well.
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.01)
    loss_of(policy, make_obs()).backward()
    for n, p in policy.named_parameters():
        if not p.requires_grad:
            assert p.grad is None, n
        # Each tower's last block (features come from the second-to-last) and SigLIP's attn_pool are unused.
        elif ".blocks.2." not in n and "attn_pool" not in n:
            assert p.grad is not None, n
    assert set(policy.trainable_state_dict()) == trainable


def test_value_types_and_no_value_head(ckpt):
    obs = make_obs()
    chunk = build_policy(cfg(ckpt, value_type="chunk_level"))
    with torch.no_grad():
        assert chunk.predict(chunk.prepare_inputs(obs), do_sample=False).values.shape == (2, 1)
    plain = build_policy(OpenVLAOFTConfig(model_path=ckpt, num_images_in_input=2, num_action_chunks=3))
    with torch.no_grad():
        out = plain.predict(plain.prepare_inputs(obs), do_sample=False)
    assert out.values is None and out.actions.shape == (2, 3, 7)


def test_gradient_checkpointing_gives_same_gradients(ckpt):
    obs = make_obs()
    grads = []
    for gc in (False, True):
        torch.manual_seed(0)
        policy = build_policy(cfg(ckpt, gradient_checkpointing=gc))
        inputs = policy.prepare_inputs(obs)
        tokens = torch.arange(14).repeat(2, 1)
        policy.train()
        ev = policy.evaluate_actions(inputs, tokens, temperature=1.0)
        ev["logprobs"].sum().backward()
        grads.append(policy.vla.language_model.model.layers[0].mlp.up_proj.weight.grad.clone())
    assert any(getattr(m, "gradient_checkpointing", False) for m in policy.vla.language_model.modules())
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=1e-5)


def test_fsdp2_wrapped_policy_evaluates_and_backprops(ckpt):
    """FSDP2 hooks run on forward only: evaluate_actions goes through forward, so it works wrapped."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    policy = build_policy(cfg(ckpt, is_lora=True, lora_rank=4))
    obs = make_obs()
    inputs = policy.prepare_inputs(obs)
    with torch.no_grad():
        ref = policy.predict(inputs, do_sample=False)
    with socket.socket() as sock:  # a free port: other test sessions may run in parallel
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        for unit in policy.fsdp_units():
            fully_shard(unit)
        fully_shard(policy)
        ev = policy.evaluate_actions(inputs, ref.action_record, temperature=1.0)
        torch.testing.assert_close(ev["logprobs"], ref.logprobs, atol=1e-5, rtol=1e-5)
        (ev["logprobs"].sum() + ev["values"].sum()).backward()
        assert policy.value_head.mlp[0].weight.grad is not None
        with torch.no_grad():
            again = policy.predict(inputs, do_sample=False)
        torch.testing.assert_close(again.logprobs, ref.logprobs, atol=1e-5, rtol=1e-5)
    finally:
        dist.destroy_process_group()
