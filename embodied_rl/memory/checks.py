"""Memory rules: the device memory key, and the plan's lower bound against each device."""
from __future__ import annotations

from typing import TYPE_CHECKING

from embodied_rl.config.rules import RuleSet
from embodied_rl.errors import ConfigError

if TYPE_CHECKING:
    from embodied_rl.config.plan import RunPlan
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


@RULES.config_check
def _device_memory(cfg: RootConfig) -> None:
    gb = cfg.cluster.device_memory_gb
    if gb is not None and not gb > 0:
        raise ConfigError(f"cluster.device_memory_gb: must be > 0 GiB (or null to read it from this machine), got {gb}")


@RULES.plan_check
def _fits(cfg: RootConfig, plan: RunPlan) -> None:
    from embodied_rl.memory.plan import check_fits, memory_plan

    check_fits(memory_plan(cfg, plan))
