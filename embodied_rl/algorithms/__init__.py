"""RL algorithms as pure tensor functions: advantage estimators, reward processing, losses.

Entry points for the runtime: `compute_advantages` (rollout batch -> advantages, value
targets, loss mask) and `compute_actor_critic_loss` (micro-batch -> scalar loss, metrics).
"""
from embodied_rl.algorithms import aggregation, kl  # noqa: F401  (registers names)
from embodied_rl.algorithms.advantages import compute_advantages
from embodied_rl.algorithms.losses import (
    compute_actor_critic_loss,
    ppo_clipped_surrogate,
    value_loss,
)
from embodied_rl.algorithms.masks import build_loss_mask, masked_mean, masked_whiten
from embodied_rl.algorithms.registry import (
    ADVANTAGE_ESTIMATORS,
    KL_PENALTIES,
    LOSS_AGGREGATIONS,
)
from embodied_rl.algorithms.rewards import RunningRewardStats

__all__ = [
    "ADVANTAGE_ESTIMATORS",
    "KL_PENALTIES",
    "LOSS_AGGREGATIONS",
    "RunningRewardStats",
    "build_loss_mask",
    "compute_actor_critic_loss",
    "compute_advantages",
    "masked_mean",
    "masked_whiten",
    "ppo_clipped_surrogate",
    "value_loss",
]
