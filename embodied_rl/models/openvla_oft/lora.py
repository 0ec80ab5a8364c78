"""LoRA adapters through peft on the core network (both ViTs, projector, LLM, lm_head).

The value head and proprio projector live outside the peft-wrapped core, so they stay fully
trainable and are never wrapped. Adapters are saved with peft (`adapter_config.json` +
`adapter_model.safetensors`) and can be merged into a plain checkpoint.
"""
from __future__ import annotations

import copy
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

import torch
from torch import nn

from embodied_rl.errors import UserError

if TYPE_CHECKING:
    from peft import PeftModel

    from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig

ADAPTER_DIR = "lora_adapter"
# A frozen copy of adapters loaded with the checkpoint: the KL reference when RL starts from them.
REFERENCE_ADAPTER = "kl_reference"


def apply_lora(core: nn.Module, cfg: OpenVLAOFTConfig, adapter_dir: str | Path | None) -> PeftModel:
    """Wrap `core`: load adapters from `adapter_dir` (trainable), or add fresh ones (B = 0, so outputs are unchanged)."""
    from peft import LoraConfig, PeftModel, get_peft_model

    if adapter_dir is not None:
        if not (Path(adapter_dir) / "adapter_config.json").is_file():
            raise UserError(f"actor.model.lora_path={adapter_dir}: no adapter_config.json there (expected a peft adapter directory)")
        return PeftModel.from_pretrained(core, str(adapter_dir), is_trainable=True)
    lora_cfg = LoraConfig(
        r=cfg.lora_rank,
        lora_alpha=cfg.lora_alpha if cfg.lora_alpha is not None else cfg.lora_rank,
        lora_dropout=0.0,
        target_modules=list(cfg.lora_target_modules),
        init_lora_weights="gaussian",  # B = 0: the KL reference of fresh adapters is the base (adapters off)
    )
    return get_peft_model(core, lora_cfg)


def unwrap(vla: nn.Module) -> nn.Module:
    """The core network (with LoRA layers still injected when wrapped)."""
    return vla.get_base_model() if is_peft(vla) else vla


def base_state_dict(vla: nn.Module) -> dict[str, torch.Tensor]:
    """Frozen base weights under the official names (LoRA tensors dropped, `.base_layer.` removed)."""
    sd = unwrap(vla).state_dict()
    if not is_peft(vla):
        return sd
    return {k.replace(".base_layer.", "."): v for k, v in sd.items() if "lora_" not in k}


def merged_adapted_weights(vla: nn.Module, base: Callable[[str], torch.Tensor] | None = None,
                           ) -> Iterator[tuple[str, torch.Tensor]]:
    """(official name, weight with the active adapter folded in) of each adapted layer, one layer
    at a time, from peft's own delta (`get_delta_weight`: Linear and Conv alike). Only these
    weights differ from the base checkpoint, so a consumer holding the base (the vLLM engine)
    needs nothing else. `base(name)`: where the base weight comes from when the model's own is
    not materialised (a checkpoint reader); by default the model's. `vla` is left untouched."""
    from peft.tuners.lora import LoraLayer

    if not is_peft(vla):
        return
    active = vla.active_adapter
    with torch.no_grad():
        for name, module in unwrap(vla).named_modules():
            if isinstance(module, LoraLayer) and active in module.lora_A:
                key = f"{name}.weight"
                weight = module.get_base_layer().weight if base is None else base(key)
                delta = module.get_delta_weight(active)
                yield key, (weight.to(delta.dtype) + delta).to(module.get_base_layer().weight.dtype)


def materialize_adapters(vla: nn.Module, adapter_dir: str | Path | None) -> None:
    """Allocate the adapters of a peft model built on the meta device on the CPU, leaving its base
    weights on meta: the saved adapters of `adapter_dir`, else zeros (a zero B leaves the base as
    it is, which is what fresh adapters do)."""
    from peft import set_peft_model_state_dict
    from peft.utils import load_peft_weights

    for name, module in vla.named_modules():
        if "lora_" in name and not list(module.children()):
            module.to_empty(device="cpu")
            with torch.no_grad():
                for p in module.parameters():
                    p.zero_()
    if adapter_dir is not None:
        result = set_peft_model_state_dict(vla, load_peft_weights(str(adapter_dir), device="cpu"))
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise UserError(f"{adapter_dir}: adapter tensors that fit no LoRA layer of the model, e.g. {', '.join(unexpected[:3])}")


def merged_core(vla: nn.Module) -> nn.Module:
    """A copy of the core with the adapters folded into the base weights (the policy is left untouched)."""
    if not is_peft(vla):
        return vla
    return copy.deepcopy(vla).merge_and_unload()


def save_adapters(vla: nn.Module, out_dir: str | Path) -> None:
    if is_peft(vla):
        # lm_head is a LoRA target but stays frozen: save only the adapters, not a copy of it.
        vla.save_pretrained(str(Path(out_dir) / ADAPTER_DIR), save_embedding_layers=False,
                            selected_adapters=[vla.active_adapter])


def is_reference_key(key: str) -> bool:
    """A state-dict key of the frozen reference adapter (never trained, never synced)."""
    return REFERENCE_ADAPTER in key.split(".")


def freeze_starting_adapters(vla: PeftModel) -> None:
    """Keep a frozen copy of the current adapters as a second, inactive adapter (adapter-sized, not model-sized)."""
    if REFERENCE_ADAPTER in vla.peft_config:
        return
    active = vla.active_adapter
    # Same dtype as the trained adapter (peft would upcast bf16 copies), so both score alike.
    vla.add_adapter(REFERENCE_ADAPTER, copy.deepcopy(vla.peft_config[active]), autocast_adapter_dtype=False)
    params = dict(vla.named_parameters())
    with torch.no_grad():
        for name, param in params.items():
            if is_reference_key(name):
                source = ".".join(active if part == REFERENCE_ADAPTER else part for part in name.split("."))
                param.copy_(params[source])
                param.requires_grad_(False)


@contextmanager
def starting_adapters(vla: PeftModel) -> Iterator[None]:
    """Forward passes inside use the adapters the policy started with: the frozen copy when
    adapters were loaded (freeze_starting_adapters), else none (fresh adapters start as a no-op)."""
    if REFERENCE_ADAPTER not in vla.peft_config:
        with vla.disable_adapter():
            yield
        return
    active = vla.active_adapter
    vla.set_adapter(REFERENCE_ADAPTER, inference_mode=True)
    try:
        yield
    finally:
        vla.set_adapter(active)  # also makes it trainable again, as it was loaded


def is_peft(vla: nn.Module) -> bool:
    """Whether `vla` carries peft adapters. Without peft imported nothing can: peft is imported
    (~3 s of CPU, with the transformers modules it pulls in) only by processes that apply LoRA."""
    peft = sys.modules.get("peft")
    return peft is not None and isinstance(vla, peft.PeftModel)
