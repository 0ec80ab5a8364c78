"""Rules of the algorithm's registry names: checked against the registries, so a newly
registered estimator, KL kind or aggregation is valid without editing the config schema."""
from __future__ import annotations

from typing import TYPE_CHECKING

import embodied_rl.algorithms  # noqa: F401  (populates the registries)
from embodied_rl.algorithms.registry import (
    ADVANTAGE_ESTIMATORS,
    KL_PENALTIES,
    LOSS_AGGREGATIONS,
)
from embodied_rl.config.rules import RuleSet

if TYPE_CHECKING:
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


@RULES.config_check
def _registry_names(cfg: RootConfig) -> None:
    a = cfg.algorithm
    ADVANTAGE_ESTIMATORS.get(a.adv_type)
    KL_PENALTIES.get(a.kl_penalty)
    LOSS_AGGREGATIONS.get(a.loss_agg_func)

