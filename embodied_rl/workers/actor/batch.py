"""The actor's view of a rollout batch: samples to train on, the minibatch plan per rank, and
the rollout/* statistics.

The actor trains on a `RolloutBatch` (embodied_rl/rollout_batch.py) whose targets
compute_advantages has set (`ActorWorker.train_on_rollouts` builds it from the rollout workers'
trajectories on every rank); one sample = one (chunk step, env) pair.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from embodied_rl.algorithms.losses import explained_variance
from embodied_rl.errors import ConfigError
from embodied_rl.rollout_batch import RolloutBatch


@dataclass
class Samples:
    """The fields of a RolloutBatch that one update trains on, with (T, N) flattened to one
    sample axis B = T * N (same names, same trailing shapes). The critic's fields (values: the
    rollout's values of the T steps, returns, value_mask) are None when no critic trains."""

    forward_inputs: dict[str, Tensor]
    action_record: Tensor
    logprobs: Tensor
    advantages: Tensor
    loss_mask: Tensor
    values: Tensor | None = None
    returns: Tensor | None = None
    value_mask: Tensor | None = None
    ref_logprobs: Tensor | None = None

    def __len__(self) -> int:
        return int(self.logprobs.shape[0])

    def map(self, fn: Callable[[Any], Any]) -> Samples:
        """`fn` applied to every field that is set (forward_inputs: to the dict, e.g. TrainEngine.to_device)."""
        return Samples(**{f.name: None if (v := getattr(self, f.name)) is None else fn(v) for f in dataclasses.fields(self)})

    def select(self, index: Tensor) -> Samples:
        """The samples at `index` (rows of every tensor)."""
        return self.map(lambda x: {k: v[index] for k, v in x.items()} if isinstance(x, dict) else x[index])


_REQUIRED = ("action_record", "advantages", "loss_mask")
_CRITIC = ("values", "returns", "value_mask")


def flatten_batch(batch: RolloutBatch, *, needs_critic: bool) -> Samples:
    """[T, N, ...] -> [T*N, ...] for every field the update reads; validates presence and shapes."""
    missing = [k for k in _REQUIRED + (_CRITIC if needs_critic else ()) if getattr(batch, k) is None]
    if missing:
        raise ValueError(f"the actor's rollout batch lacks {missing}: run compute_advantages on it (embodied_rl/rollout_batch.py)")
    lead = (batch.num_steps, batch.num_envs)
    flat = {name: _flat(name, getattr(batch, name), lead) for name in ("action_record", "logprobs", "advantages", "loss_mask")}
    if needs_critic:
        flat.update({name: _flat(name, getattr(batch, name), lead) for name in _CRITIC})
    if batch.ref_logprobs is not None:
        flat["ref_logprobs"] = _flat("ref_logprobs", batch.ref_logprobs, lead)
    inputs = {k: _flat(f"forward_inputs.{k}", v, lead) for k, v in batch.forward_inputs.items()}
    return Samples(forward_inputs=inputs, **flat)


def _flat(name: str, x: Tensor, lead: tuple[int, int]) -> Tensor:
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x)
    if tuple(x.shape[:2]) != lead:
        raise ValueError(f"actor batch: {name} has leading shape {tuple(x.shape[:2])}, expected [T, N] = {list(lead)}")
    return x.reshape(lead[0] * lead[1], *x.shape[2:])


def check_batch_sizes(total: int, global_batch: int, micro: int, world: int) -> int:
    """The batch arithmetic (run by the config checks before anything starts); returns the
    number of micro-batches per rank and minibatch."""
    if global_batch < 1 or micro < 1:
        raise ConfigError(f"actor.global_batch_size={global_batch} and actor.micro_batch_size={micro} must be >= 1")
    if global_batch % (micro * world):
        raise ConfigError(
            f"actor.global_batch_size={global_batch} must be a multiple of actor.micro_batch_size x actor processes = {micro} x {world}"
        )
    if total % global_batch:
        raise ConfigError(
            f"actor.global_batch_size={global_batch} must divide the rollout batch of {total} samples (env.train.total_num_envs "
            "x chunk steps x algorithm.rollout_epoch); change it, or set it null for one minibatch"
        )
    return global_batch // world // micro


def minibatch_plan(total: int, global_batch: int, micro: int, rank: int, world: int, generator: torch.Generator) -> Iterator[list[Tensor]]:
    """Yield, for each optimizer step, this rank's micro-batch index tensors.

    One permutation of all samples is drawn from `generator` (same seed and state on every
    rank, so all ranks agree); each global minibatch is split into `world` contiguous
    per-rank slices. The micro-batches that make up a global minibatch are therefore the
    same for any world size, which is what makes world size 1 and 2 train identically.
    """
    perm = torch.randperm(total, generator=generator)
    for start in range(0, total, global_batch):
        yield rank_micro_batches(perm[start:start + global_batch], micro, rank, world)


def rank_micro_batches(global_indices: Tensor, micro: int, rank: int, world: int) -> list[Tensor]:
    """This rank's contiguous slice of one global minibatch, split into micro-batches."""
    per_rank = len(global_indices) // world
    mine = global_indices[rank * per_rank:(rank + 1) * per_rank]
    return [mine[i: i + micro] for i in range(0, per_rank, micro)]


def rollout_stats(batch: RolloutBatch) -> dict[str, float]:
    """rollout/* metrics of a rollout batch with its targets (compute_advantages)."""
    mask = batch.loss_mask.float()
    denom = mask.sum().clamp_min(1.0)
    out = {
        "rollout/reward_per_step": float(batch.processed_rewards.float().mean()),
        "rollout/logprob_mean": float((batch.logprobs * mask).sum() / denom),
        "rollout/advantage_mean": float((batch.advantages * mask).sum() / denom),
        "rollout/valid_entry_fraction": float(mask.mean()),
    }
    if batch.values is not None:
        # over the T steps and the last value
        out["rollout/value_mean"] = float(batch.values_with_bootstrap().float().mean())
    if batch.returns is not None:
        out["rollout/return_target_mean"] = float(batch.returns.float().mean())
    if batch.values is not None and batch.returns is not None and batch.value_mask is not None:
        # The critic as it was when the batch was collected, on the whole batch: out of sample,
        # unlike the per-minibatch train/critic/explained_variance of the update it then trains on.
        out["rollout/explained_variance"] = explained_variance(batch.values.float(), batch.returns.float(), batch.value_mask)
    return out
