"""LoRA adapters through peft on the core network (both ViTs, projector, LLM, lm_head).

The value head and proprio projector live outside the peft-wrapped core, so they stay fully
trainable and are never wrapped. Adapters are saved with peft (`adapter_config.json` +
`adapter_model.safetensors`) and can be merged into a plain checkpoint.
"""
from __future__ import annotations

import copy
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from torch import nn

from embodied_rl.errors import UserError

if TYPE_CHECKING:
    from embodied_rl.config.schema.model import ModelConfig

ADAPTER_DIR = "lora_adapter"


def apply_lora(core: nn.Module, cfg: ModelConfig, adapter_dir: str | Path | None) -> PeftModel:
    """Wrap `core`: load adapters from `adapter_dir` (trainable), or add fresh ones (B = 0, so outputs are unchanged)."""
    if adapter_dir is not None:
        if not (Path(adapter_dir) / "adapter_config.json").is_file():
            raise UserError(f"actor.model.lora_path={adapter_dir}: no adapter_config.json there (expected a peft adapter directory)")
        return PeftModel.from_pretrained(core, str(adapter_dir), is_trainable=True)
    lora_cfg = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha if cfg.lora_alpha is not None else cfg.lora_rank,
        lora_dropout=0.0,
        target_modules=list(cfg.lora_target_modules),
        init_lora_weights="gaussian",
    )
    return get_peft_model(core, lora_cfg)


def unwrap(vla: nn.Module) -> nn.Module:
    """The core network (with LoRA layers still injected when wrapped)."""
    return vla.get_base_model() if isinstance(vla, PeftModel) else vla


def base_state_dict(vla: nn.Module) -> dict[str, torch.Tensor]:
    """Frozen base weights under the official names (LoRA tensors dropped, `.base_layer.` removed)."""
    sd = unwrap(vla).state_dict()
    if not isinstance(vla, PeftModel):
        return sd
    return {k.replace(".base_layer.", "."): v for k, v in sd.items() if "lora_" not in k}


def merged_core(vla: nn.Module) -> nn.Module:
    """A copy of the core with the adapters folded into the base weights (the policy is left untouched)."""
    if not isinstance(vla, PeftModel):
        return vla
    return copy.deepcopy(vla).merge_and_unload()


def save_adapters(vla: nn.Module, out_dir: str | Path) -> None:
    if isinstance(vla, PeftModel):
        # lm_head is a LoRA target but stays frozen: save only the adapters, not a copy of it.
        vla.save_pretrained(str(Path(out_dir) / ADAPTER_DIR), save_embedding_layers=False)
