"""The one place every cross-key rule runs: `load_config` composes, resolves and validates an
experiment config with the rules of every subsystem, before Ray, simulators, model files or run
directories exist. Adding a rule: a function in the owning subsystem's `checks.py`; adding a
subsystem with rules: its `RULES` in `RULE_SETS`.
"""
from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from embodied_rl.algorithms.checks import RULES as ALGORITHM_RULES
from embodied_rl.config.checks import RULES as CONFIG_RULES
from embodied_rl.config.loader import DEFAULT_EXPERIMENT, compose, resolve, validate
from embodied_rl.config.schema import RootConfig
from embodied_rl.demos.checks import RULES as DEMO_RULES
from embodied_rl.demos.checks import MissingDemosError
from embodied_rl.distributed.resources import Resources
from embodied_rl.envs.checks import RULES as ENV_RULES
from embodied_rl.health.checks import RULES as HEALTH_RULES
from embodied_rl.memory.checks import RULES as MEMORY_RULES
from embodied_rl.models.checks import RULES as MODEL_RULES
from embodied_rl.runtime.checks import RULES as CHECKPOINT_RULES
from embodied_rl.runtime.checks import check_compare
from embodied_rl.sinks.checks import RULES as SINK_RULES
from embodied_rl.workers.checks import NAME_RULES as UPDATE_NAME_RULES
from embodied_rl.workers.checks import RULES as WORKER_RULES

#: In the order they run: the update's name first (the rules read its meaning), the env rules
#: early, because they normalise init_params for the rest.
RULE_SETS = (UPDATE_NAME_RULES, ALGORITHM_RULES, ENV_RULES, CONFIG_RULES, CHECKPOINT_RULES, MODEL_RULES, DEMO_RULES, WORKER_RULES, HEALTH_RULES, SINK_RULES, MEMORY_RULES)


def load_config(name_or_path: str = DEFAULT_EXPERIMENT, overrides: Sequence[str] = (), *,
                resources: Resources | None = None, plan: bool = True, skip: Collection[str] = ()) -> RootConfig:
    """Compose, resolve and validate an experiment config; raises ConfigError (one line).

    With `plan` (the default), sizes left null are derived from `resources` (default: the slots
    Ray will have) and the rules that need the machine run too. `skip` names rules a command
    does not depend on (`embodied-rl demos` records the very demos the `sft_data` rule looks for)."""
    try:
        return validate(resolve(compose(name_or_path, overrides)), RULE_SETS, resources, plan=plan, skip=skip)
    except MissingDemosError as err:
        raise err.naming(name_or_path, overrides) from None


def config_from_dict(data: dict[str, Any], resources: Resources | None = None, *, plan: bool = True,
                     skip: Collection[str] = ()) -> RootConfig:
    """Validate an already composed tree (e.g. a run's saved config.yaml); `skip` as in load_config."""
    return validate(resolve(data), RULE_SETS, resources, plan=plan, skip=skip)


__all__ = ["RULE_SETS", "check_compare", "config_from_dict", "load_config"]
