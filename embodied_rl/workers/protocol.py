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
    from embodied_rl.rollout_batch import RolloutBatch


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
    """How the rollout acts (from algorithm.sampling_params); the policy adds its own sampling
    settings from its model config."""

    do_sample: bool = True
    temperature: float = 1.0


@dataclass
class Trajectory:
    """One rollout epoch of one rollout worker: its batch (embodied_rl/rollout_batch.py), whose
    N axis orders sub-envs by (env rank, stage, index in stage), i.e. the global sub-env index
    among the env workers this rollout worker serves, and the weight version its actions were
    sampled with."""

    batch: RolloutBatch
    version: int

    @property
    def num_envs(self) -> int:
        return self.batch.num_envs


def concat_trajectories(parts: list[Trajectory]) -> Trajectory:
    """Join trajectories of several rollout workers along N (in the given order)."""
    from embodied_rl.rollout_batch import RolloutBatch

    if len({p.version for p in parts}) != 1:
        raise ValueError(f"trajectories from different weight versions: {[p.version for p in parts]}")
    return Trajectory(RolloutBatch.concat_envs([p.batch for p in parts]), parts[0].version)
