"""Rules of env.train / env.eval: each simulator's init_params, episode keys, held-out reset ids,
and the split of sub-envs over env workers and pipeline stages."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from embodied_rl.config.plan import used_modes
from embodied_rl.config.rules import RuleSet
from embodied_rl.config.typecheck import build
from embodied_rl.envs.backend import get_simulator, spec_of
from embodied_rl.envs.mixture_checks import check_mixture, check_mixture_split
from embodied_rl.errors import ConfigError

if TYPE_CHECKING:
    from embodied_rl.config.plan import RunPlan
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


@RULES.config_check
def _init_params(cfg: RootConfig) -> None:
    """Each env section's init_params against its simulator's `params_cls`, normalised to a
    full dict of that dataclass (defaults filled in) for the rules and workers after this one."""
    for section in ("train", "eval"):
        for path, env_cfg in getattr(cfg.env, section).task_configs(f"env.{section}"):
            try:
                backend = get_simulator(env_cfg.env_type)
            except KeyError as err:
                if env_cfg.server is not None:
                    continue  # a simulator only the server's environment has: the server checks its init_params
                raise ConfigError(f"{path}.env_type: {err.args[0]} (is its simulator package installed?)") from err
            params_cls = getattr(backend, "params_cls", None)
            if params_cls is None or not dataclasses.is_dataclass(params_cls):
                raise TypeError(f"simulator backend {backend.__name__} must define params_cls as a dataclass")
            env_cfg.init_params = dataclasses.asdict(build(params_cls, env_cfg.init_params, f"{path}.init_params"))


@RULES.config_check
def _simulator_names(cfg: RootConfig) -> None:
    """Task ids, robots, controllers and cameras against the simulator's registries, so a typo
    fails here instead of in every env worker after Ray started; sections a run uses only. A
    served simulator's names are checked by its server, at start (the registries are the
    simulator's, which the trainer's environment need not have)."""
    for mode in used_modes(cfg):
        for path, env in getattr(cfg.env, mode).task_configs(f"env.{mode}"):
            if env.server is not None:
                continue
            key = f"{path}.init_params"
            backend = get_simulator(env.env_type)
            backend.check_names(build(backend.params_cls, dict(env.init_params), key), key)


@RULES.config_check
def _privileged_state(cfg: RootConfig) -> None:
    """The simulator's privileged state is read by an asymmetric critic only, from env.train."""
    from embodied_rl.config.plan import training_rl

    m = cfg.actor.model
    if training_rl(cfg) and cfg.algorithm.uses_critic and not m.add_value_head:
        return  # a GAE run without a value head: the critic rule names that (config/checks.py)
    wants = m.value_input == "privileged_state" and m.add_value_head and training_rl(cfg) and cfg.algorithm.uses_critic
    # Evaluation builds no actor: a training recipe's critic settings are not in its way.
    if m.value_input == "privileged_state" and not wants and training_rl(cfg):
        raise ConfigError("actor.model.value_input=privileged_state configures a critic this run does not train "
                          "(it needs add_value_head, RL training and adv_type gae or bi_level_gae); set value_input=hidden")
    if cfg.algorithm.critic_replay_steps and not wants:
        raise ConfigError(f"algorithm.critic_replay_steps={cfg.algorithm.critic_replay_steps} replays the privileged critic's inputs; "
                          "set actor.model.value_input=privileged_state or critic_replay_steps=0")
    for mode in used_modes(cfg):
        for key, env in getattr(cfg.env, mode).task_configs(f"env.{mode}"):
            has = bool(env.init_params.get("privileged_state", False))
            if mode == "train" and wants and not has:
                if "privileged_state" not in env.init_params:
                    raise ConfigError(f"actor.model.value_input=privileged_state: {key} (env_type {env.env_type}) has no privileged state; "
                                      "use actor.model.value_input=hidden")
                raise ConfigError("actor.model.value_input=privileged_state reads the simulator's privileged state: "
                                  f"set {key}.init_params.privileged_state=true")
            if mode == "train" and wants:
                given = spec_of(env, key).privileged_state_dim
                if given is not None and given != m.privileged_state_dim:
                    raise ConfigError(f"actor.model.privileged_state_dim={m.privileged_state_dim} but {key} ({env.env_type} "
                                      f"{env.init_params.get('id', '')}) gives a {given}-d privileged state (the clock included); "
                                      f"set actor.model.privileged_state_dim={given}")
            if has and (mode == "eval" or not wants):
                raise ConfigError(f"{key}.init_params.privileged_state=true but nothing reads it (only a training critic with "
                                  "actor.model.value_input=privileged_state does); remove it")


@RULES.config_check
def _env_episodes(cfg: RootConfig) -> None:
    """Episode keys of each env config; the per-worker split is checked with the plan."""
    from embodied_rl.envs.action_adapter import ActionAdapter
    from embodied_rl.envs.vector_env import ChunkedVectorEnv

    for mode in used_modes(cfg):
        env, key = getattr(cfg.env, mode), f"env.{mode}"
        if env.total_num_envs is not None and env.total_num_envs < 1:
            raise ConfigError(f"{key}.total_num_envs: must be >= 1, or null to derive it from the machine, got {env.total_num_envs}")
        for task_key, task in env.task_configs(key):
            ChunkedVectorEnv.validate(task, None, task_key)
            try:
                ActionAdapter(task.action_adapter, cfg.actor.model.action_dim)
            except ConfigError as err:
                raise ConfigError(str(err).replace("env.action_adapter", f"{task_key}.action_adapter", 1)) from None
        check_mixture(env, key)
        if env.video_cfg.fps < 1:
            raise ConfigError(f"{key}.video_cfg.fps: must be >= 1, got {env.video_cfg.fps}")
        sub = env.subproc
        for name in ("start_timeout_s", "reset_timeout_s", "step_timeout_s"):
            if getattr(sub, name) <= 0:
                raise ConfigError(f"{key}.subproc.{name}: must be > 0 seconds, got {getattr(sub, name)}")
        if sub.max_restarts < 0:
            raise ConfigError(f"{key}.subproc.max_restarts: must be >= 0, got {sub.max_restarts}")

@RULES.config_check
def _env_servers(cfg: RootConfig) -> None:
    """An env server is either spawned with an interpreter that exists here or reached at an address,
    with the key a server started by hand reads."""
    import os

    from embodied_rl.envs.service.protocol import KEY_ENV, parse_address

    for mode in used_modes(cfg):
        for key, env in getattr(cfg.env, mode).task_configs(f"env.{mode}"):
            server = env.server
            if server is None:
                continue
            if (server.python is None) == (server.address is None):
                raise ConfigError(f"{key}.server: set one of server.python (an interpreter to spawn the server with) or "
                                  f"server.address (HOST:PORT of a server started by hand), or {key}.server=null to run in-process")
            if server.python is not None:
                if not os.path.isfile(server.python) or not os.access(server.python, os.X_OK):
                    what = "is not executable" if os.path.isfile(server.python) else "does not exist"
                    raise ConfigError(f"{key}.server.python={server.python} {what}; give the path of the Python interpreter of the "
                                      "simulator's virtual environment, e.g. /path/to/venv/bin/python")
                continue
            try:
                parse_address(server.address)
            except ValueError as err:
                raise ConfigError(f"{key}.server.address: {err}") from None
            if not os.environ.get(KEY_ENV):
                raise ConfigError(f"{key}.server.address={server.address} needs the server's connection key: set {KEY_ENV} "
                                  "here to the value the server was started with")


@RULES.config_check
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

@RULES.plan_check
def _env_split(cfg: RootConfig, plan: RunPlan) -> None:
    from embodied_rl.distributed.placement import envs_per_worker, rollout_rank_of
    from embodied_rl.envs.vector_env import ChunkedVectorEnv

    rollout_rank_of(0, plan.env_workers, plan.rollout_workers)
    for mode in used_modes(cfg):
        env = getattr(cfg.env, mode)
        per_stage = envs_per_worker(env.total_num_envs, plan.env_workers, cfg.rollout.pipeline_stage_num, mode)
        ChunkedVectorEnv.validate(env, per_stage, f"env.{mode}")
        check_mixture_split(env, f"env.{mode}")
