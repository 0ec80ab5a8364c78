"""Sizes that depend on the machine, derived from the resource slots before anything starts.

`plan_run(cfg, resources)` parses `cluster.component_placement` against the slots, fills the
keys left null for derivation and returns the process counts every worker group will have:

    env.<mode>.total_num_envs: null  ->  env processes x rollout.pipeline_stage_num x env.<mode>.groups_per_stage
                                         x env.<mode>.group_size (groups_per_stage groups per stage of every env worker)
    actor.global_batch_size: null    ->  RL: the rollout batch split into algorithm.n_minibatches optimizer steps
                                         per update epoch: env.train.total_num_envs x chunk steps x
                                         algorithm.rollout_epoch / algorithm.n_minibatches
                                         (SFT needs it set: demo samples per optimizer step)
    actor.micro_batch_size: null     ->  each actor process's share of a minibatch (no accumulation):
                                         actor.global_batch_size / actor processes
    rollout.gpu_memory_utilization:  ->  rollout.backend=vllm: GPU_MEMORY_SHARED / the most rollout +
      null                               actor processes on one slot that holds a rollout worker
                                         (vllm_memory_share)

So a config that leaves them null runs on 2 CPU slots or on 64 GPUs alike, and one that sets
them is checked against the machine here (see `config/rules.py`, `plan_check`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from embodied_rl.config.schema import RootConfig
from embodied_rl.distributed.placement import Placement, parse_component_placement
from embodied_rl.distributed.resources import Resources

MODES = ("train", "eval")
# Of a GPU's memory, what the model holders on it (vLLM engines, actor ranks) split evenly; the
# rest is left to CUDA contexts, communication buffers and env workers' rendering.
GPU_MEMORY_SHARED = 0.9


@dataclass(frozen=True)
class RunPlan:
    resources: Resources
    placement: Placement

    @property
    def env_workers(self) -> int:
        return self.placement["env"].num_processes

    @property
    def rollout_workers(self) -> int:
        return self.placement["rollout"].num_processes

    @property
    def actor_world_size(self) -> int:
        return self.placement["actor"].num_processes


def chunk_steps_per_epoch(cfg: RootConfig, mode: str) -> int:
    """Chunk steps of one rollout epoch: one full episode horizon (ceil(max_episode_steps / C)), the
    longest task's in a mixture."""
    steps = max(env.max_episode_steps for _, env in getattr(cfg.env, mode).task_configs(f"env.{mode}"))
    return math.ceil(steps / cfg.actor.model.num_action_chunks)


def rollout_batch_size(cfg: RootConfig) -> int:
    """Samples (chunks) of one training step's rollout over all env workers."""
    return cfg.env.train.total_num_envs * chunk_steps_per_epoch(cfg, "train") * cfg.algorithm.rollout_epoch


def rolls_out(cfg: RootConfig) -> bool:
    """Whether the run's update trains on rollouts of env.train (RL; SFT learns from demos)."""
    from embodied_rl.config.paradigms import paradigm_of

    return paradigm_of(cfg).uses_rollouts


def used_modes(cfg: RootConfig) -> tuple[str, ...]:
    """The env configs a run steps: an update without rollouts (SFT) only evaluates."""
    return ("eval",) if cfg.runner.only_eval or not rolls_out(cfg) else MODES


def first_mode(cfg: RootConfig, *, resuming: bool = False) -> str:
    """The env mode a run steps first: evaluation before any training (or instead of it), else
    training (a resumed run continues with training)."""
    if "train" not in used_modes(cfg):
        return "eval"
    return "eval" if evaluates_after(cfg, 0) and not resuming else "train"


def components(cfg: RootConfig) -> tuple[str, ...]:
    """The worker groups a run starts: evaluation only needs no actor."""
    return ("env", "rollout") if cfg.runner.only_eval else ("env", "rollout", "actor")


def evaluates_after(cfg: RootConfig, step: int) -> bool:
    """Whether a training run evaluates on env.eval after global step `step` (0: before the
    first, with runner.val_before_train): every val_check_interval steps and after the last."""
    r = cfg.runner
    if step == 0:
        return r.val_before_train
    return r.val_check_interval > 0 and (step % r.val_check_interval == 0 or step == r.max_steps)


def saves_after(cfg: RootConfig, step: int) -> bool:
    """Whether a training run checkpoints after global step `step` besides the final save."""
    return step > 0 and cfg.runner.save_interval > 0 and step % cfg.runner.save_interval == 0


def may_restart(cfg: RootConfig, restarts: int) -> bool:
    """After a worker process died, whether the run starts its groups again (runner.max_restarts)."""
    return restarts < cfg.runner.max_restarts


def training_rl(cfg: RootConfig) -> bool:
    """Whether the run trains on rollouts (not evaluation only, not SFT)."""
    return not cfg.runner.only_eval and rolls_out(cfg)


def vllm_memory_share(cfg: RootConfig, placement: Placement) -> float:
    """Each vLLM engine's fraction of its GPU: GPU_MEMORY_SHARED split evenly among the rollout
    workers and actor ranks (the groups this run starts) on the most crowded slot holding a
    rollout worker; floored to 0.001 so the engines never ask for more than the split."""
    holders = [placement[c].process_slots for c in components(cfg) if c in ("rollout", "actor")]
    crowd = max(sum(slots.count(s) for slots in holders) for s in set(placement["rollout"].process_slots))
    return max(0.001, math.floor(1000 * GPU_MEMORY_SHARED / crowd) / 1000)


def plan_run(cfg: RootConfig, resources: Resources) -> RunPlan:
    """Parse the placement and fill the derived sizes of `cfg` in place (see module docstring)."""
    placement = parse_component_placement(
        cfg.cluster.component_placement, num_slots=resources.num_slots,
        slots_per_node=resources.slots_per_node, accelerator=resources.accelerator,
    )
    plan = RunPlan(resources, placement)
    for component in components(cfg):
        plan.placement[component]  # a missing component is a one-line error naming the key
    for mode in MODES:
        env_cfg = getattr(cfg.env, mode)
        if env_cfg.total_num_envs is None:
            env_cfg.total_num_envs = plan.env_workers * cfg.rollout.pipeline_stage_num * env_cfg.groups_per_stage * env_cfg.group_size
        for task in env_cfg.tasks:  # a mixture's tasks carry the section's sizes (config/mixtures.py)
            task.total_num_envs = env_cfg.total_num_envs
    a = cfg.actor
    if a.global_batch_size is None and rolls_out(cfg) and cfg.env.train.total_num_envs > 0:
        a.global_batch_size = max(1, rollout_batch_size(cfg) // cfg.algorithm.n_minibatches)
    if a.micro_batch_size is None and "actor" in placement and a.global_batch_size is not None:
        a.micro_batch_size = max(1, a.global_batch_size // plan.actor_world_size)
    if cfg.rollout.backend == "vllm" and cfg.rollout.gpu_memory_utilization is None:
        cfg.rollout.gpu_memory_utilization = vllm_memory_share(cfg, placement)
    return plan


__all__ = ["GPU_MEMORY_SHARED", "RunPlan", "chunk_steps_per_epoch", "components", "evaluates_after", "plan_run",
           "rollout_batch_size", "saves_after", "training_rl", "used_modes", "vllm_memory_share"]
