"""Parameter counts of an OpenVLA-OFT policy as configured, from its checkpoint's headers (no
weights read, no torch): the core network (both ViTs, projector, LLM) from model.safetensors,
the heads the policy adds outside it (value head, proprio projector) from their shapes in
heads.py, and LoRA adapters from the shapes of the layers lora_target_modules names."""
from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_rl.memory.params import (
    ParamCounts,
    checkpoint_shapes,
    linear_count,
    lora_parameter_count,
    numel,
    repeated_blocks,
)

if TYPE_CHECKING:
    from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig

# heads.ValueHead: input -> 512 -> 128 -> value_dim, no bias on the last layer.
VALUE_HEAD_WIDTHS = (512, 128)


def parameter_counts(cfg: OpenVLAOFTConfig) -> ParamCounts | None:
    """None when the checkpoint does not exist yet (create_preset makes it at start)."""
    model_dir = Path(cfg.model_path)
    core = checkpoint_shapes(model_dir)
    if core is None or not (model_dir / "config.json").is_file():
        return None
    hidden = int(json.loads((model_dir / "config.json").read_text())["text_config"]["hidden_size"])
    groups = {"vision": numel({k: v for k, v in core.items() if k.startswith("vision_backbone.")}),
              "projector": numel({k: v for k, v in core.items() if k.startswith("projector.")}),
              "llm": numel({k: v for k, v in core.items() if k.startswith("language_model.")})}
    groups["other"] = numel(core) - sum(groups.values())
    heads = 0
    if cfg.add_value_head:
        critic_in = cfg.privileged_state_dim if cfg.value_input == "privileged_state" else hidden
        groups["value_head"] = linear_count(critic_in or 0, *VALUE_HEAD_WIDTHS, cfg.value_dim, bias_last=False)
        heads += groups["value_head"]
    if cfg.use_proprio:
        groups["proprio_projector"] = linear_count(cfg.proprio_dim, hidden, hidden)
        heads += groups["proprio_projector"]
    lora = lora_parameter_count(core, cfg.lora_target_modules, cfg.lora_rank) if cfg.is_lora else 0
    if lora:
        groups["lora"] = lora
    total = numel(core) + lora + heads
    blocks = repeated_blocks(core)
    return ParamCounts(total=total, trainable=lora + heads if cfg.is_lora else total,
                       largest_unit=max(blocks.values(), default=0),
                       root_unit=numel(core) - sum(blocks.values()), groups={k: v for k, v in groups.items() if v})
