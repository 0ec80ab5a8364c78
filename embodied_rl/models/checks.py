"""Rules of the policy's files and engines: a registered model type, checkpoints at the model
paths, presets, the rollout backend's support for the model type and config."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from embodied_rl.config.rules import RuleSet
from embodied_rl.errors import ConfigError, UserError

if TYPE_CHECKING:
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


@RULES.config_check
def _model_files(cfg: RootConfig) -> None:
    from embodied_rl.models.registry import check_policy_type

    m = cfg.actor.model
    check_policy_type(m.model_type)
    for key, path in (("actor.model.model_path", m.model_path), ("rollout.model.model_path", cfg.rollout.model.model_path)):
        if not (Path(path) / "config.json").is_file() and m.create_preset is None:
            raise ConfigError(
                f"{key}={path}: no checkpoint there (no config.json); create one with "
                f"`embodied-rl make-model tiny {path}` or set actor.model.create_preset.name=tiny"
            )
    if m.lora_path is not None and not (Path(m.lora_path) / "adapter_config.json").is_file():
        raise ConfigError(f"actor.model.lora_path={m.lora_path}: no adapter_config.json there (expected a peft adapter directory)")

@RULES.config_check
def _create_preset(cfg: RootConfig) -> None:
    """A checkpoint already at a model path must be what create_preset would make there, or the
    run would silently train another architecture than the config describes."""
    from embodied_rl.models.openvla_oft.presets import PRESETS, preset_mismatch

    preset = cfg.actor.model.create_preset
    if preset is None:
        return
    if preset.name not in PRESETS:
        raise ConfigError(f"actor.model.create_preset.name={preset.name!r} is not a preset; available: {', '.join(PRESETS)}")
    if preset.image_size < 14:
        raise ConfigError(f"actor.model.create_preset.image_size: must be >= 14 (one ViT patch), got {preset.image_size}")
    for key, path in (("actor.model.model_path", cfg.actor.model.model_path), ("rollout.model.model_path", cfg.rollout.model.model_path)):
        if not (Path(path) / "config.json").is_file():
            continue
        try:
            diff = preset_mismatch(preset.name, preset.image_size, path)
        except UserError as err:
            raise ConfigError(f"{key}={path}: {err}") from None
        if diff:
            raise ConfigError(
                f"actor.model.create_preset: {key}={path} holds a checkpoint that is not the {preset.name} preset at "
                f"{preset.image_size} px ({diff}); remove actor.model.create_preset to use it, or delete {path} to create the preset there"
            )


@RULES.config_check
def _rollout_backend(cfg: RootConfig) -> None:
    """The rollout backend serves the model type and the features asked for, and is installed."""
    from embodied_rl.models.rollout_backends import rollout_backend

    rollout_backend(cfg.rollout.backend).check(cfg)
