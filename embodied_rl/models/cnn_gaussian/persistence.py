"""cnn_gaussian checkpoints: config.json (CNNGaussianArch), model.safetensors (encoders, action
head, log-std), value_head.safetensors (when the policy has a critic) and dataset_statistics.json;
built from a checkpoint, on the meta device (for sharded loading) or from a preset."""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from safetensors.torch import load_file, save_file

from embodied_rl.errors import CheckpointError
from embodied_rl.models.checkpoint_spec import STATS_FILE
from embodied_rl.models.cnn_gaussian.arch import CNNGaussianArch, preset_arch
from embodied_rl.models.cnn_gaussian.statistics import (
    identity_statistics,
    load_statistics,
)

if TYPE_CHECKING:
    from embodied_rl.models.cnn_gaussian.configuration import CNNGaussianConfig
    from embodied_rl.models.cnn_gaussian.policy import CNNGaussianPolicy

MODEL_FILE = "model.safetensors"
VALUE_FILE = "value_head.safetensors"
VALUE_PREFIX = "value_head."
logger = logging.getLogger(__name__)


def _load_exact(policy: torch.nn.Module, sd: dict[str, torch.Tensor], keys: set[str], source: Path) -> None:
    expected = {k: v for k, v in policy.state_dict().items() if k in keys}
    missing, unexpected = sorted(set(expected) - set(sd)), sorted(set(sd) - set(expected))
    shapes = sorted(k for k in set(sd) & set(expected) if sd[k].shape != expected[k].shape)
    if missing or unexpected or shapes:
        raise CheckpointError(f"{source} does not match the model its config.json describes: missing {missing[:4]}, "
                              f"unexpected {unexpected[:4]}, shape-mismatched {shapes[:4]}")
    policy.load_state_dict(sd, strict=False)


class CheckpointIO:
    """Mixed into CNNGaussianPolicy (whose modules, statistics and config it reads)."""

    def save_checkpoint(self: CNNGaussianPolicy, out_dir: str | Path) -> None:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        sd = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        self.arch.save(out, torch_dtype=str(self.log_std.dtype).removeprefix("torch."))
        save_file({k: v for k, v in sd.items() if not k.startswith(VALUE_PREFIX)}, str(out / MODEL_FILE), metadata={"format": "pt"})
        if self.value_head is not None:
            save_file({k.removeprefix(VALUE_PREFIX): v for k, v in sd.items() if k.startswith(VALUE_PREFIX)}, str(out / VALUE_FILE))
        (out / STATS_FILE).write_text(json.dumps(self.stats, indent=2))

    @classmethod
    def from_checkpoint(cls, path: str | Path, model_cfg: CNNGaussianConfig, *, device: torch.device | str = "cpu",
                        dtype: torch.dtype | None = None, warn_untrained_value_head: bool = True,
                        init_seed: int = 0) -> CNNGaussianPolicy:
        path = Path(path)
        arch, stats = CNNGaussianArch.load(path), load_statistics(path)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(init_seed)  # the critic a checkpoint lacks starts the same in every process
            policy = cls(model_cfg, arch, stats)
        if not (path / MODEL_FILE).is_file():
            raise CheckpointError(f"{path / MODEL_FILE} not found; the checkpoint is incomplete")
        own = {k for k in policy.state_dict() if not k.startswith(VALUE_PREFIX)}
        _load_exact(policy, load_file(str(path / MODEL_FILE)), own, path / MODEL_FILE)
        if policy.value_head is not None:
            if (path / VALUE_FILE).is_file():
                sd = {VALUE_PREFIX + k: v for k, v in load_file(str(path / VALUE_FILE)).items()}
                _load_exact(policy, sd, {k for k in policy.state_dict() if k.startswith(VALUE_PREFIX)}, path / VALUE_FILE)
            elif warn_untrained_value_head:
                logger.warning("%s has no %s: the value head starts untrained (seed %d)", path, VALUE_FILE, init_seed)
        return policy.to(device=torch.device(device), dtype=dtype or torch.float32)

    @classmethod
    def skeleton(cls, path: str | Path, model_cfg: CNNGaussianConfig, *, device: torch.device | str,
                 dtype: torch.dtype = torch.float32) -> CNNGaussianPolicy:
        """from_checkpoint's module tree, every parameter and buffer on the meta device in `dtype`."""
        path = Path(path)
        arch, stats = CNNGaussianArch.load(path), load_statistics(path)
        with torch.device("meta"):
            policy = cls(model_cfg, arch, stats)
        return policy.to(dtype=dtype)

    @classmethod
    def from_preset(cls, preset: str, model_cfg: CNNGaussianConfig, *, device: torch.device | str = "cpu",
                    dtype: torch.dtype | None = None, image_size: int = 64, action_dim: int = 7, proprio_dim: int = 9,
                    num_images_in_input: int = 1, unnorm_key: str = "identity", **_: Any) -> CNNGaussianPolicy:
        """Random-init policy of preset `preset` (tiny | nature_cnn) with identity statistics."""
        arch = preset_arch(preset, image_size=image_size, overrides=model_cfg.arch_overrides(), num_images_in_input=num_images_in_input,
                           state_dim=proprio_dim if model_cfg.use_proprio else 0, action_dim=action_dim,
                           num_action_chunks=model_cfg.num_action_chunks, squash=model_cfg.squash)
        policy = cls(model_cfg, arch, identity_statistics(action_dim, proprio_dim, unnorm_key))
        return policy.to(device=torch.device(device), dtype=dtype or torch.float32)
