"""What an OpenVLA-OFT checkpoint holds beside the core weights: the image normalisation
(preprocessor_config.json) and the RL components (value head, proprio projector), each in its
own safetensors file or, for RLinf's critic, inside the main weights."""
from __future__ import annotations

import json
import logging
import zlib
from pathlib import Path

import torch
from torch import nn

from embodied_rl.errors import CheckpointError
from embodied_rl.models.openvla_oft import checkpoint as ckpt
from embodied_rl.models.openvla_oft.arch_config import OpenVLAArchConfig
from embodied_rl.models.openvla_oft.processor import ImageTransform

logger = logging.getLogger(__name__)
PREPROCESSOR_NAME = "preprocessor_config.json"
VALUE_HEAD = "value_head"
PROPRIO_PROJECTOR = "proprio_projector"
COMPONENTS = (VALUE_HEAD, PROPRIO_PROJECTOR)


def checkpoint_norm_stats(ckpt_dir: Path) -> tuple[list, list] | None:
    """Per-tower (means, stds) from preprocessor_config.json, None when the file is absent."""
    path = ckpt_dir / PREPROCESSOR_NAME
    if not path.is_file():
        logger.info("%s: no %s; using the vision towers' own image normalisation", ckpt_dir, PREPROCESSOR_NAME)
        return None
    with open(path) as f:
        pre = json.load(f)
    if "means" not in pre or "stds" not in pre:
        raise CheckpointError(f"{path} lacks 'means'/'stds' (one list of 3 per vision tower)")
    return pre["means"], pre["stds"]


def write_preprocessor_config(out: Path, transform: ImageTransform, arch: OpenVLAArchConfig) -> None:
    """The official Prismatic image-processor file, with the normalisation the policy uses."""
    towers = len(arch.timm_model_ids)
    config = {"image_processor_type": "PrismaticImageProcessor", "image_resize_strategy": "resize-naive",
              "input_sizes": [[3, transform.image_size, transform.image_size]] * towers,
              "interpolations": ["bicubic"] * towers,
              "means": transform.means.reshape(-1, 3).tolist(), "stds": transform.stds.reshape(-1, 3).tolist(),
              "tvf_do_letterbox": False, "use_fused_vision_backbone": arch.use_fused_vision_backbone}
    with open(out / PREPROCESSOR_NAME, "w") as f:
        json.dump(config, f, indent=2)


def pop_embedded_critic(state: dict[str, torch.Tensor]) -> dict[str, dict[str, torch.Tensor]]:
    """Remove RLinf's `value_head.*` tensors from the main weights; {VALUE_HEAD: its state} or {}."""
    prefix = f"{VALUE_HEAD}."
    embedded = {k.removeprefix(prefix): state.pop(k) for k in list(state) if k.startswith(prefix)}
    return {VALUE_HEAD: embedded} if embedded else {}


def load_components(modules: dict[str, nn.Module | None], path: Path, embedded: dict[str, dict[str, torch.Tensor]],
                    warn_untrained_value_head: bool, init_seed: int) -> None:
    """Each component of `modules` (name -> module, None when the config has none): its own file,
    else weights embedded in the main state dict, else a fresh init.

    A fresh init draws from its own generator seeded by (init_seed, component), not from the
    process's RNG: every process that builds the same checkpoint with the same seed gets the
    same weights (e.g. several rollout workers of an eval-only run, which no sync aligns).
    warn_untrained_value_head=False: a fresh value head is only logged at info level (its
    user never reads these weights, e.g. a rollout worker: the actor sends its own)."""
    for name, module in modules.items():
        if module is None:
            if name in embedded:
                logger.info("%s: ignoring the %s weights in the checkpoint (add_value_head is false)", path, name)
            continue
        found = ckpt.read_component(path, name)
        if found is None and name in embedded:
            found = (embedded[name], f"{path} ({name}.* in the main weights)")
        if found is None:  # e.g. a new critic on an SFT checkpoint
            quiet = name == VALUE_HEAD and not warn_untrained_value_head
            logger.log(logging.INFO if quiet else logging.WARNING,
                       "%s: no %s weights in the checkpoint, starting from a random init", path, name)
            module.to_empty(device="cpu")
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(init_seed * 1000 + zlib.crc32(name.encode()) % 1000)
                module.reset_parameters()
            continue
        ckpt.load_exact(module, found[0], found[1], assign=True)
