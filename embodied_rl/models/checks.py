"""Rules of the policy's files and engines: a registered model type, checkpoints at the model
paths, presets, the rollout backend's support for the model type and config, the engine's GPU share."""
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
    m = cfg.actor.model
    preset = m.create_preset
    if preset is None:
        return
    presets = m.preset_names()
    if preset.name not in presets:
        raise ConfigError(f"actor.model.create_preset.name={preset.name!r} is not a preset of model_type {m.model_type}; "
                          f"available: {', '.join(presets) or 'none'}")
    if preset.image_size < 14:
        raise ConfigError(f"actor.model.create_preset.image_size: must be >= 14 (one ViT patch), got {preset.image_size}")
    for key, path in (("actor.model.model_path", cfg.actor.model.model_path), ("rollout.model.model_path", cfg.rollout.model.model_path)):
        if not (Path(path) / "config.json").is_file():
            continue
        try:
            diff = m.preset_mismatch(preset.name, preset.image_size, path)
        except UserError as err:
            raise ConfigError(f"{key}={path}: {err}") from None
        if diff:
            raise ConfigError(
                f"actor.model.create_preset: {key}={path} holds a checkpoint that is not the {preset.name} preset at "
                f"{preset.image_size} px ({diff}); remove actor.model.create_preset to use it, or delete {path} to create the preset there"
            )


@RULES.config_check
def _policy_settings(cfg: RootConfig) -> None:
    """Settings outside actor.model that the policy type cannot honour (its config class says)."""
    cfg.actor.model.check_with(cfg)


@RULES.config_check
def _gpu_memory_utilization(cfg: RootConfig) -> None:
    """A fraction vLLM accepts, and only where an engine reads it (null: config/plan.py derives it)."""
    r = cfg.rollout
    share = r.gpu_memory_utilization
    if share is None:
        return
    if isinstance(share, bool) or not 0 < share <= 1:
        raise ConfigError(f"rollout.gpu_memory_utilization={share}: must be in (0, 1] (the fraction of its GPU a vLLM engine "
                          "reserves), or null to derive an even share from cluster.component_placement")
    if r.backend != "vllm":
        raise ConfigError(f"rollout.gpu_memory_utilization={share} sizes a vLLM engine, but rollout.backend={r.backend}; "
                          "remove it (set null) or set rollout.backend=vllm")


@RULES.config_check
def _rollout_backend(cfg: RootConfig) -> None:
    """The rollout backend serves the model type and the features asked for, and is installed."""
    from embodied_rl.models.rollout_backends import rollout_backend

    rollout_backend(cfg.rollout.backend).check(cfg)


@RULES.config_check
def _model_input(cfg: RootConfig) -> None:
    """actor.model's image keys against the model they describe: the checkpoint at model_path,
    or the preset that creates it there at start; else the policy refuses them when it loads,
    in every worker, after Ray started."""
    m = cfg.actor.model
    if m.num_images_in_input > 2:
        raise ConfigError(f"actor.model.num_images_in_input={m.num_images_in_input}: environments give at most 2 camera images "
                          "(main + wrist); set it to 1 or 2")
    if m.image_size is None:
        return
    if m.create_preset is not None:
        side, source = m.create_preset.image_size, f"actor.model.create_preset.image_size={m.create_preset.image_size}"
    else:
        ckpt = _starting_checkpoint(cfg)
        if ckpt is None:
            return
        side, source = ckpt.image_size, f"actor.model.model_path={m.model_path} (config.json image_sizes)"
    if m.image_size != side:
        raise ConfigError(f"actor.model.image_size={m.image_size} but {source} makes the model take {side} px images; "
                          f"set actor.model.image_size={side} or null")


@RULES.config_check
def _policy_fits_env(cfg: RootConfig) -> None:
    """The policy takes what each env it steps gives (cameras, state) and gives what its controller
    takes (actions): actor.model's keys against the env configs, and a checkpoint the run starts
    from (model_path without create_preset) against both, from its JSON files. Else a mismatch
    shows only once the workers run (a shape error), or never (a resized picture)."""
    from embodied_rl.config.plan import used_modes
    from embodied_rl.envs.backend import spec_of

    m = cfg.actor.model
    ckpt = _starting_checkpoint(cfg)
    where = f"actor.model.model_path={m.model_path}"
    if ckpt is not None:
        stats = f"{ckpt.stats_key} in dataset_statistics.json"
        for name, want, have, what in (
            ("num_images_in_input", m.num_images_in_input, ckpt.cameras, "camera image(s) per sample (config.json)"),
            ("action_dim", m.action_dim, ckpt.action_dim, f"action dims ({stats})"),
            ("proprio_dim", m.proprio_dim if m.use_proprio else None, ckpt.proprio_dim, f"proprio dims ({stats})"),
        ):
            if want is not None and have is not None and want != have:
                raise ConfigError(f"actor.model.{name}={want} but {where} takes {have} {what}; set actor.model.{name}={have}")
    for key, env in (task for mode in used_modes(cfg) for task in getattr(cfg.env, mode).task_configs(f"env.{mode}")):
        spec = spec_of(env, key)
        if spec.cameras is not None and m.num_images_in_input > spec.cameras:
            raise ConfigError(f"actor.model.num_images_in_input={m.num_images_in_input} but {key} ({env.env_type}) gives {spec.cameras} "
                              f"camera image(s) per observation; set actor.model.num_images_in_input={spec.cameras} or add a wrist camera "
                              f"to {key}.init_params")
        if spec.action_dim is not None and m.action_dim != spec.action_dim:
            raise ConfigError(f"actor.model.action_dim={m.action_dim} but the controller of {key} ({_controller(env)}) takes "
                              f"{spec.action_dim}-d actions; use a policy with {spec.action_dim}-d actions or another controller")
        if m.use_proprio and spec.state_dim is not None and m.proprio_dim != spec.state_dim:
            raise ConfigError(f"actor.model.proprio_dim={m.proprio_dim} (use_proprio) but {key} gives a {spec.state_dim}-d state; "
                              f"set actor.model.proprio_dim={spec.state_dim} with a checkpoint of that proprio size")
        if ckpt is not None:
            _checkpoint_fits(ckpt, spec, where, key, env)
        elif m.create_preset is not None and spec.image_size is not None and min(spec.image_size) < m.create_preset.image_size:
            h, w = spec.image_size
            side = m.create_preset.image_size
            raise ConfigError(f"actor.model.create_preset.image_size={side} makes a model that takes {side} px images, but "
                              f"{key}.init_params.camera_heights x camera_widths = {h}x{w} is smaller; set both to at least {side} "
                              f"or set actor.model.create_preset.image_size={min(h, w)}")


def _starting_checkpoint(cfg: RootConfig):
    """The CheckpointSpec of the checkpoint at actor.model.model_path the run starts from, or None
    (create_preset makes it from actor.model's keys; _model_files reports a missing one)."""
    m = cfg.actor.model
    if m.create_preset is not None or not (Path(m.model_path) / "config.json").is_file():
        return None
    try:
        return m.checkpoint_spec()
    except (UserError, OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(f"actor.model.model_path={m.model_path}: unreadable checkpoint files ({err})") from None


def _controller(env) -> str:
    mode = env.init_params.get("control_mode")
    return f"init_params.control_mode={mode}" if mode else f"env_type {env.env_type}"


def _checkpoint_fits(ckpt, spec, where: str, key: str, env) -> None:
    """Cameras and controller of one env against the checkpoint. The policy resizes camera images
    to its input side: down is the OFT protocol (LIBERO's 256 px to 224 px), up would show it
    blurrier pictures than any it learned from. A checkpoint trained on demonstrations learned
    from the demos' pictures and controller: those are the ones it fits."""
    demos, mode = ckpt.demos, env.init_params.get("control_mode")
    if spec.image_size is not None:
        h, w = spec.image_size
        size = f"{key}.init_params.camera_heights x camera_widths = {h}x{w}"
        if demos is not None and demos.image_size != spec.image_size:
            dh, dw = demos.image_size
            raise ConfigError(f"{where} learned from {dh}x{dw} px camera images (demos_manifest.json), but {size}; "
                              f"set {key}.init_params.camera_heights={dh} and camera_widths={dw}")
        if min(h, w) < ckpt.image_size:
            raise ConfigError(f"{where} takes {ckpt.image_size} px images (config.json image_sizes), but {size} is smaller; "
                              f"set both to at least {ckpt.image_size}")
    if demos is not None and demos.control_mode and mode and mode != demos.control_mode:
        raise ConfigError(f"{where} learned {demos.control_mode} actions (demos_manifest.json), but "
                          f"{key}.init_params.control_mode={mode}; set it to {demos.control_mode}")
