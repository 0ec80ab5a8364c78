"""Architecture presets for random-init models: `tiny` (CPU tests, fast runs), `small` (memory
measurements) and `openvla-7b`.

A preset yields what a checkpoint directory holds besides weights: the config.json
contents, a tokenizer and dataset statistics. Statistics use q01 = -1, q99 = +1 under the
key `identity`, so un-normalisation is the identity (up to 1e-8) and the policy's actions
are the bin centres in [-1, 1]; scale them to the controller in the env's action adapter.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from embodied_rl.errors import UserError
from embodied_rl.models.openvla_oft.arch_config import (
    DINOSIGLIP_TIMM_IDS,
    OpenVLAArchConfig,
)

IDENTITY_KEY = "identity"


def identity_statistics(action_dim: int, proprio_dim: int, key: str = IDENTITY_KEY) -> dict[str, Any]:
    def block(dim: int) -> dict[str, Any]:
        return {"mean": [0.0] * dim, "std": [1.0] * dim, "min": [-1.0] * dim, "max": [1.0] * dim,
                "q01": [-1.0] * dim, "q99": [1.0] * dim, "mask": [True] * dim}
    return {key: {"action": block(action_dim), "proprio": block(proprio_dim), "num_transitions": 0, "num_trajectories": 0}}


def _llama(vocab: int, hidden: int, inter: int, layers: int, heads: int, pad: int) -> dict[str, Any]:
    return {"model_type": "llama", "vocab_size": vocab, "hidden_size": hidden, "intermediate_size": inter,
            "num_hidden_layers": layers, "num_attention_heads": heads, "num_key_value_heads": heads,
            "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
            "pad_token_id": pad, "bos_token_id": 1, "eos_token_id": 2, "tie_word_embeddings": False,
            "hidden_act": "silu", "attention_bias": False, "torch_dtype": "float32"}


def tiny_arch(image_size: int = 224, base_vocab: int = 512) -> OpenVLAArchConfig:
    """Same families and wiring as OpenVLA-OFT at ~0.4M parameters (ViT 32/48-d x 3 blocks, LLM 64-d x 2 layers)."""
    return OpenVLAArchConfig(
        text_config=_llama(base_vocab + 64, 64, 128, 2, 4, base_vocab),
        timm_model_ids=list(DINOSIGLIP_TIMM_IDS),
        image_sizes=[image_size, image_size],
        pad_token_id=base_vocab,
        timm_override_args=[{"embed_dim": 32, "depth": 3, "num_heads": 2}, {"embed_dim": 48, "depth": 3, "num_heads": 2}],
    )


def small_arch(image_size: int = 224) -> OpenVLAArchConfig:
    """The tiny wiring at ~45M parameters (ViT 256-d x 6 blocks per tower, LLM 512-d x 8 layers,
    8K vocabulary): big enough that memory measurements of whole-model copies stand out."""
    base_vocab = 8192
    return OpenVLAArchConfig(
        text_config=_llama(base_vocab + 64, 512, 1376, 8, 8, base_vocab),
        timm_model_ids=list(DINOSIGLIP_TIMM_IDS),
        image_sizes=[image_size, image_size],
        pad_token_id=base_vocab,
        timm_override_args=[{"embed_dim": 256, "depth": 6, "num_heads": 4}, {"embed_dim": 256, "depth": 6, "num_heads": 4}],
    )


def openvla_7b_arch(image_size: int = 224) -> OpenVLAArchConfig:
    """openvla-7b dimensions: DINOv2 ViT-L/14 + SigLIP So400m/14, Llama-2-7B (vocab padded to 32064)."""
    return OpenVLAArchConfig(text_config=_llama(32064, 4096, 11008, 32, 32, 32000), image_sizes=[image_size, image_size])


PRESETS = {"tiny": tiny_arch, "small": small_arch, "openvla-7b": openvla_7b_arch}


def make_preset(name: str, *, image_size: int = 224, action_dim: int = 7, proprio_dim: int = 8,
                num_images_in_input: int | None = None, unnorm_key: str = IDENTITY_KEY) -> tuple[OpenVLAArchConfig, Any, dict[str, Any]]:
    """-> (arch config, tokenizer, dataset statistics) of a preset."""
    if name not in PRESETS:
        raise UserError(f"unknown model preset {name!r}; available: {', '.join(PRESETS)}")
    if image_size < 14:
        raise UserError(f"image size {image_size} is smaller than one ViT patch (14 px); use e.g. 56, 64 or 224")
    arch = PRESETS[name](image_size=image_size)
    if num_images_in_input is not None:
        arch.extra["num_images_in_input"] = num_images_in_input  # recorded so a mismatching config fails early
    # transformers is imported only when a preset is made
    from embodied_rl.models.openvla_oft.tiny_tokenizer import build_tiny_tokenizer

    tokenizer = build_tiny_tokenizer(arch.base_vocab_size, arch.n_action_bins)
    return arch, tokenizer, identity_statistics(action_dim, proprio_dim, unnorm_key)


def preset_mismatch(name: str, image_size: int, ckpt_dir: str | Path) -> str | None:
    """How the checkpoint in `ckpt_dir` differs from preset `name` at `image_size`; None if it
    has that architecture (weights and statistics are not compared)."""
    if name not in PRESETS:
        raise UserError(f"unknown model preset {name!r}; available: {', '.join(PRESETS)}")
    want, have = PRESETS[name](image_size=image_size), OpenVLAArchConfig.load(ckpt_dir)
    fields = [("image_sizes", want.image_sizes, have.image_sizes), ("timm_model_ids", want.timm_model_ids, have.timm_model_ids),
              ("timm_override_args", want.timm_override_args, have.timm_override_args)]
    w_llm, h_llm = want.llm_shape(), have.llm_shape()
    fields += [(f"text_config.{k}", w, h_llm[k]) for k, w in w_llm.items()]
    for key, w, h in fields:
        if w != h:
            return f"{key} is {h}, the preset's is {w}"
    return None
