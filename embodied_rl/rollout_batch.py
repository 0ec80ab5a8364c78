"""`RolloutBatch`: what a rollout collects and what the learner derives from it, in one type.

The rollout workers fill the recorded fields; `algorithms.compute_advantages` returns the batch
with its learning targets set; the actor flattens it into samples (workers/actor/batch.py).
No import of any embodied_rl layer, so every layer can read it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch
from torch import Tensor


@dataclass
class RolloutBatch:
    """One or more rollout epochs, time-major: T chunk steps x N envs; one sample = one (chunk
    step, env) pair.

    C = num_action_chunks (env steps per chunk), L = log-prob entries per sample (the policy's:
    OpenVLA-OFT scores C*A entries), Kv = value width (1 per chunk or C per env step),
    K = the estimator's reward width (1 at chunk_level, C at action_level).

    Recorded by the rollout:
      rewards           float [T, N, C]  reward of each env step
      dones             bool  [T, N, C]  episode end (termination or truncation) after that step
      truncations       bool  [T, N, C]  time-limit ends among dones (bootstrapped from bootstrap_values)
      logprobs          float [T, N, L]  log-probs at rollout time (the old policy)
      forward_inputs    dict[str, Tensor [T, N, ...]]  the policy's inputs (PolicyOutput.forward_inputs)
      action_record     Tensor [T, N, ...]  the policy's opaque record of each sampled action
                        (PolicyOutput.action_record); None in a batch no policy trains on
      values            float [T, N, Kv] or None (no critic)  V(observation) of each chunk step
      last_values       float [N, Kv] or None  V(observation the rollout ends on): the bootstrap of
                        the episodes still running after step T - 1; set exactly when values is
      bootstrap_values  float [T, N] or [T, N, C], or None  V(final_obs) where a sub-env auto-reset
                        (0 elsewhere); None without a critic
      ref_logprobs      float [T, N, L] or None  the same entries under the frozen KL reference
    Set by compute_advantages (None before):
      advantages        float [T, N, L]  per log-prob entry, 0 where masked
      loss_mask         bool  [T, N, L]  entries that enter the policy loss
      processed_rewards float [T, N, K]  the rewards the estimator saw (normalised, clipped,
                        KL-shaped, truncations bootstrapped)
      returns           float [T, N, Kv] value targets (critic-based estimators only)
      value_mask        bool  [T, N, Kv] value targets that enter the value loss (idem)
    """

    rewards: Tensor
    dones: Tensor
    truncations: Tensor
    logprobs: Tensor
    forward_inputs: dict[str, Tensor] = field(default_factory=dict)
    action_record: Tensor | None = None
    values: Tensor | None = None
    last_values: Tensor | None = None
    bootstrap_values: Tensor | None = None
    ref_logprobs: Tensor | None = None
    advantages: Tensor | None = None
    loss_mask: Tensor | None = None
    processed_rewards: Tensor | None = None
    returns: Tensor | None = None
    value_mask: Tensor | None = None

    def __post_init__(self) -> None:
        if (self.values is None) != (self.last_values is None):
            raise ValueError("RolloutBatch: values [T, N, Kv] and last_values [N, Kv] come together (both or neither)")
        if self.values is not None and self.last_values.shape != self.values.shape[1:]:
            raise ValueError(f"RolloutBatch: values {tuple(self.values.shape)} must be [T, N, Kv] and last_values "
                             f"{tuple(self.last_values.shape)} [N, Kv]")

    @property
    def num_steps(self) -> int:
        return int(self.rewards.shape[0])

    @property
    def num_envs(self) -> int:
        return int(self.rewards.shape[1])

    def values_with_bootstrap(self) -> Tensor | None:
        """float [T + 1, N, Kv]: the T steps' values, then the last value (CleanRL's layout for
        GAE: row t + 1 is the next value of step t); None without a critic."""
        if self.values is None:
            return None
        return torch.cat([self.values, self.last_values.unsqueeze(0)], dim=0)

    def with_targets(self, **targets: Tensor | None) -> RolloutBatch:
        """A copy with the learning targets set (advantages, loss_mask, processed_rewards,
        returns, value_mask); the recorded tensors are shared, not copied."""
        unknown = set(targets) - {"advantages", "loss_mask", "processed_rewards", "returns", "value_mask"}
        if unknown:
            raise TypeError(f"RolloutBatch.with_targets: not a target field: {sorted(unknown)}")
        return dataclasses.replace(self, **targets)

    @classmethod
    def concat_envs(cls, parts: list[RolloutBatch]) -> RolloutBatch:
        """Join batches of the same T along N, in the given order (last_values along its N axis)."""
        def cat(name: str, dim: int = 1) -> Tensor | None:
            xs = [getattr(p, name) for p in parts]
            if any(x is None for x in xs):
                if not all(x is None for x in xs):
                    raise ValueError(f"RolloutBatch.concat_envs: {name} is set in some parts only")
                return None
            return torch.cat(xs, dim=dim)

        names = [f.name for f in dataclasses.fields(cls) if f.name not in ("forward_inputs", "last_values")]
        return cls(
            forward_inputs={k: torch.cat([p.forward_inputs[k] for p in parts], 1) for k in parts[0].forward_inputs},
            last_values=cat("last_values", dim=0), **{name: cat(name) for name in names},
        )
