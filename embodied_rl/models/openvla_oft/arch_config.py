"""The checkpoint's architecture description: official `config.json` (model_type "openvla").

Only what the official `OpenVLAConfig` stores is read, plus one optional field of ours,
`timm_override_args`, that shrinks the timm towers for the tiny preset (absent in official
checkpoints, which use the towers' native sizes).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embodied_rl.config.schema.model import BUILTIN_MODEL_CONFIGS
from embodied_rl.errors import CheckpointError

if TYPE_CHECKING:  # transformers is imported when a model is built, not when a config is checked
    from transformers import LlamaConfig

CONFIG_NAME = "config.json"
# Official ids (vision_backbone_id "dinosiglip-vit-so-224px").
DINOSIGLIP_TIMM_IDS = ["vit_large_patch14_reg4_dinov2.lvd142m", "vit_so400m_patch14_siglip_224"]
# LlamaConfig's defaults (Llama-2-7B's) for the fields that fix the LLM's weight shapes, so a config
# check can compare architectures without importing transformers (~2 s, most of a validation's
# time). tests/test_model_checkpoint.py holds them equal to transformers' own.
LLAMA_SHAPE_DEFAULTS = {"vocab_size": 32000, "hidden_size": 4096, "intermediate_size": 11008,
                        "num_hidden_layers": 32, "num_attention_heads": 32}


@dataclass
class OpenVLAArchConfig:
    """Architecture fields of config.json. `text_config` is a LlamaConfig dict."""

    text_config: dict[str, Any]
    timm_model_ids: list[str] = field(default_factory=lambda: list(DINOSIGLIP_TIMM_IDS))
    image_sizes: list[int] = field(default_factory=lambda: [224, 224])
    use_fused_vision_backbone: bool = True
    pad_token_id: int = 32000
    pad_to_multiple_of: int = 64
    n_action_bins: int = 256
    timm_override_act_layers: list[str | None] | None = None
    timm_override_args: list[dict[str, Any]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # other official fields, written back unchanged

    def llama_config(self) -> LlamaConfig:
        """The LLM config. HF writes nested configs as a diff against the class defaults (which are
        Llama-2-7B's), so official files may list only vocab_size / pad_token_id: fill in the defaults."""
        from transformers import LlamaConfig

        return LlamaConfig(**{k: v for k, v in self.text_config.items() if k != "model_type"})

    def llm_shape(self) -> dict[str, int]:
        """The LLM's weight-shape fields as LlamaConfig would fill them in, without transformers:
        LLAMA_SHAPE_DEFAULTS, and num_key_value_heads = num_attention_heads when absent."""
        out = {k: int(self.text_config.get(k, v)) for k, v in LLAMA_SHAPE_DEFAULTS.items()}
        kv = self.text_config.get("num_key_value_heads")
        out["num_key_value_heads"] = out["num_attention_heads"] if kv is None else int(kv)
        return out

    @property
    def llm_hidden_size(self) -> int:
        return int(self.llama_config().hidden_size)

    @property
    def base_vocab_size(self) -> int:
        """Tokenizer vocabulary before padding (32000 for Llama-2): action ids count down from it."""
        return int(self.llama_config().vocab_size) - int(self.pad_to_multiple_of)

    @property
    def image_size(self) -> int:
        return int(self.image_sizes[0])

    def to_json_dict(self, torch_dtype: str = "float32") -> dict[str, Any]:
        out: dict[str, Any] = {
            "model_type": "openvla",
            "architectures": ["OpenVLAForActionPrediction"],
            "vision_backbone_id": "dinosiglip-vit-so-224px" if self.use_fused_vision_backbone else self.timm_model_ids[0],
            "llm_backbone_id": "llama2-7b-pure",
            "arch_specifier": "no-align+fused-gelu-mlp" if self.use_fused_vision_backbone else "no-align+gelu-mlp",
            "use_fused_vision_backbone": self.use_fused_vision_backbone,
            "image_resize_strategy": "resize-naive",
            "timm_model_ids": list(self.timm_model_ids),
            "timm_override_act_layers": self.timm_override_act_layers or [None] * len(self.timm_model_ids),
            "image_sizes": list(self.image_sizes),
            "text_config": dict(self.text_config),
            "llm_max_length": 2048,
            "pad_token_id": self.pad_token_id,
            "pad_to_multiple_of": self.pad_to_multiple_of,
            "n_action_bins": self.n_action_bins,
            "output_projector_states": False,
            "torch_dtype": torch_dtype,
        }
        out.update(self.extra)
        if self.timm_override_args is not None:
            out["timm_override_args"] = self.timm_override_args
        return out

    @classmethod
    def from_json_dict(cls, d: dict[str, Any], source: str = CONFIG_NAME) -> OpenVLAArchConfig:
        if d.get("model_type") in BUILTIN_MODEL_CONFIGS:  # another policy type of this package saved it
            raise CheckpointError(f"{source}: model_type is {d['model_type']!r}, a {d['model_type']} checkpoint, not an openvla_oft one; "
                                  f"set actor.model.model_type={d['model_type']}")
        if d.get("model_type") not in ("openvla", "prismatic"):
            raise CheckpointError(f"{source}: model_type is {d.get('model_type')!r}, expected 'openvla' (an OpenVLA / OpenVLA-OFT checkpoint)")
        if not isinstance(d.get("text_config"), dict) or d["text_config"].get("model_type", "llama") != "llama":
            raise CheckpointError(f"{source}: text_config must describe a Llama LLM (model_type 'llama'); is this an OpenVLA checkpoint config?")
        known = {"text_config", "timm_model_ids", "image_sizes", "use_fused_vision_backbone", "pad_token_id",
                 "pad_to_multiple_of", "n_action_bins", "timm_override_args", "timm_override_act_layers"}
        derived = {"model_type", "architectures", "vision_backbone_id", "llm_backbone_id", "arch_specifier",
                   "image_resize_strategy", "llm_max_length", "output_projector_states",
                   "torch_dtype", "norm_stats", "transformers_version"}
        kwargs = {k: d[k] for k in known if k in d}
        text = dict(kwargs["text_config"])
        text.setdefault("model_type", "llama")
        kwargs["text_config"] = text
        cfg = cls(**kwargs, extra={k: v for k, v in d.items() if k not in known | derived})
        if len(cfg.timm_model_ids) != (2 if cfg.use_fused_vision_backbone else 1):
            raise CheckpointError(f"{source}: timm_model_ids has {len(cfg.timm_model_ids)} entries but use_fused_vision_backbone={cfg.use_fused_vision_backbone}")
        return cfg

    @classmethod
    def load(cls, ckpt_dir: str | Path) -> OpenVLAArchConfig:
        path = Path(ckpt_dir) / CONFIG_NAME
        if not path.is_file():
            raise CheckpointError(f"{path} not found; model_path must be a checkpoint directory in the HF layout (make one with `embodied-rl make-model tiny DIR`)")
        with open(path) as f:
            return cls.from_json_dict(json.load(f), str(path))

    def save(self, ckpt_dir: str | Path, torch_dtype: str = "float32") -> None:
        with open(Path(ckpt_dir) / CONFIG_NAME, "w") as f:
            json.dump(self.to_json_dict(torch_dtype), f, indent=2)
