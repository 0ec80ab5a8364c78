"""The checkpoint's architecture description (config.json, `model_type: cnn_gaussian`) and the
presets a random-init model is made from."""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from embodied_rl.errors import CheckpointError, UserError

CONFIG_NAME = "config.json"
MODEL_TYPE = "cnn_gaussian"


@dataclass(frozen=True)
class CNNGaussianArch:
    """Everything that shapes a weight. state_dim 0 = no state branch."""

    image_size: int = 64
    num_images_in_input: int = 1
    state_dim: int = 9
    action_dim: int = 7
    num_action_chunks: int = 8
    cnn_channels: list[int] = field(default_factory=lambda: [32, 64, 64])
    image_feature_dim: int = 256
    state_feature_dim: int = 256
    head_hidden_dim: int = 512
    squash: str = "clip"

    @property
    def action_width(self) -> int:
        """C*A: the Gaussian's dimensions per sample."""
        return self.num_action_chunks * self.action_dim

    def save(self, out: Path, torch_dtype: str = "float32") -> None:
        (out / CONFIG_NAME).write_text(json.dumps({"model_type": MODEL_TYPE, **dataclasses.asdict(self), "torch_dtype": torch_dtype}, indent=2))

    @classmethod
    def load(cls, path: Path) -> CNNGaussianArch:
        file = Path(path) / CONFIG_NAME
        if not file.is_file():
            raise CheckpointError(f"{file} not found; create a model with `embodied-rl make-model tiny {path} --model-type cnn_gaussian`")
        d = json.loads(file.read_text())
        if d.get("model_type") != MODEL_TYPE:
            other = {"openvla": "openvla_oft", "prismatic": "openvla_oft"}.get(d.get("model_type"), d.get("model_type"))
            raise CheckpointError(f"{file}: model_type is {d.get('model_type')!r}, a {other} checkpoint, not a cnn_gaussian one; "
                                  f"set actor.model.model_type={other}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - names - {"model_type", "torch_dtype"})
        if unknown:
            raise CheckpointError(f"{file}: unknown keys {unknown}; was it written by a newer version?")
        return cls(**{k: v for k, v in d.items() if k in names})


#: Widths of the presets: ManiSkill's ppo_rgb (NatureCNN) and a small one for tests.
PRESETS: dict[str, dict[str, Any]] = {
    "nature_cnn": {"cnn_channels": [32, 64, 64], "image_feature_dim": 256, "state_feature_dim": 256, "head_hidden_dim": 512},
    "tiny": {"cnn_channels": [8, 16, 16], "image_feature_dim": 32, "state_feature_dim": 32, "head_hidden_dim": 64},
}


def preset_arch(name: str, *, image_size: int, overrides: dict[str, Any] | None = None, **dims: Any) -> CNNGaussianArch:
    """The architecture of preset `name` at `image_size` px, its widths replaced by `overrides`
    (the set width keys of actor.model), with the input/output sizes in `dims`."""
    if name not in PRESETS:
        raise UserError(f"unknown cnn_gaussian preset {name!r}; available: {', '.join(PRESETS)}")
    if image_size < 36:
        raise UserError(f"image size {image_size} is below NatureCNN's smallest input (36 px); use e.g. 64")
    return CNNGaussianArch(image_size=image_size, **{**PRESETS[name], **(overrides or {}), **dims})
