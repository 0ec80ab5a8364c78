"""The vLLM backend's sequence layout and engine directory (pure code: runs without vLLM)."""
from __future__ import annotations

import json

import pytest

from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig
from embodied_rl.models.openvla_oft.presets import tiny_arch
from embodied_rl.models.openvla_oft.vllm import layout


def test_engine_prompt_and_readout_rows_match_the_hf_layout():
    arch = tiny_arch(image_size=64)
    image_id, action_id = layout.placeholder_ids(arch)
    assert (image_id, action_id) == (arch.pad_token_id + 1, arch.pad_token_id + 2)
    prompt = layout.engine_prompt([1, 7, 8, 9], image_id, action_id, 3, stop_id=2)
    assert prompt == [1, image_id, 7, 8, 9, action_id, action_id, action_id, 2]
    # After the processor expands IMAGE into P patches (+ extras) the sequence has len(prompt) - 1 + P rows;
    # the readout rows are those just before each action slot.
    p = 16
    seq_len = len(prompt) - 1 + p
    rows = range(seq_len)[layout.readout_slice(seq_len, 3, append_stop_token=True)]
    slots = [i for i in range(seq_len) if seq_len - 4 <= i < seq_len - 1]
    assert list(rows) == [s - 1 for s in slots]
    assert list(range(8)[layout.readout_slice(8, 3, append_stop_token=False)]) == [4, 5, 6]


@pytest.mark.parametrize(("heads", "expected"), [(4, "sdpa"), (2, "vllm")])
def test_auto_attention_uses_vllm_kernels_only_for_supported_head_sizes(heads, expected):
    arch = tiny_arch(image_size=64)
    arch.text_config.update(num_attention_heads=heads, num_key_value_heads=heads)
    cfg = layout.engine_config(arch, num_images=1, num_extra=0, num_action_tokens=56, append_stop_token=True, attention="auto")
    assert cfg["oft_attention"] == expected
    assert cfg["is_causal"] is False and cfg["model_type"] == "llama"
    assert OpenVLAArchConfig.from_json_dict(cfg["oft_arch"]).text_config["num_attention_heads"] == heads
    assert cfg["oft_patches_per_image"] == 16


def test_engine_dir_links_only_the_main_weights(tmp_path):
    src = tmp_path / "ckpt"
    src.mkdir()
    for name in ("model.safetensors", "value_head.safetensors"):
        (src / name).write_bytes(b"x")
    out = layout.write_engine_dir(src, tmp_path / "engine", {"a": 1})
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors"]
    assert (out / "model.safetensors").resolve() == (src / "model.safetensors").resolve()
    assert json.loads((out / "config.json").read_text()) == {"a": 1}
