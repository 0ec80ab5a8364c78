"""ActorWorker: one rank of the FSDP2 training group (gloo on CPU, NCCL on GPU), the Ray-facing
face of an engine (workers/actor/engine.py: sharding, precision, optimizer, checkpoint, weight
export) and an update (workers/actor/updates/, chosen by runner.paradigm: what a step computes).

A plain class: `WorkerGroup` (distributed/worker_group.py) or `ray.remote(ActorWorker)` makes it
a Ray actor, one process per rank. Lifecycle, driven by the runner:

    addr, port = rank0.get_master_address()            # rank 0's host and a free port
    all ranks:  setup(addr, port)                      # process group, policy, FSDP2, AdamW, LR schedule
    per step:   train_on_rollouts(refs) or train_step(batch) -> metrics   # updates that use rollouts
                step() -> metrics                      # updates that hold their data (SFT's demos)
    demos:      load_demos(stats) once (SFT; RL with algorithm.bc_coef > 0: the BC term)
                get_trainable_state_dict() -> (sd | None, version)   # collective; sd on rank 0 only
                offload() / onload()                   # collocated GPU layouts (actor.enable_offload)
    save_checkpoint(dir) / load_checkpoint(dir)        # collective; sharded, every rank writes/reads (actor/checkpoint.py)
    shutdown()

Every rank may be handed the same full batch (one Ray object, read zero-copy): each rank
trains only on its slice of every global minibatch (see batch.minibatch_plan).
"""
from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from embodied_rl.algorithms import RunningRewardStats, compute_advantages
from embodied_rl.models.base import BasePolicy
from embodied_rl.rollout_batch import RolloutBatch
from embodied_rl.timing import Timer
from embodied_rl.workers.actor.batch import rollout_stats
from embodied_rl.workers.actor.engine import TrainEngine
from embodied_rl.workers.actor.updates import UPDATES, Update

# Ray and the rollout protocol are imported where the data comes from the object store, so the
# worker trains in a process without Ray (scripts/gpu_smoke.py on a bare GPU machine).
if TYPE_CHECKING:
    import ray


class ActorWorker:
    def __init__(self, cfg, rank: int, world_size: int) -> None:
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        self.engine = TrainEngine(cfg, rank, world_size)
        self.update: Update | None = None
        # Identical on every rank: each computes the advantages of the whole batch.
        self.reward_stats = RunningRewardStats() if cfg.algorithm.reward_norm == "running" else None

    @property
    def policy(self) -> BasePolicy | None:
        return self.engine.policy

    # ---- set-up ------------------------------------------------------------------------
    def get_master_address(self) -> tuple[str, int]:
        """Called on rank 0 only: where the other ranks rendezvous."""
        from embodied_rl.workers.actor import fsdp

        return fsdp.host_ip(), fsdp.free_port()

    def setup(self, master_addr: str, master_port: int) -> dict:
        info = self.engine.setup(master_addr, master_port)
        self.update = UPDATES.get(self.cfg.runner.paradigm)(self.cfg, self.engine)
        return info

    def load_demos(self, stats: dict | None = None) -> int:
        """Tokenise the demos of data.train_data_paths on this rank, for SFT or the BC term of RL;
        returns the number of samples. `stats`: SFT's statistics, adopted first."""
        return self._update().load_demos(stats)

    # ---- training ----------------------------------------------------------------------
    def train_on_rollouts(self, trajectories: list[list[ray.ObjectRef]]) -> dict[str, float]:
        """One training step on a step's rollouts: per rollout epoch, a reference to each rollout
        rank's Trajectory (rank order), read from the object store. Every rank reads them all and
        computes the same advantages, so no rollout data passes through the driver. Returns the
        rollout/* statistics, the update's metrics and time/advantages_s (reading + estimating)."""
        import ray

        from embodied_rl.workers.protocol import concat_trajectories

        timer = Timer("advantages")
        with timer("advantages"):
            # Rollout epochs join along the env axis (whole GRPO groups stay together).
            batch = concat_trajectories([concat_trajectories(ray.get(refs)) for refs in trajectories]).batch
            batch = compute_advantages(self.cfg.algorithm, batch, action_dim=self.cfg.actor.model.action_dim,
                                       auto_reset=self.cfg.env.train.auto_reset, reward_stats=self.reward_stats)
        stats = rollout_stats(batch)
        return {**stats, **self.train_step(batch), **timer.metrics("time/")}

    def train_step(self, batch: RolloutBatch) -> dict[str, float]:
        """One step of the update on a rollout batch with its targets (compute_advantages); metrics
        averaged over ranks."""
        return self._update().step(batch)

    def step(self) -> dict[str, float]:
        """One step of an update that holds its own data (SFT: a global batch of demos)."""
        return self._update().step(None)

    def get_reward_stats(self) -> dict | None:
        return self.reward_stats.state_dict() if self.reward_stats is not None else None

    def set_reward_stats(self, state: dict) -> None:
        if self.reward_stats is not None:
            self.reward_stats.load_state_dict(state)

    # ---- weight sync and offload -------------------------------------------------------
    def get_trainable_state_dict(self) -> tuple[dict[str, torch.Tensor] | None, int]:
        """Full CPU tensors of the trainable weights (policy.trainable_state_dict keys: LoRA +
        value head when is_lora, else all) on rank 0, None elsewhere; plus the weight version
        (1 before training, +1 per train step). Collective. Sync once before the first rollout:
        randomly initialised parts (value head, LoRA) exist only on the actor until then."""
        self.engine.require_setup()
        return self.engine.gather_trainable(), self.engine.version

    def share_trainable_state_dict(self) -> tuple[list[ray.ObjectRef] | None, int]:
        """The trainable weights in buckets (distributed/weight_sync.py) in the rollout's dtype
        (actor.model.precision), each put in rank 0's node object store as it fills: references
        to them in order on rank 0, None elsewhere; plus the weight version. The rollout workers
        fetch them from there, never through the driver. Rank 0 holds one bucket at a time.
        Collective."""
        import ray

        self.engine.require_setup()
        refs = [ray.put(bucket) for bucket in self.engine.trainable_buckets()]
        return (refs if self.rank == 0 else None), self.engine.version

    def offload(self) -> None:
        """Move weights, gradients and optimizer state to CPU (only with actor.enable_offload)."""
        self.engine.offload()

    def onload(self) -> None:
        self.engine.onload()

    # ---- checkpoints -------------------------------------------------------------------
    def save_checkpoint(self, actor_dir: str) -> None:
        """Write trainable weights, optimizer, scheduler, shuffle, per-rank RNG state and the
        update's own state into `actor_dir`, every rank its own shards (actor/checkpoint.py). Collective."""
        self.engine.save(actor_dir, self._update().state_dict())

    def load_checkpoint(self, actor_dir: str, lr_scale: float = 1.0) -> int:
        """Restore everything `save_checkpoint` wrote, with the config's learning rates x
        `lr_scale` (runner.health rollbacks lower it); returns the weight version. Collective."""
        meta = self.engine.load(actor_dir, lr_scale)
        self._update().load_state_dict(meta)
        return self.engine.version

    def shutdown(self) -> None:
        self.engine.shutdown()

    def _update(self) -> Update:
        if self.update is None:
            raise RuntimeError("ActorWorker.setup(master_addr, master_port) must run before training")
        return self.update
