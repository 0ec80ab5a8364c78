"""The KL reference: under LoRA the policy's own weights (adapters off, or a frozen copy of the
adapters it was loaded with), under full fine-tuning a second copy; both score as the policy
did when RL started, also after training changed it. Real tiny OFT model, real peft."""
from __future__ import annotations

import logging

import pytest
import torch

from embodied_rl.models import build_policy
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.reference import KLReference, build_kl_reference
from embodied_rl.types import EnvObservation
from tests.observations import observations

ATOL = 1e-5  # fp32


@pytest.fixture(scope="module")
def tiny(tiny_model, tmp_path_factory):
    """The tiny model as an SFT checkpoint: no value head, no proprio projector."""
    out = tmp_path_factory.mktemp("tiny") / "sft"
    build_policy(OpenVLAOFTConfig(model_path=str(tiny_model()), add_value_head=False)).save_checkpoint(out)
    return out


@pytest.fixture(scope="module")
def tiny_proprio(tiny, tmp_path_factory):
    """The tiny model with a proprio projector saved beside it, as OFT's LIBERO checkpoints ship."""
    out = tmp_path_factory.mktemp("tiny_proprio") / "m"
    build_policy(OpenVLAOFTConfig(model_path=str(tiny), use_proprio=True, add_value_head=False)).save_checkpoint(out)
    return out


def _obs() -> EnvObservation:
    return observations(3, size=60, seed=11, instructions=["pick up the cube", "open the drawer", "stack the blocks"])


def _cfg(path, **kw) -> OpenVLAOFTConfig:
    return OpenVLAOFTConfig(model_path=str(path), num_action_chunks=2, add_value_head=True, value_type="chunk_level", **kw)


def _lora(path, **kw) -> OpenVLAOFTConfig:
    return _cfg(path, is_lora=True, lora_rank=4, lora_alpha=8, **kw)


def _train(policy) -> None:
    """Stands in for RL updates: every trainable tensor moves (LoRA B becomes non-zero)."""
    with torch.no_grad():
        for p in policy.parameters():
            if p.requires_grad:
                p.add_(torch.randn_like(p) * 0.05)


def _sample(policy) -> tuple[dict, torch.Tensor]:
    inputs = policy.prepare_inputs(_obs())
    with torch.no_grad():
        out = policy.predict(inputs, do_sample=True, temperature=1.0, generator=torch.Generator().manual_seed(0))
    return inputs, out.action_record


def _copy_reference(cfg: OpenVLAOFTConfig) -> KLReference:
    """The second-copy path, built by hand so it exists under LoRA too."""
    return KLReference(build_policy(cfg).eval())


def _scores(policy, reference: KLReference, inputs, tokens) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        own = policy.evaluate_actions(inputs, tokens, compute_values=False)["logprobs"]
    return own, reference.logprobs(inputs, tokens)


@pytest.mark.parametrize("use_proprio", [False, True])
def test_adapters_off_reference_equals_second_copy_and_ignores_training(tiny, tiny_proprio, use_proprio):
    # With use_proprio the (trainable) projector must keep its starting weights in the reference too.
    cfg = _lora(tiny_proprio, use_proprio=True) if use_proprio else _lora(tiny)
    policy = build_policy(cfg).eval()
    reference = build_kl_reference(policy, cfg, "cpu")
    assert reference.shares_weights and reference.scorer is policy
    copy_ref = _copy_reference(cfg)
    inputs, tokens = _sample(policy)
    own, ref = _scores(policy, reference, inputs, tokens)
    torch.testing.assert_close(ref, copy_ref.logprobs(inputs, tokens), atol=ATOL, rtol=0)
    torch.testing.assert_close(ref, own, atol=ATOL, rtol=0)  # fresh adapters (B = 0) change nothing yet

    _train(policy)
    own, ref = _scores(policy, reference, inputs, tokens)
    assert (own - ref).abs().max() > 1e-3, "training moved the policy away from the reference"
    torch.testing.assert_close(ref, copy_ref.logprobs(inputs, tokens), atol=ATOL, rtol=0)
    # The reference view is temporary: outside it the policy scores with its trained weights again.
    torch.testing.assert_close(policy.evaluate_actions(inputs, tokens, compute_values=False)["logprobs"], own, atol=0, rtol=0)
    assert all(p.requires_grad == ("lora_" in n or n.startswith(("value_head", "proprio_projector")))
               for n, p in policy.named_parameters())


def test_reference_from_loaded_adapters_is_those_adapters_not_the_base(tiny, tmp_path):
    trained = build_policy(_lora(tiny))
    _train(trained)
    trained.save_checkpoint(tmp_path / "ck")
    cfg = _lora(tiny, lora_path=str(tmp_path / "ck" / "lora_adapter"))
    policy = build_policy(cfg).eval()
    reference = build_kl_reference(policy, cfg, "cpu")
    copy_ref = _copy_reference(cfg)
    base_ref = KLReference(build_policy(_cfg(tiny)).eval())  # the SFT weights alone
    inputs, tokens = _sample(policy)
    own, ref = _scores(policy, reference, inputs, tokens)
    torch.testing.assert_close(ref, own, atol=ATOL, rtol=0)
    assert (ref - base_ref.logprobs(inputs, tokens)).abs().max() > 1e-3, "the loaded adapters, not the base"

    # Weight sync carries only the trained adapter: the frozen copy stays out of it and keeps the start.
    update = {k: v + 0.05 * torch.randn_like(v) for k, v in policy.trainable_state_dict().items()}
    assert not any("kl_reference" in k for k in update)
    policy.load_trainable_state_dict(update)
    own, ref = _scores(policy, reference, inputs, tokens)
    assert (own - ref).abs().max() > 1e-3
    torch.testing.assert_close(ref, copy_ref.logprobs(inputs, tokens), atol=ATOL, rtol=0)
    # Switching adapters for the reference leaves the trained one trainable and the copy frozen.
    assert all(p.requires_grad == ("lora_" in n and "kl_reference" not in n or n.startswith("value_head"))
               for n, p in policy.named_parameters())


def test_full_fine_tuning_keeps_a_second_copy_without_value_head(tiny):
    cfg = _cfg(tiny)
    policy = build_policy(cfg).eval()
    reference = build_kl_reference(policy, cfg, "cpu")
    assert not reference.shares_weights and reference.scorer is not policy
    assert reference.scorer.value_head is None and not any(p.requires_grad for p in reference.scorer.parameters())
    inputs, tokens = _sample(policy)
    _train(policy)
    own, ref = _scores(policy, reference, inputs, tokens)
    assert (own - ref).abs().max() > 1e-3
    torch.testing.assert_close(ref, _copy_reference(cfg).logprobs(inputs, tokens), atol=0, rtol=0)


def _value_head_warnings(caplog, cfg: OpenVLAOFTConfig, **kw) -> list[str]:
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="embodied_rl.models.openvla_oft.components"):
        build_policy(cfg, **kw)
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and "value_head" in r.getMessage()]


def test_missing_value_head_warns_only_where_the_value_head_is_used(tiny, caplog):
    assert _value_head_warnings(caplog, _cfg(tiny)), "a critic starting untrained is worth a warning (actor)"
    assert not _value_head_warnings(caplog, _cfg(tiny), warn_untrained_value_head=False)  # rollout workers
    assert any("value_head" in r.getMessage() for r in caplog.records)  # still logged, at info level
    assert not _value_head_warnings(caplog, OpenVLAOFTConfig(model_path=str(tiny), num_action_chunks=2, add_value_head=False))
