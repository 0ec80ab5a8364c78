"""What a demo dataset is recorded for, taken from an experiment config (`env.train` + `actor.model`)."""
from __future__ import annotations

from dataclasses import dataclass

from embodied_rl.config.schema import RootConfig
from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs.maniskill.params import ManiSkillParams
from embodied_rl.errors import ConfigError


@dataclass(frozen=True)
class DemoSpec:
    """Picklable recipe shared by the generating processes.

    env_cfg: the env config the policy trains in (cameras, image size, control mode, state,
        action adapter, max_episode_steps) - demos are recorded through exactly that env.
    action_dim / num_action_chunks: the policy's, written to the manifest and checked on load.
    """

    env_cfg: EnvConfig
    params: ManiSkillParams
    action_dim: int
    num_action_chunks: int

    @property
    def task_id(self) -> str:
        return self.params.id

    @property
    def instruction(self) -> str:
        return self.env_cfg.task_description

    @property
    def max_episode_steps(self) -> int:
        return self.env_cfg.max_episode_steps

    @property
    def image_size(self) -> tuple[int, int]:
        return self.params.camera_heights, self.params.camera_widths

    @classmethod
    def from_config(cls, cfg: RootConfig, task: int | None = None) -> DemoSpec:
        """The spec of env.train, or of its mixture's task number `task` (a mixture's demos are
        recorded one task at a time, each through that task's resolved env config)."""
        from embodied_rl.config.typecheck import build
        from embodied_rl.demos.experts import make_expert

        key, env_cfg = _chosen_task(cfg, task)
        if env_cfg.env_type != "maniskill":
            raise ConfigError(f"{key}.env_type={env_cfg.env_type!r}: demos are recorded in ManiSkill tasks (env_type: maniskill)")
        params = env_cfg.init_params
        if not isinstance(params, ManiSkillParams):
            params = build(ManiSkillParams, dict(params), f"{key}.init_params")
        if params.sim_backend != "cpu":
            raise ConfigError(f"{key}.init_params.sim_backend: demos are recorded on the CPU sim; set it to cpu")
        expert = make_expert(params.id)
        if params.control_mode != expert.control_mode:
            raise ConfigError(
                f"{key}.init_params.control_mode={params.control_mode!r}: the {params.id} expert "
                f"drives {expert.control_mode}"
            )
        if not env_cfg.task_description.strip():
            raise ConfigError(f"{key}.task_description is empty: demos of {params.id} need the policy's instruction")
        return cls(env_cfg=env_cfg, params=params, action_dim=cfg.actor.model.action_dim,
                   num_action_chunks=cfg.actor.model.num_action_chunks)


def _chosen_task(cfg: RootConfig, task: int | None) -> tuple[str, EnvConfig]:
    """(config path, env config) of the task demos are recorded in."""
    tasks = cfg.env.train.task_configs("env.train")
    if not cfg.env.train.tasks:
        if task is not None:
            raise ConfigError(f"--task {task} chooses a task of a mixture, but env.train is one task; leave --task out")
        return tasks[0]
    if task is None or not 0 <= task < len(tasks):
        from embodied_rl.demos.reader import maniskill_params

        ids = ", ".join(f"{i}: {maniskill_params(t).id if t.env_type == 'maniskill' else t.env_type}" for i, (_, t) in enumerate(tasks))
        what = "is a mixture" if task is None else f"has no task {task}"
        raise ConfigError(f"env.train {what} of {len(tasks)} tasks ({ids}); record each task's demos with --task I")
    return tasks[task]
