"""Checks of a mixture section (`env.<mode>.tasks`) that the config alone decides: shares, state
pool sizes, observation shapes the tasks must share, and each task's sub-envs on this machine."""
from __future__ import annotations

import math

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs.backend import spec_of
from embodied_rl.envs.mixture import task_counts
from embodied_rl.errors import ConfigError

_SPEC_FIELDS = {"image_size": "image size", "cameras": "cameras per observation", "state_dim": "state size",
                "action_dim": "action size"}


def check_mixture(env: EnvConfig, key: str) -> None:
    """Shares, state pool sizes and shapes of `env`'s tasks (nothing for a single env config)."""
    if not env.tasks:
        return
    first_spec, first_key = None, ""
    for task_key, task in env.task_configs(key):
        if not (math.isfinite(task.share) and task.share > 0):
            raise ConfigError(f"{task_key}.share: must be a positive number, got {task.share}")
        used, unused = ("train_size", "test_size") if env.reset_id_split == "train" else ("test_size", "train_size")
        if getattr(task, unused) is not None:
            raise ConfigError(f"{task_key}.{unused}: {key} draws from the {env.reset_id_split} split "
                              f"(reset_id_split={env.reset_id_split}); set {used} instead or remove {unused}")
        size = getattr(task, used)
        if size is not None and size < 1:
            raise ConfigError(f"{task_key}.{used}: must be >= 1 initial states, or null for all, got {size}")
        spec = spec_of(task, task_key)
        if first_spec is None:
            first_spec, first_key = spec, task_key
            continue
        for name, what in _SPEC_FIELDS.items():
            a, b = getattr(first_spec, name), getattr(spec, name)
            if a is not None and b is not None and a != b:
                raise ConfigError(f"{task_key} gives {what} {b} but {first_key} gives {a}: one policy acts in every task of "
                                  f"{key}, so their observations and actions must have the same shape; make them equal")


def check_mixture_split(env: EnvConfig, key: str) -> None:
    """Every task gets at least one group of the section's sub-envs on this machine."""
    if not env.tasks:
        return
    groups = env.total_num_envs // env.group_size
    for (task_key, task), count in zip(env.task_configs(key), task_counts([t.share for t in env.tasks], groups)):
        if count < 1:
            raise ConfigError(f"{task_key} (share {task.share}) gets none of the {groups} sub-env groups of {key} on this machine; "
                              f"raise {key}.groups_per_stage or {key}.total_num_envs, or this task's share")
