"""Rules of the actor's batches against the rollout size and the actor world size."""
from __future__ import annotations

from typing import TYPE_CHECKING

from embodied_rl.config.rules import RuleSet

if TYPE_CHECKING:
    from embodied_rl.config.plan import RunPlan
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()


@RULES.plan_check
def _batch(cfg: RootConfig, plan: RunPlan) -> None:
    from embodied_rl.config.plan import rollout_batch_size
    from embodied_rl.workers.actor.batch import check_batch_sizes

    if cfg.runner.only_eval:
        return
    a = cfg.actor
    # SFT draws global batches from the demos epoch after epoch: any global size divides its stream.
    total = rollout_batch_size(cfg) if cfg.runner.paradigm == "rl" else a.global_batch_size
    check_batch_sizes(total, a.global_batch_size, a.micro_batch_size, plan.actor_world_size)
