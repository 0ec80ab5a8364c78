"""Dataclasses exchanged by env and rollout workers (through `distributed.channel.Channel`).

Protocol of one rollout epoch of T chunk steps and S pipeline stages (per env worker e):
  env  -> rollout  obs key (rollout rank, s):  EnvStepMessage(step=0)  after reset
  for t in 0..T-1, for s in 0..S-1:
  rollout -> env   action key (e, s):         ActionMessage(step=t)
  env  -> rollout  obs key (rollout rank, s):  EnvStepMessage(step=t+1) carrying the outcome
                                               of chunk step t and the next observation
Env outputs (rewards, dones, final_obs) travel to the rollout worker with the next observation,
so the rollout worker builds the whole trajectory, including V(final_obs) bootstrap values
which need the policy. Env metrics go back to the runner as `EnvWorker.interact`'s result, the
epoch's episodes one by one (`EpisodeOutcome`, for paired comparisons) from
`EnvWorker.last_episodes`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from embodied_rl.distributed.channel import Channel
from embodied_rl.types import EnvObservation

if TYPE_CHECKING:  # env workers exchange numpy arrays only and never import torch
    import torch


def obs_key(queue: str, rollout_rank: int, stage: int) -> str:
    return f"{queue}.r{rollout_rank}.s{stage}"


def action_key(queue: str, env_rank: int, stage: int) -> str:
    return f"{queue}.e{env_rank}.s{stage}"


def trajectory_key(queue: str, rollout_rank: int) -> str:
    return f"{queue}.r{rollout_rank}"


@dataclass
class ChannelWiring:
    """Which channel and queue each direction uses; one per config section, so that its
    `channel.name` (label and shared-memory prefix), `queue_name` (key prefix) and
    `queue_size` (bound) all take effect:
      obs           env.channel:     env -> rollout observations and env outputs
      actions       rollout.channel: rollout -> env actions
      trajectories  actor.channel:   rollout -> actor trajectories (optional)
    """

    obs: Channel
    actions: Channel
    trajectories: Channel | None = None
    obs_queue: str = "obs_buffer"
    action_queue: str = "action_buffer"
    trajectory_queue: str = "replay_buffer"

    @classmethod
    def single(cls, channel: Channel) -> ChannelWiring:
        """Every direction through one channel (its queues are still separate keys)."""
        return cls(obs=channel, actions=channel, trajectories=channel)

    @classmethod
    def of(cls, wiring: ChannelWiring | Channel) -> ChannelWiring:
        return wiring if isinstance(wiring, ChannelWiring) else cls.single(wiring)

    def close(self) -> None:
        """Release this process's endpoints (segments it produced, mappings)."""
        for ch in {id(c): c for c in (self.obs, self.actions, self.trajectories) if c is not None}.values():
            ch.close()


@dataclass
class EnvStepMessage:
    """Observation of one stage of one env worker, plus the outcome of the previous chunk step.

    N = sub-envs of the stage, C = num_action_chunks. The outcome fields are None at step 0.
    rewards/truncations: float32/bool [N, C] of chunk step `step - 1`.
    dones:        bool [N, C] terminations | truncations (a truncated episode bootstraps from
                  V(final_obs), a terminated one does not: both flags are all GAE needs).
    final_obs:    terminal observations of sub-envs that auto-reset in that chunk (rows of
                  others repeat `obs`); None if none did.
    """

    env_rank: int
    stage: int
    step: int
    obs: EnvObservation
    rewards: np.ndarray | None = None
    truncations: np.ndarray | None = None
    dones: np.ndarray | None = None
    final_obs: EnvObservation | None = None


@dataclass
class ActionMessage:
    """Actions float32 [N, C, A] (policy space) for one stage of one env worker."""

    stage: int
    step: int
    actions: np.ndarray


@dataclass
class SamplingSpec:
    """How the rollout samples action tokens (from algorithm.sampling_params)."""

    do_sample: bool = True
    temperature: float = 1.0
    top_k: int = 0  # 0 = all 256 bins
    # The top_k of the recorded log-probs (algorithm.sampling_params.logprobs_over); None scores
    # tokens under the policy they were drawn from, so a spec built with top_k alone stays consistent.
    logprob_top_k: int | None = None

    @property
    def scored_top_k(self) -> int:
        """The top_k the recorded log-probs are computed under."""
        return self.top_k if self.logprob_top_k is None else self.logprob_top_k


@dataclass
class Trajectory:
    """One rollout epoch of one rollout worker, time-major (T chunk steps, N sub-envs).

    N orders sub-envs by (env rank, stage, index in stage), i.e. the global sub-env index
    among the env workers this rollout worker serves. L = C*A tokens, Kv = value width.
      forward_inputs   dict[str, Tensor [T, N, ...]]  PolicyOutput.forward_inputs
      action_tokens    int64 [T, N, L]
      logprobs         float32 [T, N, L]   old log-probs
      rewards          float32 [T, N, C]
      truncations, dones  bool [T, N, C]  (the learner masks steps after a done itself)
      values           float32 [T+1, N, Kv] or None (no value head); row T = V(last obs)
      bootstrap_values float32 [T, N] V(final_obs) at chunk steps where the sub-env auto-reset
                       (0 elsewhere); None without values
      version          weight version the actions were sampled with
      ref_logprobs     float32 [T, N, L] log-probs of the same tokens under the frozen reference
                       policy (the checkpoint as loaded), for algorithm.kl_beta / use_kl_loss; else None
    """

    forward_inputs: dict[str, torch.Tensor]
    action_tokens: torch.Tensor
    logprobs: torch.Tensor
    rewards: torch.Tensor
    truncations: torch.Tensor
    dones: torch.Tensor
    values: torch.Tensor | None
    bootstrap_values: torch.Tensor | None
    version: int
    ref_logprobs: torch.Tensor | None = None

    @property
    def num_envs(self) -> int:
        return int(self.action_tokens.shape[1])

    def to_batch(self) -> dict:
        """The dict compute_advantages / ActorWorker.train_step consume (shared tensor keys)."""
        batch = {
            "forward_inputs": self.forward_inputs, "action_tokens": self.action_tokens,
            "logprobs": self.logprobs, "rewards": self.rewards,
            "dones": self.dones, "truncations": self.truncations,
        }
        if self.values is not None:
            batch["values"] = self.values
            batch["bootstrap_values"] = self.bootstrap_values
        if self.ref_logprobs is not None:
            batch["ref_logprobs"] = self.ref_logprobs
        return batch


def concat_trajectories(parts: list[Trajectory]) -> Trajectory:
    """Join trajectories of several rollout workers along N (in the given order)."""
    import torch

    if len({p.version for p in parts}) != 1:
        raise ValueError(f"trajectories from different weight versions: {[p.version for p in parts]}")

    def cat(xs):
        return None if xs[0] is None else torch.cat(xs, dim=1)

    return Trajectory(
        forward_inputs={k: torch.cat([p.forward_inputs[k] for p in parts], 1) for k in parts[0].forward_inputs},
        action_tokens=cat([p.action_tokens for p in parts]), logprobs=cat([p.logprobs for p in parts]),
        rewards=cat([p.rewards for p in parts]), truncations=cat([p.truncations for p in parts]),
        dones=cat([p.dones for p in parts]), values=cat([p.values for p in parts]),
        ref_logprobs=cat([p.ref_logprobs for p in parts]),
        bootstrap_values=cat([p.bootstrap_values for p in parts]), version=parts[0].version,
    )
