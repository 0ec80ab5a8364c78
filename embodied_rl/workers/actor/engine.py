"""TrainEngine: what one actor rank trains with, whatever the update: the process group, the
FSDP2-sharded policy with its optimizer groups and LR schedule, gradient sync and clipping, the
metric reduction over ranks, offload, weight export and the sharded checkpoint.

An update (workers/actor/updates/) decides what one training step computes; it calls the engine
for every backward, optimizer step and collective.
"""
from __future__ import annotations

import logging
import math
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from embodied_rl.distributed.rng import seed_everything
from embodied_rl.distributed.weight_sync import make_buckets
from embodied_rl.models.base import BasePolicy
from embodied_rl.models.registry import PRECISION_DTYPES
from embodied_rl.workers.actor import CRITIC_GROUP, checkpoint, fsdp
from embodied_rl.workers.actor.batch import minibatch_plan, rank_micro_batches
from embodied_rl.workers.actor.micro_metrics import extreme
from embodied_rl.workers.actor.optim import (
    build_optimizer,
    build_scheduler,
    clip_gradients,
    clip_sets,
    set_lr_scale,
)

log = logging.getLogger(__name__)



class TrainEngine:
    def __init__(self, cfg: Any, rank: int, world_size: int) -> None:
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        # Weight version: 1 = as built by setup(), +1 per training step. A rollout worker starts
        # at 0 (its own load), so the runner's first sync (before the first rollout) is accepted.
        self.version = 1
        self.policy: BasePolicy | None = None
        self.optimizer: torch.optim.Optimizer | None = None
        self.scheduler: torch.optim.lr_scheduler.LambdaLR | None = None
        self.device = torch.device("cpu")
        self.shuffle = torch.Generator()
        self.offloaded = False  # training state on the CPU (actor.enable_offload)
        self._defer_sync = False
        self._io_group: dist.ProcessGroup | None = None  # checkpoint collectives (actor/checkpoint.py)

    def setup(self, master_addr: str, master_port: int) -> dict:
        a = self.cfg.actor
        self.device = fsdp.actor_device()
        fsdp.check_precision(a.fsdp_config, self.device)
        fsdp.init_process_group(self.rank, self.world_size, master_addr, master_port, self.device)
        self._io_group = checkpoint.io_group()
        # fp32 master weights; the compute dtype is fsdp_config.mixed_precision.param_dtype.
        # Built on the meta device and sharded before anything is allocated: each rank holds
        # only its shards; rank 0 reads the checkpoint (and makes the random parts, seeded) on
        # the CPU and broadcasts it. Rank 0 says so for the run when the value head is fresh.
        policy = fsdp.build_sharded_policy(a.model, a.fsdp_config, rank=self.rank, world_size=self.world_size,
                                           device=self.device, init_seed=a.seed, warn_untrained_value_head=self.rank == 0)
        seed_everything(a.seed + self.rank)  # from here on, each rank has its own streams (e.g. dropout)
        self.policy = policy.train()
        self._defer_sync = fsdp.defers_gradient_sync(self.policy, a.fsdp_config, self.world_size)
        self.optimizer = build_optimizer(self.policy, a.optim)
        self.scheduler = build_scheduler(self.optimizer, a.optim, self.cfg.runner.max_steps)
        self.shuffle = torch.Generator().manual_seed(a.seed)
        trainable = sum(p.numel() for p in self.policy.parameters() if p.requires_grad)
        return {"rank": self.rank, "device": str(self.device), "backend": dist.get_backend(), "trainable_params": trainable}

    def require_setup(self) -> None:
        if self.policy is None:
            raise RuntimeError("ActorWorker.setup(master_addr, master_port) must run before training")

    # ---- one optimizer step ------------------------------------------------------------
    def minibatches(self, total: int) -> Iterator[list[torch.Tensor]]:
        """Per global minibatch of `total` samples (shuffled, the same plan on every rank): this
        rank's micro-batches of sample indices."""
        a = self.cfg.actor
        return minibatch_plan(total, a.global_batch_size, a.micro_batch_size, self.rank, self.world_size, self.shuffle)

    def rank_micro_batches(self, global_indices: torch.Tensor) -> list[torch.Tensor]:
        """This rank's micro-batches of one global batch of sample indices."""
        return rank_micro_batches(global_indices, self.cfg.actor.micro_batch_size, self.rank, self.world_size)

    def backward(self, loss: torch.Tensor, sync: bool) -> None:
        """Backward of one micro-batch. FSDP reduce-scatters the gradients when `sync` (the last
        backward before an optimizer step); before it, where fsdp.defers_gradient_sync allows,
        each rank accumulates them unsharded instead."""
        self.policy.set_requires_gradient_sync(sync or not self._defer_sync)
        loss.backward()

    def clip_and_step(self, critic_only: bool = False) -> float:
        """Clip the gradient norm (optim.clip_grad <= 0: measure only) and step; a non-finite
        norm skips the update on every rank (the norm is the same everywhere). Returns the norm
        of the policy's gradient (of the critic's when only the critic has one).
        critic_only: drop every gradient outside the value head first, so AdamW leaves the
        policy's weights and moments untouched (it skips parameters without a gradient)."""
        if critic_only:
            for group in self.optimizer.param_groups:
                if group["name"] != CRITIC_GROUP:
                    for p in group["params"]:
                        p.grad = None
        critic_apart = self.cfg.actor.model.value_input == "privileged_state"
        norms = clip_gradients(clip_sets(self.optimizer.param_groups, critic_apart), self.cfg.actor.optim.clip_grad)
        if all(math.isfinite(n) for n in norms):
            self.optimizer.step()
        else:
            log.warning("actor rank %d: non-finite gradient norm, optimizer step skipped", self.rank)
        self.optimizer.zero_grad(set_to_none=True)
        return next((n for n in norms if not math.isfinite(n)), norms[0] if norms else 0.0)

    def finish_step(self) -> None:
        """After a training step's optimizer steps: one LR-scheduler step, a new weight version."""
        self.scheduler.step()
        self.version += 1

    def lrs(self) -> dict[str, float]:
        """The learning rate of each optimizer group, by group name."""
        return {g["name"]: g["lr"] for g in self.optimizer.param_groups}

    def reduce_over_ranks(self, metrics: dict[str, float | torch.Tensor]) -> dict[str, float]:
        """Means are averaged over ranks; `*_max` / `*_min` metrics take the extreme. Values may be
        device tensors: they reach the host here, in one transfer per kind."""
        out: dict[str, float] = {}
        # min(x) = -max(-x); every rank has the same keys, so all join the same all-reduces.
        for kind, op, sign in (("mean", dist.ReduceOp.SUM, 1.0), ("max", dist.ReduceOp.MAX, 1.0), ("min", dist.ReduceOp.MAX, -1.0)):
            keys = sorted(k for k in metrics if (extreme(k) or "mean") == kind)
            if not keys:
                continue
            t = torch.stack([sign * torch.as_tensor(metrics[k], dtype=torch.float64, device=self.device) for k in keys])
            dist.all_reduce(t, op=op)
            factor = 1.0 / self.world_size if kind == "mean" else sign
            out.update({k: float(v) * factor for k, v in zip(keys, t.tolist())})
        return out

    def to_device(self, x: Any) -> Any:
        if isinstance(x, dict):
            return {k: self.to_device(v) for k, v in x.items()}
        return x.to(self.device, non_blocking=True) if isinstance(x, torch.Tensor) else x

    # ---- weights out, offload ----------------------------------------------------------
    def gather_trainable(self) -> dict[str, torch.Tensor] | None:
        """Full CPU tensors of the trainable weights on rank 0, None elsewhere. Collective."""
        self.onload()
        return fsdp.gather_full(self.policy.trainable_state_dict(), self.rank)

    def trainable_buckets(self) -> Iterator[dict[str, torch.Tensor]]:
        """The trainable weights in buckets in the rollout's dtype (actor.model.precision), one
        bucket at a time (distributed/weight_sync.py); full on rank 0. Collective."""
        self.onload()
        gathered = fsdp.iter_full(self.policy.trainable_state_dict(), self.rank)
        return make_buckets(gathered, PRECISION_DTYPES[self.cfg.actor.model.precision])

    def offload(self) -> None:
        """Move weights, gradients and optimizer state to CPU (only with actor.enable_offload)."""
        if self.cfg.actor.enable_offload and not self.offloaded:
            fsdp.move_training_state(self.policy, self.optimizer, torch.device("cpu"))
            self.offloaded = True

    def onload(self) -> None:
        if self.offloaded:
            fsdp.move_training_state(self.policy, self.optimizer, self.device)
            self.offloaded = False

    # ---- checkpoints -------------------------------------------------------------------
    def save(self, actor_dir: str, extra: dict[str, Any]) -> None:
        """Trainable weights, optimizer, scheduler, shuffle and per-rank RNG state, plus the
        update's own state `extra`, into `actor_dir`, every rank its own shards. Collective."""
        self.require_setup()
        self.onload()
        checkpoint.save(self, actor_dir, self._io_group, extra)

    def load(self, actor_dir: str, lr_scale: float = 1.0) -> dict[str, Any]:
        """Restore what `save` wrote, with the config's learning rates x `lr_scale`; returns the
        saved state file (the update's state among it). Collective."""
        self.require_setup()
        self.onload()
        meta = checkpoint.load(self, actor_dir, self._io_group)
        set_lr_scale(self.scheduler, self.cfg.actor.optim, lr_scale)
        return meta

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
