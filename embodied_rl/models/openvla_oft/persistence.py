"""OpenVLA-OFT checkpoints: saving in the official on-disk layout (merged or with adapters) and
building the policy from a checkpoint, on the meta device (for sharded loading) or from a preset."""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from transformers import PreTrainedTokenizerFast

from embodied_rl.errors import CheckpointError, ConfigError
from embodied_rl.models.openvla_oft import checkpoint as ckpt
from embodied_rl.models.openvla_oft import lora
from embodied_rl.models.openvla_oft.actions import STATS_NAME, load_dataset_statistics
from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig
from embodied_rl.models.openvla_oft.components import (
    PROPRIO_PROJECTOR,
    VALUE_HEAD,
    checkpoint_norm_stats,
    load_components,
    pop_embedded_critic,
    write_preprocessor_config,
)
from embodied_rl.models.openvla_oft.configuration import OpenVLAOFTConfig
from embodied_rl.models.openvla_oft.modeling import check_attn_implementation

if TYPE_CHECKING:
    from embodied_rl.models.openvla_oft.policy import OpenVLAOFTPolicy


def _enable_activation_checkpointing(model: nn.Module) -> None:
    """Non-reentrant activation checkpointing of a transformers model. transformers 5.2x renamed
    gradient_checkpointing_enable (kept there as a deprecated alias); the vLLM set-up holds
    transformers below 5.20, where only the old name exists."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def _place(module: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """module.to(device, dtype), but RoPE frequency buffers stay fp32 as HF's from_pretrained leaves them."""
    keep = {n: b.detach().clone() for n, b in module.named_buffers() if n.endswith("inv_freq")}
    module.to(device=device, dtype=dtype)
    for name, buf in keep.items():
        owner, _, attr = name.rpartition(".")
        setattr(module.get_submodule(owner), attr, buf.to(device))
    return module


class OFTCheckpointIO:
    """Mixed into OpenVLAOFTPolicy (whose modules, statistics and config it reads)."""

    # ------------------------------------------------------------- checkpoints
    def components(self) -> dict[str, nn.Module | None]:
        """The modules saved beside the core weights, by file name (None: not in this config)."""
        return {VALUE_HEAD: self.value_head, PROPRIO_PROJECTOR: self.proprio_projector}

    def save_checkpoint(self, out_dir: str | Path) -> None:
        """Official layout (+ value_head / proprio_projector safetensors, + lora_adapter/ when is_lora)."""
        self._write(Path(out_dir), lora.base_state_dict(self.vla), with_adapters=True)

    def export_merged(self, out_dir: str | Path) -> None:
        """Plain checkpoint with LoRA folded into the weights: loads with is_lora=false, no peft needed."""
        self._write(Path(out_dir), lora.merged_core(self.vla).state_dict(), with_adapters=False)

    def _write(self, out: Path, core_sd: dict[str, torch.Tensor], with_adapters: bool) -> None:
        out.mkdir(parents=True, exist_ok=True)
        self.arch.save(out, torch_dtype=str(next(iter(core_sd.values())).dtype).removeprefix("torch."))
        ckpt.write_state_dict(core_sd, out)
        self.tokenizer.save_pretrained(str(out))
        with open(out / STATS_NAME, "w") as f:
            json.dump(self.stats, f, indent=2)
        write_preprocessor_config(out, self.image_transform, self.arch)
        for name, module in self.components().items():
            if module is not None:
                ckpt.save_component(module, out / f"{name}.safetensors")
        if with_adapters:
            lora.save_adapters(self.vla, out)

    @classmethod
    def from_checkpoint(cls, path: str | Path, model_cfg: OpenVLAOFTConfig, *, device: torch.device | str = "cpu",
                        dtype: torch.dtype | None = None, warn_untrained_value_head: bool = True,
                        init_seed: int = 0) -> OpenVLAOFTPolicy:
        path, device = Path(path), torch.device(device)
        policy = cls._on_meta(path, model_cfg, device)
        core = policy.vla
        state = ckpt.read_state_dict(path)
        embedded = pop_embedded_critic(state)  # RLinf saves its critic inside the main weights
        ckpt.load_exact(core, state, str(path), assign=True)
        core.rebuild_buffers()
        load_components(policy.components(), path, embedded, warn_untrained_value_head, init_seed)
        ckpt.check_materialized(policy)
        return policy._finish(policy._adapter_dir(path), device, dtype)

    @classmethod
    def skeleton(cls, path: str | Path, model_cfg: OpenVLAOFTConfig, *, device: torch.device | str,
                 dtype: torch.dtype = torch.float32) -> OpenVLAOFTPolicy:
        """The module tree from_checkpoint(path) builds (LoRA wrapping and gradient checkpointing
        included), every parameter and persistent buffer on the meta device in `dtype`: nothing
        read, nothing allocated. The non-persistent buffers (RoPE frequencies, which no checkpoint
        holds) are real fp32 CPU tensors. `device`: where the policy will run (the attention
        kernel is checked against it). For sharded loading (workers/actor/fsdp.py)."""
        path, device = Path(path), torch.device(device)
        policy = cls._on_meta(path, model_cfg, device)
        with warnings.catch_warnings():
            # peft loads saved adapters into the meta tensors, a no-op: their values come with the weights.
            warnings.filterwarnings("ignore", message=".*copying from a non-meta parameter.*to a meta parameter")
            policy._finish(policy._adapter_dir(path), torch.device("meta"), dtype)
        lora.unwrap(policy.vla).rebuild_buffers()
        return policy

    @classmethod
    def _on_meta(cls, path: Path, model_cfg: OpenVLAOFTConfig, device: torch.device) -> OpenVLAOFTPolicy:
        """The policy of the checkpoint at `path`, built on the meta device, before any weight or LoRA."""
        check_attn_implementation(model_cfg.attn_implementation, device)
        arch = OpenVLAArchConfig.load(path)
        stats = load_dataset_statistics(path)
        if not (path / "tokenizer.json").is_file():
            raise CheckpointError(f"{path}/tokenizer.json not found; the checkpoint needs its fast-tokenizer files")
        # The generic fast tokenizer reads tokenizer.json directly: no AutoConfig lookup, no remote code.
        tokenizer = PreTrainedTokenizerFast.from_pretrained(str(path))
        with torch.device("meta"):  # no random init of billions of weights: the checkpoint provides them
            return cls(model_cfg, arch, tokenizer, stats, checkpoint_norm_stats(path))

    def _adapter_dir(self, path: Path) -> Path | str | None:
        adapter_dir = self.model_cfg.lora_path or (path / lora.ADAPTER_DIR if (path / lora.ADAPTER_DIR).is_dir() else None)
        if adapter_dir is not None and not self.model_cfg.is_lora:
            raise ConfigError(f"{path} holds LoRA adapters ({lora.ADAPTER_DIR}/): set actor.model.is_lora=true, or load a merged export")
        return adapter_dir

    def _finish(self, adapter_dir: str | Path | None, device: torch.device, dtype: torch.dtype | None) -> OpenVLAOFTPolicy:
        """LoRA, gradient checkpointing, placement: the steps shared by checkpoint and preset builds."""
        core = self.vla
        if self.model_cfg.is_lora:
            self.vla = lora.apply_lora(core, self.model_cfg, adapter_dir)
            self.loaded_adapters = adapter_dir is not None
        if self.model_cfg.gradient_checkpointing:
            core.vision_backbone.set_grad_checkpointing(True)
            _enable_activation_checkpointing(core.language_model)
        return _place(self, device, dtype or torch.float32)

    @classmethod
    def from_preset(cls, preset: str, model_cfg: OpenVLAOFTConfig, *, device: torch.device | str = "cpu",
                    dtype: torch.dtype | None = None, **preset_kwargs: Any) -> OpenVLAOFTPolicy:
        """Random-init policy of a named architecture preset (tiny | openvla-7b), built directly on `device`."""
        from embodied_rl.models.openvla_oft.presets import make_preset

        device = torch.device(device)
        check_attn_implementation(model_cfg.attn_implementation, device)
        arch, tokenizer, stats = make_preset(preset, **preset_kwargs)
        # Initialise directly in the target dtype on the target device: no fp32 copy of 7B weights.
        previous = torch.get_default_dtype()
        torch.set_default_dtype(dtype or torch.float32)
        try:
            with device:
                policy = cls(model_cfg, arch, tokenizer, stats)
        finally:
            torch.set_default_dtype(previous)
        return policy._finish(None, device, dtype)
