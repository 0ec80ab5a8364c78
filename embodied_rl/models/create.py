"""Create a randomly initialised policy from an architecture preset and write it in its
checkpoint layout: the one function the CLI (`embodied-rl make-model`), the runtime
(`actor.model.create_preset`), tests and benchmarks use."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from embodied_rl.config.schema.model import model_config
from embodied_rl.errors import UserError
from embodied_rl.models.registry import PRECISION_DTYPES, policy_class


@dataclass(frozen=True)
class CreatedModel:
    path: Path
    num_parameters: int


def create_model(preset: str, out_dir: str | Path, *, model_type: str = "openvla_oft", image_size: int = 224,
                 num_images: int = 1, action_dim: int = 7, proprio_dim: int = 8, use_proprio: bool | None = False,
                 unnorm_key: str = "identity", precision: str = "fp32", seed: int = 0,
                 model_keys: Mapping[str, Any] | None = None) -> CreatedModel:
    """Write preset `preset` of `model_type` (weights seeded by `seed`, identity action statistics
    under `unnorm_key`) to `out_dir`, which must be empty or absent. `use_proprio` writes a proprio
    projector too, so a policy that reads its state starts from weights saved with it (None: the
    model type's default). `model_keys`: more actor.model keys of the model type that the created
    model follows (its config class's `preset_keys()`)."""
    out = Path(out_dir)
    if out.exists() and any(out.iterdir()):
        raise UserError(f"{out} exists and is not empty; choose a new directory")
    torch.manual_seed(seed)
    keys = dict(model_keys or {})
    if use_proprio is not None:
        keys["use_proprio"] = use_proprio
    cfg = model_config(model_type, model_path=str(out), action_dim=action_dim, num_images_in_input=num_images,
                       proprio_dim=proprio_dim, unnorm_key=unnorm_key, **keys)
    policy = policy_class(model_type).from_preset(
        preset, cfg, dtype=PRECISION_DTYPES[precision], image_size=image_size, action_dim=action_dim,
        proprio_dim=proprio_dim, num_images_in_input=num_images, unnorm_key=unnorm_key)
    policy.save_checkpoint(out)
    return CreatedModel(out, sum(p.numel() for p in policy.parameters()))
