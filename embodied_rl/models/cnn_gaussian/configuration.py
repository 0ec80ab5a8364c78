"""`actor.model` keys of `model_type: cnn_gaussian`, beside the model they configure.

The architecture's sizes come from the checkpoint's config.json (a preset makes them); the
width keys here are null by default and, when set, are what a created model takes and what a
loaded checkpoint must have. Shared keys that only OpenVLA-OFT reads are refused when set.
The shared keys keep their shared defaults (the loader fills them in before it knows the model
type): `use_proprio: true` makes the policy read the state (proprio_dim values, normalised with
the 'proprio' statistics) through an MLP beside the image encoder; false = images only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from embodied_rl.config.schema.model import (
    ModelConfig,
    model_key_error,
    register_model_config,
)

if TYPE_CHECKING:
    from embodied_rl.memory.params import ParamCounts
    from embodied_rl.models.checkpoint_spec import CheckpointSpec

SQUASHES = ("clip", "tanh")
#: Shared keys this policy has no use for, with the value that means "unused". Looked up with
#: getattr, so a key that moves out of the shared class is simply not checked here any more.
NOT_APPLICABLE = {"gradient_checkpointing": False, "is_lora": False, "lora_rank": 32,
                  "lora_alpha": None, "lora_path": None}
#: The keys a created model follows besides the ones create_model takes.
ARCH_KEYS = ("num_action_chunks", "squash", "log_std_init", "cnn_channels", "image_feature_dim", "state_feature_dim",
             "head_hidden_dim")


@register_model_config("cnn_gaussian")
@dataclass
class CNNGaussianConfig(ModelConfig):
    squash: str = field(default="clip", metadata={"help": "How a Gaussian sample u (the action record) becomes a normalised action: clip (clip(u, -1, 1); log-probs are of u, as ManiSkill's ppo_rgb) | tanh (tanh(u), log-probs with the change-of-variables term)."})
    log_std_init: float = field(default=-0.5, metadata={"help": "Initial value of the state-independent log standard deviation of a created model (ppo_rgb: -0.5); a checkpoint keeps its learned one."})
    cnn_channels: list[int] | None = field(default=None, metadata={"help": "Output channels of NatureCNN's three convolutions (8x8/4, 4x4/2, 3x3/1); null = the checkpoint's (the preset's when created)."})
    image_feature_dim: int | None = field(default=None, metadata={"help": "Width of the image features after the CNN; null = the checkpoint's."})
    state_feature_dim: int | None = field(default=None, metadata={"help": "Width of the state MLP's output; null = the checkpoint's."})
    head_hidden_dim: int | None = field(default=None, metadata={"help": "Hidden width of the action-mean and value heads; null = the checkpoint's."})

    def validate(self) -> None:
        super().validate()
        for key, unused in NOT_APPLICABLE.items():
            if hasattr(self, key) and getattr(self, key) != unused:
                raise model_key_error(key, f"is an OpenVLA-OFT key; model_type cnn_gaussian has no use for it: remove it (or set {unused})")
        if self.squash not in SQUASHES:
            raise model_key_error("squash", f"got {self.squash!r}, expected one of {', '.join(SQUASHES)}")
        if self.cnn_channels is not None and (len(self.cnn_channels) != 3 or min(self.cnn_channels) < 1):
            raise model_key_error("cnn_channels", f"needs 3 positive channel counts (one per convolution), got {self.cnn_channels}")
        for key in ("image_feature_dim", "state_feature_dim", "head_hidden_dim"):
            if getattr(self, key) is not None and getattr(self, key) < 1:
                raise model_key_error(key, f"must be >= 1 or null, got {getattr(self, key)}")
        if self.image_size is not None and self.image_size < 36:
            raise model_key_error("image_size", f"NatureCNN needs at least 36 px, got {self.image_size}")

    def arch_overrides(self) -> dict[str, Any]:
        """The width keys that are set (not null)."""
        return {k: getattr(self, k) for k in ("cnn_channels", "image_feature_dim", "state_feature_dim", "head_hidden_dim")
                if getattr(self, k) is not None}

    def preset_keys(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in ARCH_KEYS}

    def preset_names(self) -> tuple[str, ...]:
        from embodied_rl.models.cnn_gaussian.arch import PRESETS

        return tuple(PRESETS)

    def preset_mismatch(self, name: str, image_size: int, path: str) -> str | None:
        from embodied_rl.models.cnn_gaussian.arch import CNNGaussianArch, preset_arch

        have = CNNGaussianArch.load(Path(path))
        want = preset_arch(name, image_size=image_size, overrides=self.arch_overrides())
        for key in ("image_size", "cnn_channels", "image_feature_dim", "state_feature_dim", "head_hidden_dim"):
            if getattr(want, key) != getattr(have, key):
                return f"{key} is {getattr(have, key)}, the preset's is {getattr(want, key)}"
        return None

    def checkpoint_spec(self) -> CheckpointSpec:
        from embodied_rl.models.checkpoint_spec import checkpoint_spec
        from embodied_rl.models.cnn_gaussian.arch import CNNGaussianArch

        arch = CNNGaussianArch.load(Path(self.model_path))
        return checkpoint_spec(self.model_path, self.unnorm_key, image_size=arch.image_size, cameras=arch.num_images_in_input)

    def parameter_counts(self) -> ParamCounts | None:
        """Counted on the checkpoint's module tree built on the meta device (None: no checkpoint yet).
        Everything trains; the encoder and the value head are FSDP's separately sharded units."""
        if not (Path(self.model_path) / "config.json").is_file():
            return None
        from embodied_rl.memory.params import ParamCounts
        from embodied_rl.models.cnn_gaussian.policy import CNNGaussianPolicy

        tree = CNNGaussianPolicy.skeleton(self.model_path, self, device="cpu")
        size = lambda m: sum(p.numel() for p in m.parameters())
        total, units = size(tree), [size(u) for u in tree.fsdp_units()]
        groups = {name: size(child) for name, child in tree.named_children()} | {"log_std": tree.log_std.numel()}
        return ParamCounts(total=total, trainable=total, largest_unit=max(units, default=0), root_unit=total - sum(units), groups=groups)

    def activation_bytes(self, env_cfg: Any, micro_batch: int, param_dtype: str) -> int | str:
        from embodied_rl.models.activations import activation_bytes

        return activation_bytes(self, env_cfg, micro_batch, param_dtype)

