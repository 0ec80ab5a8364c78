"""What an OpenVLA-OFT checkpoint directory fixes about the observations and actions it takes,
read from its JSON files alone (no torch, no transformers: the config checks use it).

config.json: the input side in pixels (`image_sizes`) and, for checkpoints made here, the
cameras per sample (`num_images_in_input`); the files every checkpoint shares (statistics,
demos manifest) are read by models/checkpoint_spec.py.
"""
from __future__ import annotations

from pathlib import Path

from embodied_rl.models.checkpoint_spec import CheckpointSpec, checkpoint_spec
from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig


def read_checkpoint_spec(path: str | Path, unnorm_key: str | None) -> CheckpointSpec:
    arch = OpenVLAArchConfig.load(Path(path))
    return checkpoint_spec(path, unnorm_key, image_size=arch.image_size, cameras=arch.extra.get("num_images_in_input"))
