"""ActorWorker: one rank of the FSDP2 training group (gloo on CPU, NCCL on GPU).

A plain class: `WorkerGroup` (distributed/worker_group.py) or `ray.remote(ActorWorker)` makes it
a Ray actor, one process per rank. Lifecycle, driven by the runner:

    addr, port = rank0.get_master_address()            # rank 0's host and a free port
    all ranks:  setup(addr, port)                      # process group, policy, FSDP2, AdamW, LR schedule
    per step:   train_step(batch) -> metrics           # collective; batch contract in actor/batch.py
    SFT:        load_demos(stats) once, then sft_step() -> metrics per step (demos read by each rank)
    demo-augmented RL (algorithm.bc_coef > 0): load_demos() once; train_step adds the BC term
                get_trainable_state_dict() -> (sd | None, version)   # collective; sd on rank 0 only
                offload() / onload()                   # collocated GPU layouts (actor.enable_offload)
    save_checkpoint(dir) / load_checkpoint(dir)        # collective; sharded, every rank writes/reads (actor/checkpoint.py)
    shutdown()

Every rank may be handed the same full batch (one Ray object, read zero-copy): each rank
trains only on its slice of every global minibatch (see batch.minibatch_plan).
"""
from __future__ import annotations

import logging
import math
from typing import TYPE_CHECKING

import torch
import torch.distributed as dist

from embodied_rl.algorithms import (
    RunningRewardStats,
    compute_actor_critic_loss,
    compute_advantages,
)
from embodied_rl.algorithms.losses import fit_value_loss
from embodied_rl.algorithms.sft import sft_loss
from embodied_rl.distributed.rng import seed_everything
from embodied_rl.distributed.weight_sync import make_buckets
from embodied_rl.models.registry import PRECISION_DTYPES
from embodied_rl.timing import Timer
from embodied_rl.workers.actor import checkpoint, fsdp
from embodied_rl.workers.actor.batch import (
    actor_batch,
    check_batch_sizes,
    flatten_batch,
    minibatch_plan,
    num_samples,
    rank_micro_batches,
    rollout_stats,
    select,
)
from embodied_rl.workers.actor.optim import (
    build_optimizer,
    build_scheduler,
    clip_gradients,
    clip_sets,
    set_lr_scale,
)
from embodied_rl.workers.actor.value_replay import ValueReplay

# Ray and the rollout protocol are imported where the data comes from the object store, so the
# worker trains in a process without Ray (scripts/gpu_smoke.py on a bare GPU machine).
if TYPE_CHECKING:
    import ray

log = logging.getLogger(__name__)



class ActorWorker:
    def __init__(self, cfg, rank: int, world_size: int) -> None:
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        # Weight version: 1 = as built by setup(), +1 per train step. A rollout worker starts at 0
        # (its own load), so the runner's first sync (before the first rollout) is accepted.
        self.version = 1
        self.policy = self.optimizer = self.scheduler = None
        self.device = torch.device("cpu")
        self._offloaded = False
        self._io_group: dist.ProcessGroup | None = None  # checkpoint collectives (actor/checkpoint.py)
        self._defer_sync = False
        self.sft_samples = self.sft_sampler = None
        # Identical on every rank: each computes the advantages of the whole batch.
        self.reward_stats = RunningRewardStats() if cfg.algorithm.reward_norm == "running" else None

    # ---- set-up ------------------------------------------------------------------------
    def get_master_address(self) -> tuple[str, int]:
        """Called on rank 0 only: where the other ranks rendezvous."""
        return fsdp.host_ip(), fsdp.free_port()

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
        self._shuffle = torch.Generator().manual_seed(a.seed)
        replay = self.cfg.algorithm.critic_replay_steps
        self.value_replay = ValueReplay(replay) if replay else None
        trainable = sum(p.numel() for p in self.policy.parameters() if p.requires_grad)
        return {"rank": self.rank, "device": str(self.device), "backend": dist.get_backend(), "trainable_params": trainable}

    # ---- training ----------------------------------------------------------------------
    def train_on_rollouts(self, trajectories: list[list[ray.ObjectRef]]) -> dict[str, float]:
        """One training step on a step's rollouts: per rollout epoch, a reference to each rollout
        rank's Trajectory (rank order), read from the object store. Every rank reads them all and
        computes the same advantages, so no rollout data passes through the driver. Returns the
        rollout/* statistics, train_step's metrics and time/advantages_s (reading + estimating)."""
        import ray

        from embodied_rl.workers.protocol import concat_trajectories

        timer = Timer("advantages")
        with timer("advantages"):
            # Rollout epochs join along the env axis (whole GRPO groups stay together).
            batch = concat_trajectories([concat_trajectories(ray.get(refs)) for refs in trajectories]).to_batch()
            batch.update(compute_advantages(self.cfg.algorithm, batch, action_dim=self.cfg.actor.model.action_dim,
                                            auto_reset=self.cfg.env.train.auto_reset, reward_stats=self.reward_stats))
        stats = rollout_stats(batch)
        return {**stats, **self.train_step(actor_batch(batch)), **timer.metrics("time/")}

    def get_reward_stats(self) -> dict | None:
        return self.reward_stats.state_dict() if self.reward_stats is not None else None

    def set_reward_stats(self, state: dict) -> None:
        if self.reward_stats is not None:
            self.reward_stats.load_state_dict(state)

    def train_step(self, batch: dict) -> dict[str, float]:
        """`algorithm.update_epoch` passes over the batch, one optimizer step per global
        minibatch (plus the BC term on demos when they are loaded, after critic warm-up), then
        (with algorithm.critic_replay_steps) the critic's replay pass, then one LR-scheduler
        step. Returns metrics averaged over all ranks."""
        self._require_setup()
        self.onload()
        algo, a = self.cfg.algorithm, self.cfg.actor
        flat = flatten_batch(batch, needs_critic=algo.uses_critic)
        self.policy.observe_training_batch(flat["forward_inputs"])
        total = num_samples(flat)
        check_batch_sizes(total, a.global_batch_size, a.micro_batch_size, self.world_size)
        # Metrics stay tensors on the device until the step ends: one host sync for all of them.
        sums: dict[str, torch.Tensor] = {}
        bc_sums: dict[str, torch.Tensor] = {}  # the BC term's metrics, summed over optimizer steps
        n_micro = n_steps = skipped = 0
        grad_norm_sum = 0.0
        lrs = [g["lr"] for g in self.optimizer.param_groups]  # the LR this training step uses
        # The scheduler counts finished training steps (restored on resume).
        warmup = self.scheduler.last_epoch < self.cfg.runner.critic_warmup
        bc = self.sft_samples is not None and not warmup
        for _ in range(algo.update_epoch):
            for micro_indices in minibatch_plan(total, a.global_batch_size, a.micro_batch_size, self.rank, self.world_size, self._shuffle):
                for i, idx in enumerate(micro_indices):
                    # The BC term's micro-batches follow: then its last backward syncs instead.
                    sync = i == len(micro_indices) - 1 and not bc
                    metrics = self._backward_micro(select(flat, idx), scale=1.0 / len(micro_indices), sync=sync)
                    for k, v in metrics.items():
                        sums[k] = _combine(k, sums.get(k), v.double())
                    n_micro += 1
                if bc:
                    for k, v in self._backward_demos(coef=algo.bc_coef).items():
                        bc_sums[k] = bc_sums.get(k, 0.0) + v
                norm = self._clip_and_step(critic_only=warmup)
                n_steps += 1
                skipped += not math.isfinite(norm)
                grad_norm_sum += norm if math.isfinite(norm) else 0.0
        replay = self._replay_values(flat) if self.value_replay is not None else {}
        self.scheduler.step()
        self.version += 1
        out = {f"train/{k}": v if _extreme(k) else v / n_micro for k, v in sums.items()}
        out.update({f"train/actor/bc_{k.split('/')[-1]}": v / n_steps for k, v in bc_sums.items()})
        out = self._reduce_over_ranks({**out, **replay})
        out["train/actor/grad_norm"] = grad_norm_sum / max(1, n_steps - skipped)
        out["train/actor/nonfinite_grad_steps"] = float(skipped)
        out["train/actor/optimizer_steps"] = float(n_steps)
        for group, lr in zip(self.optimizer.param_groups, lrs):
            out["train/critic/lr" if group["name"] == "value_head" else "train/actor/lr"] = 0.0 if warmup and group["name"] != "value_head" else lr
        out["train/critic/warmup"] = float(warmup)
        return out

    def _replay_values(self, flat: dict) -> dict[str, float]:
        """One value-only pass over the critic's samples of this step and the kept earlier ones,
        in global minibatches of the step's size (the same plan on every rank)."""
        assert self.value_replay is not None
        self.value_replay.add(flat)
        data = self.value_replay.samples()
        a, algo = self.cfg.actor, self.cfg.algorithm
        loss_sum, n_micro = torch.zeros((), dtype=torch.float64, device=self.device), 0
        for micro_indices in minibatch_plan(len(data["returns"]), a.global_batch_size, a.micro_batch_size, self.rank,
                                            self.world_size, self._shuffle):
            for i, idx in enumerate(micro_indices):
                mb = _to_device({k: v[idx] for k, v in data.items()}, self.device)
                loss = fit_value_loss(self.policy.state_values(mb["privileged"]), mb["returns"], mb["value_mask"].bool(), algo.huber_delta)
                self._backward(algo.value_loss_coef * loss / len(micro_indices), sync=i == len(micro_indices) - 1)
                loss_sum, n_micro = loss_sum + loss.detach().double(), n_micro + 1
            self._clip_and_step(critic_only=True)
        return {"train/critic/replay_value_loss": float(loss_sum) / max(1, n_micro), "train/critic/replay_samples": float(len(data["returns"]))}

    def load_demos(self, stats: dict | None = None) -> int:
        """Tokenise the demos of data.train_data_paths (every rank reads them itself, so no
        sample passes through the driver), for SFT or the BC term of RL; returns the number of
        samples. `stats`: SFT's statistics, adopted first; None keeps the policy's own, so the
        expert's actions are binned as the policy being fine-tuned bins its own."""
        from embodied_rl.demos.sft_data import (
            EpochSampler,
            build_samples,
            load_sft_demos,
        )

        self._require_setup()
        if stats is not None:
            self.policy.set_dataset_statistics(stats)
        self.sft_samples = build_samples(self.policy, load_sft_demos(self.cfg))
        self.sft_sampler = EpochSampler(len(self.sft_samples), self._shuffle)
        return len(self.sft_samples)

    def sft_step(self) -> dict[str, float]:
        """One optimizer step on `actor.global_batch_size` demo samples (this rank: its slice),
        then one LR-scheduler step. Returns metrics averaged over all ranks."""
        if self.sft_samples is None:
            raise RuntimeError("ActorWorker.load_demos(stats) must run before sft_step")
        self.onload()
        lr = next(g["lr"] for g in self.optimizer.param_groups if g["name"] != "value_head")
        sums = self._backward_demos(coef=1.0)
        norm = self._clip_and_step()
        self.scheduler.step()
        self.version += 1
        out = self._reduce_over_ranks({f"train/{k}": v for k, v in sums.items()})
        out["train/actor/grad_norm"] = norm if math.isfinite(norm) else float("nan")
        out["train/actor/lr"] = lr
        out["train/sft/epoch"] = float(self.sft_sampler.epoch)
        return out

    def _backward_demos(self, coef: float) -> dict[str, torch.Tensor]:
        """Accumulate coef x the behaviour-cloning loss of the next global batch of demo samples
        (this rank's slice; its last backward syncs the gradients); returns its metrics
        (sft/nll, sft/token_prob) as float64 device tensors."""
        a = self.cfg.actor
        micros = rank_micro_batches(self.sft_sampler.next(a.global_batch_size), a.micro_batch_size, self.rank, self.world_size)
        sums: dict[str, torch.Tensor] = {}
        for i, idx in enumerate(micros):
            inputs, tokens, mask = self.sft_samples.select(idx)
            out = self.policy.evaluate_actions(_to_device(inputs, self.device), tokens.to(self.device),
                                               temperature=1.0, top_k=0, compute_values=False)
            loss, metrics = sft_loss(out["logprobs"].float(), mask.to(self.device))
            self._backward(coef * loss / len(micros), sync=i == len(micros) - 1)
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + v.double() / len(micros)
        return sums

    def _backward(self, loss: torch.Tensor, sync: bool) -> None:
        """Backward of one micro-batch. FSDP reduce-scatters the gradients when `sync` (the last
        backward before an optimizer step); before it, where fsdp.defers_gradient_sync allows,
        each rank accumulates them unsharded instead."""
        self.policy.set_requires_gradient_sync(sync or not self._defer_sync)
        loss.backward()

    def _backward_micro(self, mb: dict, scale: float, sync: bool) -> dict[str, torch.Tensor]:
        algo = self.cfg.algorithm
        mb = _to_device(mb, self.device)
        sp = algo.sampling_params
        out = self.policy.evaluate_actions(
            mb["forward_inputs"], mb["action_tokens"], temperature=sp.temperature_train,
            top_k=sp.logprob_top_k, compute_values=algo.uses_critic,
        )
        critic = algo.uses_critic
        loss, metrics = compute_actor_critic_loss(
            algo,
            logprobs=out["logprobs"].float(), old_logprobs=mb["logprobs"], advantages=mb["advantages"],
            loss_mask=mb["loss_mask"], entropy=_float(out.get("entropy")),
            values=_float(out.get("values")) if critic else None,
            old_values=mb.get("values"), returns=mb.get("returns"), value_mask=mb.get("value_mask"),
            ref_logprobs=mb.get("ref_logprobs"), action_dim=self.cfg.actor.model.action_dim,
        )
        self._backward(loss * scale, sync)
        return metrics

    def _clip_and_step(self, critic_only: bool = False) -> float:
        """Clip the gradient norm (optim.clip_grad <= 0: measure only) and step; a non-finite
        norm skips the update on every rank (the norm is the same everywhere). Returns the norm
        of the policy's gradient (of the critic's when only the critic has one).
        critic_only: drop every gradient outside the value head first, so AdamW leaves the
        policy's weights and moments untouched (it skips parameters without a gradient)."""
        if critic_only:
            for group in self.optimizer.param_groups:
                if group["name"] != "value_head":
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

    def _reduce_over_ranks(self, metrics: dict[str, float | torch.Tensor]) -> dict[str, float]:
        """Means are averaged over ranks; `*_max` / `*_min` metrics take the extreme. Values may be
        device tensors: they reach the host here, in one transfer per kind."""
        out: dict[str, float] = {}
        # min(x) = -max(-x); every rank has the same keys, so all join the same all-reduces.
        for kind, op, sign in (("mean", dist.ReduceOp.SUM, 1.0), ("max", dist.ReduceOp.MAX, 1.0), ("min", dist.ReduceOp.MAX, -1.0)):
            keys = sorted(k for k in metrics if (_extreme(k) or "mean") == kind)
            if not keys:
                continue
            t = torch.stack([sign * torch.as_tensor(metrics[k], dtype=torch.float64, device=self.device) for k in keys])
            dist.all_reduce(t, op=op)
            factor = 1.0 / self.world_size if kind == "mean" else sign
            out.update({k: float(v) * factor for k, v in zip(keys, t.tolist())})
        return out

    # ---- weight sync and offload -------------------------------------------------------
    def get_trainable_state_dict(self) -> tuple[dict[str, torch.Tensor] | None, int]:
        """Full CPU tensors of the trainable weights (policy.trainable_state_dict keys: LoRA +
        value head when is_lora, else all) on rank 0, None elsewhere; plus the weight version
        (1 before training, +1 per train step). Collective. Sync once before the first rollout:
        randomly initialised parts (value head, LoRA) exist only on the actor until then."""
        self._require_setup()
        self.onload()
        return fsdp.gather_full(self.policy.trainable_state_dict(), self.rank), self.version

    def share_trainable_state_dict(self) -> tuple[list[ray.ObjectRef] | None, int]:
        """The trainable weights in buckets (distributed/weight_sync.py) in the rollout's dtype
        (actor.model.precision), each put in rank 0's node object store as it fills: references
        to them in order on rank 0, None elsewhere; plus the weight version. The rollout workers
        fetch them from there, never through the driver. Rank 0 holds one bucket at a time.
        Collective."""
        import ray

        self._require_setup()
        self.onload()
        dtype = PRECISION_DTYPES[self.cfg.actor.model.precision]
        gathered = fsdp.iter_full(self.policy.trainable_state_dict(), self.rank)
        refs = [ray.put(bucket) for bucket in make_buckets(gathered, dtype)]
        return (refs if self.rank == 0 else None), self.version

    def offload(self) -> None:
        """Move weights, gradients and optimizer state to CPU (only with actor.enable_offload)."""
        if self.cfg.actor.enable_offload and not self._offloaded:
            fsdp.move_training_state(self.policy, self.optimizer, torch.device("cpu"))
            self._offloaded = True

    def onload(self) -> None:
        if self._offloaded:
            fsdp.move_training_state(self.policy, self.optimizer, self.device)
            self._offloaded = False

    # ---- checkpoints -------------------------------------------------------------------
    def save_checkpoint(self, actor_dir: str) -> None:
        """Write trainable weights, optimizer, scheduler, shuffle and per-rank RNG state into
        `actor_dir`, every rank its own shards (actor/checkpoint.py). Collective."""
        self._require_setup()
        self.onload()
        checkpoint.save(self, actor_dir, self._io_group)

    def load_checkpoint(self, actor_dir: str, lr_scale: float = 1.0) -> int:
        """Restore everything `save_checkpoint` wrote, with the config's learning rates x
        `lr_scale` (runner.health rollbacks lower it); returns the weight version. Collective."""
        self._require_setup()
        self.onload()
        version = checkpoint.load(self, actor_dir, self._io_group)
        set_lr_scale(self.scheduler, self.cfg.actor.optim, lr_scale)
        return version

    def shutdown(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()

    def _require_setup(self) -> None:
        if self.policy is None:
            raise RuntimeError("ActorWorker.setup(master_addr, master_port) must run before training")


def _extreme(name: str) -> str | None:
    """'max' / 'min' for metrics that are extremes (reduced with max/min, never averaged)."""
    return "max" if name.endswith("_max") else "min" if name.endswith("_min") else None


def _combine(name: str, acc: torch.Tensor | None, value: torch.Tensor) -> torch.Tensor:
    if acc is None:
        return value
    kind = _extreme(name)
    return torch.maximum(acc, value) if kind == "max" else torch.minimum(acc, value) if kind == "min" else acc + value


def _to_device(x, device: torch.device):
    if isinstance(x, dict):
        return {k: _to_device(v, device) for k, v in x.items()}
    return x.to(device, non_blocking=True) if isinstance(x, torch.Tensor) else x


def _float(x: torch.Tensor | None) -> torch.Tensor | None:
    return None if x is None else x.float()

