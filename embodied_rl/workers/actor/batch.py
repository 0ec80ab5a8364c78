"""The actor's view of a rollout batch: flatten time-major tensors, plan minibatches per rank.

Batch contract (what the runner hands `ActorWorker.train_step`; T chunk steps, N envs,
L = C*A action tokens, Kv = 1 or C values per chunk), all tensors time-major [T, N, ...]:

    forward_inputs  dict[str, Tensor [T, N, ...]]  PolicyOutput.forward_inputs stacked by the rollout
    action_tokens   int64 [T, N, L]                sampled tokens (relative bins)
    logprobs        float [T, N, L]                log-probs at rollout time (old policy)
    advantages      float [T, N, L]                from embodied_rl.algorithms.compute_advantages
    loss_mask       bool  [T, N, L]                idem
    values          float [T, N, Kv]               rollout values of the T steps (critic only;
                                                   NOT the [T+1] array given to compute_advantages)
    returns         float [T, N, Kv]               value targets (critic only)
    value_mask      bool  [T, N, Kv]               (critic only)
    ref_logprobs    float [T, N, L]                optional, for algorithm.use_kl_loss

Each actor rank builds it from the rollout workers' trajectories (`ActorWorker.train_on_rollouts`:
`Trajectory.to_batch` plus the estimator's outputs); one sample = one (chunk step, env) pair.
"""
from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from embodied_rl.algorithms.losses import explained_variance
from embodied_rl.errors import ConfigError

REQUIRED_KEYS = ("forward_inputs", "action_tokens", "logprobs", "advantages", "loss_mask")
CRITIC_KEYS = ("values", "returns", "value_mask")
OPTIONAL_KEYS = ("ref_logprobs",)


def actor_batch(rollout_batch: dict) -> dict:
    """The contract's keys out of the runner's rollout batch (`Trajectory.to_batch` plus the
    estimator's outputs): the T rows of values, not the [T+1] array with the bootstrap row."""
    out = {k: rollout_batch[k] for k in REQUIRED_KEYS + CRITIC_KEYS + OPTIONAL_KEYS if k in rollout_batch}
    if "values" in rollout_batch:
        out["values"] = rollout_batch["values"][:-1]
    return out


def flatten_batch(batch: dict, *, needs_critic: bool) -> dict:
    """[T, N, ...] -> [T*N, ...] for every tensor (nested `forward_inputs` too); validates keys and shapes."""
    missing = [k for k in REQUIRED_KEYS + (CRITIC_KEYS if needs_critic else ()) if k not in batch]
    if missing:
        raise ValueError(f"actor batch lacks {missing}; see embodied_rl/workers/actor/batch.py for the contract")
    lead = tuple(batch["action_tokens"].shape[:2])
    out: dict = {}
    for key in REQUIRED_KEYS + CRITIC_KEYS + OPTIONAL_KEYS:
        if key not in batch or (key in CRITIC_KEYS and not needs_critic):
            continue
        value = batch[key]
        if isinstance(value, dict):
            out[key] = {k: _flat(f"{key}.{k}", v, lead) for k, v in value.items()}
        else:
            out[key] = _flat(key, value, lead)
    return out


def _flat(name: str, x: Tensor, lead: tuple[int, int]) -> Tensor:
    if not isinstance(x, Tensor):
        x = torch.as_tensor(x)
    if tuple(x.shape[:2]) != lead:
        raise ValueError(f"actor batch: {name} has leading shape {tuple(x.shape[:2])}, expected [T, N] = {list(lead)}")
    return x.reshape(lead[0] * lead[1], *x.shape[2:])


def select(flat: dict, index: Tensor) -> dict:
    """Rows `index` of every tensor of a flattened batch."""
    return {k: select(v, index) if isinstance(v, dict) else v[index] for k, v in flat.items()}


def num_samples(flat: dict) -> int:
    return int(flat["action_tokens"].shape[0])


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


def rollout_stats(batch: dict) -> dict[str, float]:
    """rollout/* metrics of a rollout batch with its advantages (before `actor_batch`)."""
    mask = batch["loss_mask"].float()
    denom = mask.sum().clamp_min(1.0)
    out = {
        "rollout/reward_per_step": float(batch["rewards"].float().mean()),
        "rollout/logprob_mean": float((batch["logprobs"] * mask).sum() / denom),
        "rollout/advantage_mean": float((batch["advantages"] * mask).sum() / denom),
        "rollout/valid_token_fraction": float(mask.mean()),
    }
    if "values" in batch:
        out["rollout/value_mean"] = float(batch["values"].float().mean())
    if "returns" in batch:
        out["rollout/return_target_mean"] = float(batch["returns"].float().mean())
    if "values" in batch and "returns" in batch and "value_mask" in batch:
        # The critic as it was when the batch was collected, on the whole batch: out of sample,
        # unlike the per-minibatch train/critic/explained_variance of the update it then trains on.
        returns = batch["returns"].float()
        out["rollout/explained_variance"] = explained_variance(batch["values"][: returns.shape[0]].float(), returns, batch["value_mask"])
    return out
