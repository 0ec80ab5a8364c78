"""How an OFT checkpoint is presented to vLLM, without importing vLLM.

vLLM reads a Llama-typed `config.json` (our `openvla` type is unknown to transformers), so
the engine gets its own directory: that config, with the OFT fields vLLM's model class
needs under `oft_*` keys, plus symlinks to the checkpoint's main safetensors files.

The sequence vLLM sees is the HF path's sequence without padding:
    [BOS] [IMAGE x (N_img*P + n_extra)] prompt[1:] [ACTION x T] [</s>?]
Positions then run 0..n-1, which is what the HF path's pad-skipping position ids give.
IMAGE and ACTION are ids in the vocabulary's padding range (never produced by the
tokenizer): IMAGE rows are replaced by projected patches (and proprio), ACTION rows by zeros.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch

from embodied_rl.errors import CheckpointError
from embodied_rl.models.openvla_oft import checkpoint as ckpt
from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig
from embodied_rl.models.openvla_oft.vision import FusedVisionBackbone

ARCHITECTURE = "OpenVLAOFTActionReadout"
# CPU_ATTN kernels exist only for these head sizes; other sizes use the model's own SDPA.
VLLM_ATTN_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
ATTENTION_CHOICES = ("auto", "vllm", "sdpa")


def placeholder_ids(arch: OpenVLAArchConfig) -> tuple[int, int]:
    """(image id, action-slot id): the first two ids after the pad token, inside the padded vocab."""
    image_id, action_id = arch.pad_token_id + 1, arch.pad_token_id + 2
    if action_id >= arch.llama_config().vocab_size:
        raise CheckpointError(f"vocab_size {arch.llama_config().vocab_size} leaves no free ids after pad_token_id {arch.pad_token_id} for placeholders")
    return image_id, action_id


def patches_per_image(arch: OpenVLAArchConfig) -> int:
    with torch.device("meta"):
        return FusedVisionBackbone(arch, 1).num_patches_per_image


def resolve_attention(attention: str, head_size: int) -> str:
    """'auto' -> vLLM's encoder-only attention where its CPU kernel supports the head size, else 'sdpa'."""
    if attention not in ATTENTION_CHOICES:
        raise ValueError(f"attention must be one of {ATTENTION_CHOICES}, got {attention!r}")
    if attention == "auto":
        return "vllm" if head_size in VLLM_ATTN_HEAD_SIZES else "sdpa"
    return attention


def sequence_length(arch: OpenVLAArchConfig, num_images: int, num_extra: int, max_prompt_length: int,
                    num_action_tokens: int, append_stop_token: bool) -> int:
    return 1 + num_images * patches_per_image(arch) + num_extra + (max_prompt_length - 1) + num_action_tokens + int(append_stop_token)


def engine_config(arch: OpenVLAArchConfig, *, num_images: int, num_extra: int, num_action_tokens: int,
                  append_stop_token: bool, attention: str) -> dict[str, Any]:
    """The config.json vLLM reads: the Llama text config plus the OFT fields under `oft_*`."""
    text = arch.llama_config()
    head_size = text.hidden_size // text.num_attention_heads
    image_id, action_id = placeholder_ids(arch)
    cfg = {k: v for k, v in arch.text_config.items()}
    cfg.update({
        "model_type": "llama",
        "architectures": [ARCHITECTURE],
        "is_causal": False,  # vLLM then treats the model as encoder-only: no KV cache, no chunked prefill
        "torch_dtype": "float32",
        "oft_arch": arch.to_json_dict(),
        "oft_num_images": num_images,
        "oft_num_extra_tokens": num_extra,
        "oft_patches_per_image": patches_per_image(arch),
        "oft_num_action_tokens": num_action_tokens,
        "oft_append_stop_token": append_stop_token,
        "oft_image_token_id": image_id,
        "oft_action_token_id": action_id,
        "oft_attention": resolve_attention(attention, head_size),
    })
    return cfg


def write_engine_dir(ckpt_dir: str | Path, out_dir: str | Path, config: dict[str, Any]) -> Path:
    """config.json + symlinks to the checkpoint's main weights (value head / proprio files stay out:
    those modules run in our code, not in vLLM)."""
    src, out = Path(ckpt_dir).resolve(), Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if (src / ckpt.INDEX_NAME).is_file():
        with open(src / ckpt.INDEX_NAME) as f:
            names = sorted(set(json.load(f)["weight_map"].values())) + [ckpt.INDEX_NAME]
    elif (src / ckpt.SINGLE_NAME).is_file():
        names = [ckpt.SINGLE_NAME]
    else:
        raise CheckpointError(f"{src} has no {ckpt.INDEX_NAME} or {ckpt.SINGLE_NAME}")
    for name in names:
        link = out / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(src / name)
    with open(out / "config.json", "w") as f:
        json.dump(config, f, indent=2)
    return out


def engine_prompt(ids: list[int], image_id: int, action_id: int, num_action_tokens: int, stop_id: int | None) -> list[int]:
    """Unpadded prompt ids (BOS first) -> the token ids of the vLLM request (one IMAGE id, expanded by the processor)."""
    tail = [stop_id] if stop_id is not None else []
    return [ids[0], image_id, *ids[1:], *([action_id] * num_action_tokens), *tail]


def readout_slice(seq_len: int, num_action_tokens: int, append_stop_token: bool) -> slice:
    """Rows whose hidden states predict the action slots: the one before each slot (HF shift)."""
    end = seq_len - int(append_stop_token)
    return slice(end - num_action_tokens - 1, end - 1)
