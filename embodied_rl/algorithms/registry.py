"""Name -> function registries for estimators, KL kinds and loss aggregations.

A config names its choice (`adv_type`, `kl_penalty`, `loss_agg_func`); lookups of an
unknown name raise one ConfigError line listing the valid names, so adding a variant is
one decorated function and never an if/elif edit.
"""
from __future__ import annotations

from embodied_rl.registry import Registry

ADVANTAGE_ESTIMATORS: Registry = Registry("algorithm.adv_type")
KL_PENALTIES: Registry = Registry("algorithm.kl_penalty")
LOSS_AGGREGATIONS: Registry = Registry("algorithm.loss_agg_func")
