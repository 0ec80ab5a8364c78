"""Every rule that spans keys, in one place, run by `load_config` before anything starts.

Two kinds, in registration order:
- `@config_check(cfg)`: rules of the config alone (and of files it names);
- `@plan_check(cfg, plan)`: rules that need the machine: process counts from the placement,
  the accelerator, and the sizes `config/plan.py` derived from them.
A check raises ConfigError: one line naming the keys and the fix. Workers do not re-check;
where a worker needs the same arithmetic it calls the function a check calls.
"""
from __future__ import annotations

from collections.abc import Callable, Collection
from pathlib import Path
from typing import TYPE_CHECKING

from embodied_rl.config.plan import training_rl, used_modes
from embodied_rl.errors import ConfigError, UserError

if TYPE_CHECKING:
    from embodied_rl.config.plan import RunPlan
    from embodied_rl.config.schema import RootConfig

Check = Callable[["RootConfig"], None]
PlanCheck = Callable[["RootConfig", "RunPlan"], None]
_CHECKS: list[Check] = []
_PLAN_CHECKS: list[PlanCheck] = []


def config_check(fn: Check) -> Check:
    """Register a rule of the config alone."""
    _CHECKS.append(fn)
    return fn


def plan_check(fn: PlanCheck) -> PlanCheck:
    """Register a rule that needs the run plan (process counts, accelerator, derived sizes)."""
    _PLAN_CHECKS.append(fn)
    return fn


def run_checks(cfg: RootConfig, skip: Collection[str] = ()) -> None:
    """Run every rule of the config alone but those named in `skip` (names without the '_')."""
    unknown = set(skip) - {c.__name__.lstrip("_") for c in _CHECKS}
    if unknown:
        raise ValueError(f"run_checks: no rules named {sorted(unknown)}")
    for check in _CHECKS:
        if check.__name__.lstrip("_") not in skip:
            check(cfg)


def run_plan_checks(cfg: RootConfig, plan: RunPlan) -> None:
    for check in _PLAN_CHECKS:
        check(cfg, plan)


# ---- rules of the config alone --------------------------------------------------------

@config_check
def _positive(cfg: RootConfig) -> None:
    for key, value in (
        ("cluster.num_nodes", cfg.cluster.num_nodes),
        ("rollout.pipeline_stage_num", cfg.rollout.pipeline_stage_num),
        ("actor.micro_batch_size", cfg.actor.micro_batch_size),
        ("actor.global_batch_size", cfg.actor.global_batch_size),
        ("cluster.num_cpu_slots", cfg.cluster.num_cpu_slots),
    ):
        if value is not None and value < 1:
            raise ConfigError(f"{key}: must be >= 1, got {value}")
    if not cfg.runner.only_eval and cfg.runner.max_steps < 1:
        raise ConfigError(f"runner.max_steps: must be >= 1 for training, got {cfg.runner.max_steps}")
    for key in ("val_check_interval", "save_interval"):
        value = getattr(cfg.runner, key)
        if value == 0 or value < -1:
            raise ConfigError(f"runner.{key}: must be >= 1, or -1 to disable, got {value}")
    for section in ("env", "rollout"):
        size = getattr(cfg, section).channel.queue_size
        if size < 0:
            raise ConfigError(f"{section}.channel.queue_size: must be >= 0 (0 = unbounded), got {size}")
    if len(set(cfg.runner.logger.logger_backends)) != len(cfg.runner.logger.logger_backends):
        raise ConfigError(f"runner.logger.logger_backends: duplicate entries in {cfg.runner.logger.logger_backends}")
    for section in ("env", "rollout", "actor"):
        name = getattr(cfg, section).group_name
        if not name or not name.replace("_", "").replace("-", "").isalnum():
            raise ConfigError(f"{section}.group_name={name!r}: use letters, digits, '_' and '-' (it names the Ray actors)")


@config_check
def _env_episodes(cfg: RootConfig) -> None:
    """Episode keys of each env config; the per-worker split is checked with the plan."""
    from embodied_rl.envs.action_adapter import ActionAdapter
    from embodied_rl.envs.vector_env import ChunkedVectorEnv

    for mode in used_modes(cfg):
        env, key = getattr(cfg.env, mode), f"env.{mode}"
        if env.total_num_envs is not None and env.total_num_envs < 1:
            raise ConfigError(f"{key}.total_num_envs: must be >= 1, or null to derive it from the machine, got {env.total_num_envs}")
        ChunkedVectorEnv.validate(env, None, key)
        if env.video_cfg.fps < 1:
            raise ConfigError(f"{key}.video_cfg.fps: must be >= 1, got {env.video_cfg.fps}")
        sub = env.subproc
        for name in ("start_timeout_s", "reset_timeout_s", "step_timeout_s"):
            if getattr(sub, name) <= 0:
                raise ConfigError(f"{key}.subproc.{name}: must be > 0 seconds, got {getattr(sub, name)}")
        if sub.max_restarts < 0:
            raise ConfigError(f"{key}.subproc.max_restarts: must be >= 0, got {sub.max_restarts}")
        try:
            ActionAdapter(env.action_adapter, cfg.actor.model.action_dim)
        except ConfigError as err:
            raise ConfigError(str(err).replace("env.action_adapter", f"{key}.action_adapter", 1)) from None


@config_check
def _held_out_eval(cfg: RootConfig) -> None:
    """Evaluation starts from states training never draws, unless env.eval says `all`."""
    from embodied_rl.envs.reset_split import overlaps

    train, ev = cfg.env.train.reset_id_split, cfg.env.eval.reset_id_split
    if overlaps(train, ev) and ev != "all":
        raise ConfigError(
            f"env.eval.reset_id_split={ev} shares initial states with env.train.reset_id_split={train}: evaluation "
            f"would not be held out; use env.train.reset_id_split=train and env.eval.reset_id_split=eval, or "
            f"env.eval.reset_id_split=all to evaluate on every state, training states included (LIBERO's official protocol)"
        )


@config_check
def _group_sizes(cfg: RootConfig) -> None:
    a, env = cfg.algorithm, cfg.env.train
    if training_rl(cfg) and a.group_size != env.group_size:
        raise ConfigError(
            f"algorithm.group_size={a.group_size} and env.train.group_size={env.group_size} must be equal "
            "(the estimator groups the envs that share a reset state); set env.train.group_size: ${algorithm.group_size}"
        )


@config_check
def _critic(cfg: RootConfig) -> None:
    a, m = cfg.algorithm, cfg.actor.model
    if not training_rl(cfg) or not a.uses_critic:
        return
    if not m.add_value_head:
        raise ConfigError(f"algorithm.adv_type={a.adv_type} trains a critic: set actor.model.add_value_head=true, or use adv_type grpo or reinforce_pp")
    if a.adv_type == "gae" and m.value_type != a.reward_type:
        raise ConfigError(
            f"algorithm.reward_type={a.reward_type} needs one value per reward: set actor.model.value_type={a.reward_type} "
            f"(now {m.value_type})"
        )


@config_check
def _critic_warmup(cfg: RootConfig) -> None:
    r = cfg.runner
    if r.critic_warmup < 0:
        raise ConfigError(f"runner.critic_warmup: must be >= 0, got {r.critic_warmup}")
    if r.critic_warmup == 0:
        return
    if r.paradigm != "rl" or not cfg.algorithm.uses_critic:
        raise ConfigError(f"runner.critic_warmup={r.critic_warmup} warms up a critic, which only RL with adv_type gae or bi_level_gae trains; set it to 0")
    if r.critic_warmup >= r.max_steps:
        raise ConfigError(f"runner.critic_warmup={r.critic_warmup} leaves no policy update in runner.max_steps={r.max_steps}; lower it or raise max_steps")


@config_check
def _kl_reference(cfg: RootConfig) -> None:
    a = cfg.algorithm
    if a.use_kl_loss and a.kl_loss_coef == 0:
        raise ConfigError("algorithm.use_kl_loss=true with kl_loss_coef=0 adds nothing; set kl_loss_coef > 0 or use_kl_loss=false")


@config_check
def _optimizer(cfg: RootConfig) -> None:
    o = cfg.actor.optim
    # lr 0 freezes the policy while the critic warms up (value_lr); both 0 would train nothing.
    for key, value in (("lr", o.lr), ("value_lr", o.value_lr)):
        if not value >= 0:
            raise ConfigError(f"actor.optim.{key}: must be >= 0, got {value}")
    if o.lr == 0 and (o.value_lr == 0 or not cfg.actor.model.add_value_head):
        raise ConfigError("actor.optim.lr=0 freezes the policy and nothing else would train; set lr > 0 (or value_lr > 0 with a value head)")
    if not 0 <= o.min_lr <= o.lr:
        raise ConfigError(f"actor.optim.min_lr={o.min_lr} must be in [0, actor.optim.lr={o.lr}]")
    if o.lr_warmup_steps < 0:
        raise ConfigError(f"actor.optim.lr_warmup_steps: must be >= 0, got {o.lr_warmup_steps}")
    if not (0 <= o.adam_beta1 < 1 and 0 <= o.adam_beta2 < 1):
        raise ConfigError(f"actor.optim.adam_beta1/adam_beta2 must be in [0, 1), got {o.adam_beta1}, {o.adam_beta2}")
    if not o.adam_eps > 0:
        raise ConfigError(f"actor.optim.adam_eps: must be > 0, got {o.adam_eps}")
    if o.weight_decay < 0:
        raise ConfigError(f"actor.optim.weight_decay: must be >= 0, got {o.weight_decay}")


@config_check
def _precision(cfg: RootConfig) -> None:
    m, mp = cfg.actor.model, cfg.actor.fsdp_config.mixed_precision
    if m.attn_implementation == "flash_attention_2" and m.precision == "fp32":
        raise ConfigError("actor.model.attn_implementation=flash_attention_2 runs only in fp16/bf16: set actor.model.precision=bf16 or use sdpa")
    for key, name in (("param_dtype", mp.param_dtype), ("reduce_dtype", mp.reduce_dtype)):
        if name == "fp16":
            # fp16 gradients underflow without dynamic loss scaling, which the actor does not do.
            raise ConfigError(f"actor.fsdp_config.mixed_precision.{key}=fp16 needs loss scaling, which the actor does not implement; use bf16 or fp32")


@config_check
def _checkpoints(cfg: RootConfig) -> None:
    r = cfg.runner
    if r.ckpt_path and not r.only_eval:
        raise ConfigError("runner.ckpt_path loads weights for evaluation only; to continue training use runner.resume_dir")
    if r.resume_dir and r.only_eval:
        raise ConfigError("runner.resume_dir continues training; to evaluate a checkpoint use runner.ckpt_path")
    for key, value in (("runner.resume_dir", r.resume_dir), ("runner.ckpt_path", r.ckpt_path)):
        if value:
            from embodied_rl.runtime.checkpoint import resolve_resume_dir

            try:
                ckpt = resolve_resume_dir(value, r.logger.log_path, key=key)
            except UserError as err:
                raise ConfigError(str(err)) from None
            check_checkpoint_layout(cfg, ckpt, f"{key}={value}")


#: actor.model keys that decide which trainable tensors a checkpoint holds.
_LAYOUT_KEYS = ("add_value_head", "value_type", "is_lora", "lora_rank")


def check_checkpoint_layout(cfg: RootConfig, ckpt: Path, what: str) -> None:
    """A training checkpoint holds the trainable tensors of the config it was trained with; the
    config that loads it must build the same ones (a GRPO checkpoint has no value head)."""
    import yaml

    from embodied_rl.runtime.checkpoint import CONFIG

    path = Path(ckpt) / CONFIG
    saved = ((yaml.safe_load(path.read_text()) or {}).get("actor", {}).get("model", {})) if path.is_file() else {}
    m = cfg.actor.model
    # value_type and lora_rank shape tensors only where both sides have a value head / LoRA.
    ignored = {"value_type": not (m.add_value_head and saved.get("add_value_head")),
               "lora_rank": not (m.is_lora and saved.get("is_lora"))}
    for key in _LAYOUT_KEYS:
        ours = getattr(m, key)
        if key in saved and saved[key] != ours and not ignored.get(key, False):
            theirs = _yaml_value(saved[key])
            raise ConfigError(f"{what}: the checkpoint was trained with actor.model.{key}={theirs}, this config has "
                              f"{_yaml_value(ours)}; set actor.model.{key}={theirs} (or evaluate with the config it was trained with)")


def _yaml_value(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


@config_check
def _model_files(cfg: RootConfig) -> None:
    from embodied_rl.models.registry import policy_class

    m = cfg.actor.model
    policy_class(m.model_type)
    for key, path in (("actor.model.model_path", m.model_path), ("rollout.model.model_path", cfg.rollout.model.model_path)):
        if not (Path(path) / "config.json").is_file() and m.create_preset is None:
            raise ConfigError(
                f"{key}={path}: no checkpoint there (no config.json); create one with "
                f"`embodied-rl make-model tiny {path}` or set actor.model.create_preset.name=tiny"
            )
    if m.lora_path is not None and not (Path(m.lora_path) / "adapter_config.json").is_file():
        raise ConfigError(f"actor.model.lora_path={m.lora_path}: no adapter_config.json there (expected a peft adapter directory)")



@config_check
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

@config_check
def _sft_data(cfg: RootConfig) -> None:
    """Demonstrations: read by SFT only, each directory checked against the policy and env.train."""
    paths, r = cfg.data.train_data_paths, cfg.runner
    if r.paradigm == "rl" and paths:
        raise ConfigError("data.train_data_paths is read by SFT only; set runner.paradigm=sft (or `embodied-rl sft`), or remove it")
    if r.paradigm != "sft" or r.only_eval:
        return
    if not paths:
        raise ConfigError("runner.paradigm=sft needs data.train_data_paths: demo directories recorded by `embodied-rl demos`")
    if cfg.actor.global_batch_size is None:
        raise ConfigError("actor.global_batch_size: SFT needs a number of demo samples per optimizer step (e.g. 64); null derives it from RL rollouts only")
    from embodied_rl.demos import DemoError
    from embodied_rl.demos.reader import check_demos_for

    for i, path in enumerate(paths):
        try:
            check_demos_for(cfg, path)
        except DemoError as err:
            hint = f"; record them with `embodied-rl demos CONFIG --num-demos N --out {path}`" if not Path(path).exists() else ""
            raise ConfigError(f"data.train_data_paths[{i}]: {err}{hint}") from None


# ---- `embodied-rl eval --compare A B` ----------------------------------------------------

COMPARE_PATHS = ("pass a model directory (config.json and weights, as `embodied-rl export` or `make-model` write it) "
                 "or a training checkpoint (checkpoints/global_step_N, or a run directory for its newest)")


def check_compare(cfg: RootConfig, paths: Collection[str]) -> list:
    """Validate `--compare A B` against the loaded config, before anything starts; returns the
    two `PolicySource`s (evaluation/compare.py). Episodes pair by initial state, so the eval
    envs must start every evaluation from the same reset ids, one episode per sub-env."""
    from embodied_rl.evaluation.compare import PolicySource
    from embodied_rl.runtime.checkpoint import (
        ACTOR_WEIGHTS,
        actor_dir,
        resolve_resume_dir,
    )

    paths = list(paths)
    if len(paths) != 2:
        raise ConfigError(f"--compare takes two policies, A and B; got {len(paths)}")
    ev = cfg.env.eval
    if not ev.use_fixed_reset_state_ids:
        raise ConfigError("--compare pairs episodes by initial state: set env.eval.use_fixed_reset_state_ids=true "
                          "(then both policies start from the same reset ids)")
    if ev.auto_reset:
        raise ConfigError("--compare pairs one episode per sub-env and eval epoch: set env.eval.auto_reset=false "
                          "(with auto_reset, later episodes start whenever each policy's previous one ended)")
    if cfg.runner.ckpt_path:
        raise ConfigError(f"--compare evaluates A and B: remove runner.ckpt_path={cfg.runner.ckpt_path} (pass that checkpoint as A or B)")
    sources = []
    for label, path in zip("AB", paths):
        where = Path(path)
        if not where.is_dir():
            raise ConfigError(f"--compare {label}={path}: no such directory; {COMPARE_PATHS}")
        if (where / "config.json").is_file():
            if not any(where.glob("*.safetensors")):
                raise ConfigError(f"--compare {label}={path}: config.json but no *.safetensors weights; {COMPARE_PATHS}")
            sources.append(PolicySource(label, path, "model", str(where.resolve())))
            continue
        try:
            ckpt = resolve_resume_dir(path, path, key=f"--compare {label}")
        except UserError:
            raise ConfigError(f"--compare {label}={path}: neither a model directory (no config.json) nor a training "
                              f"checkpoint (no meta.json, no checkpoints/); {COMPARE_PATHS}") from None
        if not (actor_dir(ckpt) / ACTOR_WEIGHTS).is_file():
            raise ConfigError(f"--compare {label}={path}: checkpoint {ckpt} has no {ACTOR_WEIGHTS} under actor/; {COMPARE_PATHS}")
        check_checkpoint_layout(cfg, ckpt, f"--compare {label}={path}")
        sources.append(PolicySource(label, path, "checkpoint", str(ckpt.resolve())))
    return sources


# ---- rules that need the machine --------------------------------------------------------

@plan_check
def _env_split(cfg: RootConfig, plan: RunPlan) -> None:
    from embodied_rl.envs.vector_env import ChunkedVectorEnv
    from embodied_rl.runtime.placement import envs_per_worker, rollout_rank_of

    rollout_rank_of(0, plan.env_workers, plan.rollout_workers)
    for mode in used_modes(cfg):
        env = getattr(cfg.env, mode)
        per_stage = envs_per_worker(env.total_num_envs, plan.env_workers, cfg.rollout.pipeline_stage_num, mode)
        ChunkedVectorEnv.validate(env, per_stage, f"env.{mode}")


@plan_check
def _batch(cfg: RootConfig, plan: RunPlan) -> None:
    from embodied_rl.config.plan import rollout_batch_size
    from embodied_rl.workers.actor_batch import check_batch_sizes

    if cfg.runner.only_eval:
        return
    a = cfg.actor
    # SFT draws global batches from the demos epoch after epoch: any global size divides its stream.
    total = rollout_batch_size(cfg) if cfg.runner.paradigm == "rl" else a.global_batch_size
    check_batch_sizes(total, a.global_batch_size, a.micro_batch_size, plan.actor_world_size)


@plan_check
def _accelerator(cfg: RootConfig, plan: RunPlan) -> None:
    if plan.resources.accelerator == "gpu":
        return
    where = plan.resources.describe()
    for key, on in (("actor.enable_offload", cfg.actor.enable_offload), ("rollout.enable_offload", cfg.rollout.enable_offload),
                    ("actor.fsdp_config.cpu_offload", cfg.actor.fsdp_config.cpu_offload)):
        if on:
            raise ConfigError(f"{key}=true needs GPUs (there are none: {where}; weights already live in host memory); set it false")
    if cfg.actor.model.attn_implementation == "flash_attention_2":
        raise ConfigError(f"actor.model.attn_implementation=flash_attention_2 needs CUDA GPUs ({where}); use sdpa")
    for mode in used_modes(cfg):
        for key in ("sim_backend", "render_backend"):
            if getattr(cfg.env, mode).init_params.get(key) == "gpu":
                raise ConfigError(f"env.{mode}.init_params.{key}=gpu needs CUDA GPUs ({where}); use cpu")
