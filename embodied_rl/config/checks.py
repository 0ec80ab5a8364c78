"""Rules of the config's own keys: sizes, the critic, the optimizer, precision, the accelerator."""
from __future__ import annotations

from typing import TYPE_CHECKING

from embodied_rl.config.plan import training_rl, used_modes
from embodied_rl.config.rules import RuleSet
from embodied_rl.errors import ConfigError

if TYPE_CHECKING:
    from embodied_rl.config.plan import RunPlan
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


@RULES.config_check
def _positive(cfg: RootConfig) -> None:
    for key, value in (
        ("cluster.num_nodes", cfg.cluster.num_nodes),
        ("rollout.pipeline_stage_num", cfg.rollout.pipeline_stage_num),
        ("actor.micro_batch_size", cfg.actor.micro_batch_size),
        ("actor.global_batch_size", cfg.actor.global_batch_size),
        ("cluster.num_cpu_slots", cfg.cluster.num_cpu_slots),
        ("algorithm.n_minibatches", cfg.algorithm.n_minibatches),
        *((f"env.{mode}.groups_per_stage", getattr(cfg.env, mode).groups_per_stage) for mode in used_modes(cfg)),
    ):
        if value is not None and value < 1:
            raise ConfigError(f"{key}: must be >= 1, got {value}")
    if not cfg.runner.only_eval and cfg.runner.max_steps < 1:
        raise ConfigError(f"runner.max_steps: must be >= 1 for training, got {cfg.runner.max_steps}")
    if cfg.runner.max_restarts < 0:
        raise ConfigError(f"runner.max_restarts: must be >= 0 (0 = a dead worker ends the run), got {cfg.runner.max_restarts}")
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

@RULES.config_check
def _seeds(cfg: RootConfig) -> None:
    """Seeds feed NumPy's and torch's generators, which take no negative seed: refused here
    rather than in every worker after Ray started."""
    for key, value in (("runner.seed", cfg.runner.seed), ("actor.seed", cfg.actor.seed),
                       *((f"env.{mode}.seed", getattr(cfg.env, mode).seed) for mode in ("train", "eval"))):
        if value < 0:
            raise ConfigError(f"{key}: must be >= 0, got {value}")
    alpha = cfg.actor.model.lora_alpha
    if alpha is not None and alpha < 1:
        raise ConfigError(f"actor.model.lora_alpha: must be >= 1 (the LoRA scale is alpha / rank), or null for lora_rank, got {alpha}")


@RULES.config_check
def _names_and_paths(cfg: RootConfig) -> None:
    """Names and paths are never empty (an empty model path reads the working directory, an
    empty channel name joins every run's channel), and the run directory stays inside
    runner.output_dir, where `runner.resume_dir=latest`, the review page and cleanup look."""
    r = cfg.runner
    for key, value in (("runner.experiment_name", r.experiment_name), ("runner.output_dir", r.output_dir),
                       ("runner.logger.log_path", r.logger.log_path), ("actor.model.model_path", cfg.actor.model.model_path),
                       ("rollout.model.model_path", cfg.rollout.model.model_path),
                       *((f"{s}.channel.{k}", getattr(getattr(cfg, s).channel, k)) for s in ("env", "rollout") for k in ("name", "queue_name"))):
        if not str(value).strip():
            raise ConfigError(f"{key} is empty; set it, or remove the override for the default (`embodied-rl print-config` shows it)")
    _run_name_stays_inside(r.experiment_name)


def _run_name_stays_inside(name: str) -> None:
    from pathlib import PurePosixPath, PureWindowsPath

    if PurePosixPath(name).is_absolute() or PureWindowsPath(name).is_absolute() or "/" in name or "\\" in name or name in (".", ".."):
        safe = "_".join(p for p in name.replace("\\", "/").split("/") if p not in ("", ".", "..")) or "default"
        raise ConfigError(f"runner.experiment_name={name!r} names a directory outside runner.output_dir (a path, not a name); "
                          f"use a plain name such as runner.experiment_name={safe}, and runner.output_dir for where runs go")


@RULES.plan_check
def _derived_sizes_agree(cfg: RootConfig, plan: RunPlan) -> None:
    """groups_per_stage and n_minibatches shape sizes that are derived; beside an explicit size
    (a resolved config.yaml holds both) they must agree with it, or they would be ignored."""
    from embodied_rl.config.plan import rollout_batch_size

    for mode in used_modes(cfg):
        env = getattr(cfg.env, mode)
        derived = plan.env_workers * cfg.rollout.pipeline_stage_num * env.groups_per_stage * env.group_size
        if env.groups_per_stage != 1 and env.total_num_envs != derived:
            raise ConfigError(f"env.{mode}.groups_per_stage={env.groups_per_stage} gives {derived} sub-envs on this machine, "
                              f"but env.{mode}.total_num_envs={env.total_num_envs}; set total_num_envs=null or groups_per_stage=1")
    n = cfg.algorithm.n_minibatches
    if n == 1 or not training_rl(cfg):
        return
    batch = rollout_batch_size(cfg)
    if batch % n:
        raise ConfigError(f"algorithm.n_minibatches={n} does not divide the rollout batch of {batch} chunks "
                          f"(env.train.total_num_envs x chunk steps x algorithm.rollout_epoch); pick a divisor")
    if cfg.actor.global_batch_size != batch // n:
        raise ConfigError(f"algorithm.n_minibatches={n} gives minibatches of {batch // n} chunks, but "
                          f"actor.global_batch_size={cfg.actor.global_batch_size}; set global_batch_size=null or n_minibatches=1")


@RULES.config_check
def _group_sizes(cfg: RootConfig) -> None:
    a, env = cfg.algorithm, cfg.env.train
    if training_rl(cfg) and a.group_size != env.group_size:
        raise ConfigError(
            f"algorithm.group_size={a.group_size} and env.train.group_size={env.group_size} must be equal "
            "(the estimator groups the envs that share a reset state); set env.train.group_size: ${algorithm.group_size}"
        )

@RULES.config_check
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

@RULES.config_check
def _critic_warmup(cfg: RootConfig) -> None:
    r = cfg.runner
    if r.critic_warmup < 0:
        raise ConfigError(f"runner.critic_warmup: must be >= 0, got {r.critic_warmup}")
    if r.critic_warmup == 0:
        return
    if not _trains_critic(cfg):
        raise ConfigError(f"runner.critic_warmup={r.critic_warmup} warms up a critic, which only RL with adv_type gae or bi_level_gae trains; set it to 0")
    if r.critic_warmup >= r.max_steps:
        raise ConfigError(f"runner.critic_warmup={r.critic_warmup} leaves no policy update in runner.max_steps={r.max_steps}; lower it or raise max_steps")

def _trains_critic(cfg: RootConfig) -> bool:
    """Whether the run's update trains the algorithm's critic (the RL update with a critic-based adv_type)."""
    from embodied_rl.config.paradigms import paradigm_of

    return paradigm_of(cfg).trains_critic and cfg.algorithm.uses_critic


@RULES.config_check
def _bootstrap_type(cfg: RootConfig) -> None:
    a = cfg.algorithm
    if a.bootstrap_type != "standard" and not _trains_critic(cfg):
        raise ConfigError(f"algorithm.bootstrap_type={a.bootstrap_type} changes how a critic's values continue a truncated episode; "
                          f"this run trains no critic (runner.paradigm={cfg.runner.paradigm}, adv_type {a.adv_type}): remove the key")

@RULES.config_check
def _kl_reference(cfg: RootConfig) -> None:
    a = cfg.algorithm
    if a.use_kl_loss and a.kl_loss_coef == 0:
        raise ConfigError("algorithm.use_kl_loss=true with kl_loss_coef=0 adds nothing; set kl_loss_coef > 0 or use_kl_loss=false")
    if a.kl_penalty != "kl" and not (a.kl_beta > 0 or a.use_kl_loss):
        raise ConfigError(f"algorithm.kl_penalty={a.kl_penalty} picks the estimator of a KL this run never computes "
                          "(kl_beta=0, use_kl_loss=false): remove the key, or set kl_beta > 0 or use_kl_loss=true")

@RULES.config_check
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

@RULES.config_check
def _precision(cfg: RootConfig) -> None:
    m, mp = cfg.actor.model, cfg.actor.fsdp_config.mixed_precision
    if (half_only := m.cuda_half_precision_only()) is not None:
        # The kernel runs in the compute dtype: the rollout's weights are actor.model.precision, the
        # actor keeps fp32 weights and computes in FSDP's param_dtype (its own key when set apart).
        setting, portable = half_only
        computes = [("actor.model.precision", m.precision)]
        if not cfg.runner.only_eval:
            computes.append(("actor.fsdp_config.mixed_precision.param_dtype", mp.param_dtype))
        for key, name in computes:
            if name == "fp32":
                raise ConfigError(f"actor.model.{setting} runs only in fp16/bf16, but {key}=fp32: "
                                  f"set {key}=bf16 or actor.model.{portable}")
    for key, name in (("param_dtype", mp.param_dtype), ("reduce_dtype", mp.reduce_dtype)):
        if name == "fp16":
            # fp16 gradients underflow without dynamic loss scaling, which the actor does not do.
            raise ConfigError(f"actor.fsdp_config.mixed_precision.{key}=fp16 needs loss scaling, which the actor does not implement; use bf16 or fp32")

@RULES.plan_check
def _accelerator(cfg: RootConfig, plan: RunPlan) -> None:
    if plan.resources.accelerator == "gpu":
        return
    where = plan.resources.describe()
    for key, on in (("actor.enable_offload", cfg.actor.enable_offload), ("rollout.enable_offload", cfg.rollout.enable_offload),
                    ("actor.fsdp_config.cpu_offload", cfg.actor.fsdp_config.cpu_offload)):
        if on:
            raise ConfigError(f"{key}=true needs GPUs (there are none: {where}; weights already live in host memory); set it false")
    if (half_only := cfg.actor.model.cuda_half_precision_only()) is not None:
        raise ConfigError(f"actor.model.{half_only[0]} needs CUDA GPUs ({where}); set actor.model.{half_only[1]}")
    for path, env in (task for mode in used_modes(cfg) for task in getattr(cfg.env, mode).task_configs(f"env.{mode}")):
        for key in ("sim_backend", "render_backend"):
            if env.init_params.get(key) == "gpu":
                raise ConfigError(f"{path}.init_params.{key}=gpu needs CUDA GPUs ({where}); use cpu")
