"""Rules of the worker groups against the plan: the actor's batches against the rollout size and
its world size, and the processes that cannot share a GPU."""
from __future__ import annotations

from typing import TYPE_CHECKING

from embodied_rl.config.rules import RuleSet
from embodied_rl.errors import ConfigError

if TYPE_CHECKING:
    from embodied_rl.config.plan import RunPlan
    from embodied_rl.config.schema import RootConfig

RULES = RuleSet()
#: Run before every other rule set: the other rules read runner.paradigm's meaning.
NAME_RULES = RuleSet()


@NAME_RULES.config_check
def _update_name(cfg: RootConfig) -> None:
    from embodied_rl.workers.actor.updates import UPDATES

    UPDATES.get(cfg.runner.paradigm)


@RULES.plan_check
def _batch(cfg: RootConfig, plan: RunPlan) -> None:
    from embodied_rl.config.plan import rollout_batch_size, rolls_out
    from embodied_rl.workers.actor.batch import check_batch_sizes

    if cfg.runner.only_eval:
        return
    a = cfg.actor
    # SFT draws global batches from the demos epoch after epoch: any global size divides its stream.
    total = rollout_batch_size(cfg) if rolls_out(cfg) else a.global_batch_size
    check_batch_sizes(total, a.global_batch_size, a.micro_batch_size, plan.actor_world_size)


#: Components whose processes cannot share a GPU, and why (the second only with the vLLM backend).
ONE_PER_GPU = {
    "actor": "NCCL takes one rank of a group per GPU",
    "rollout": "a vLLM engine takes its memory as a share of the whole GPU (gpu_memory_utilization), so a second engine there cannot start",
}


@RULES.plan_check
def _one_process_per_gpu(cfg: RootConfig, plan: RunPlan) -> None:
    """Two actor ranks (or two vLLM engines) on one GPU would fail at the first collective (or
    at the second engine's start), after Ray and the simulators started."""
    from embodied_rl.config.plan import components
    from embodied_rl.distributed.placement import KEY, entry_of, format_ranks

    if plan.resources.accelerator != "gpu":
        return  # gloo ranks and CPU engines share CPU slots freely
    names = [n for n in components(cfg) if n == "actor" or (n == "rollout" and cfg.rollout.backend == "vllm")]
    for name in names:
        where = plan.placement[name]
        shared = where.shared_slots()
        if not shared:
            continue
        slot, ranks = next(iter(shared.items()))
        entry = entry_of(cfg.cluster.component_placement, name)
        fix = f"'{name}: {format_ranks(where.slots)}'" + ("" if entry == name else f" in an entry of its own (now '{entry}')")
        raise ConfigError(f"{KEY}.{entry}: {name} ranks {', '.join(map(str, ranks))} share {plan.placement.describe_slot(slot)}, but "
                          f"{ONE_PER_GPU[name]}; place one {name} process per GPU, e.g. {fix}")
