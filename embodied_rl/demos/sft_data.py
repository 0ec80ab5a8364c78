"""Demonstrations as SFT training samples: normalisation statistics, action records, a sampler.

SFT trains the policy on the path PPO trains it: `evaluate_actions` re-scores the policy's
record of the expert's action, so the inputs and targets below are exactly what a rollout
would have produced (`prepare_inputs` of the observation; the action chunk normalised with the
policy's statistics and recorded as the policy records its own samples).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from embodied_rl.demos.manifest import statistics
from embodied_rl.demos.reader import DemoChunks, load_demos_for
from embodied_rl.types import EnvObservation


def concat_chunks(parts: list[DemoChunks]) -> DemoChunks:
    """Several demo directories (of one task or of several) as one sample set."""
    if len(parts) == 1:
        return parts[0]
    cat = np.concatenate
    offsets = np.cumsum([0] + [int(p.episode_index.max()) + 1 for p in parts[:-1]])
    wrist = None if parts[0].wrist_images is None else cat([p.wrist_images for p in parts])
    return DemoChunks(
        main_images=cat([p.main_images for p in parts]), wrist_images=wrist, states=cat([p.states for p in parts]),
        actions=cat([p.actions for p in parts]), action_mask=cat([p.action_mask for p in parts]),
        episode_index=cat([p.episode_index + o for p, o in zip(parts, offsets)]),
        step_index=cat([p.step_index for p in parts]), instructions=[i for p in parts for i in p.instructions],
        manifest=parts[0].manifest,
    )


def load_sft_demos(cfg, *, images: bool = True) -> DemoChunks:
    return concat_chunks([load_demos_for(cfg, p, images=images) for p in cfg.data.train_data_paths])


def statistics_key(task_ids: list[str]) -> str:
    """The `dataset_statistics` key of demos of these tasks: the task id (OpenVLA's convention),
    or the distinct ids joined by '+' in the order given (the policy acts in every task of a
    mixture with one normalisation, so SFT on a mixture writes one entry over all of them)."""
    return "+".join(dict.fromkeys(task_ids))


def sft_statistics(cfg) -> dict[str, Any]:
    """The policy's `dataset_statistics` for SFT: one entry, keyed by `statistics_key` of the
    demos' tasks, over every recorded step of every demo directory (OpenVLA's convention: q01/q99
    bounds, the gripper left unnormalised)."""
    from embodied_rl.envs.action_adapter import ActionAdapter

    parts = [load_demos_for(cfg, p, images=False) for p in cfg.data.train_data_paths]
    demos = concat_chunks(parts)
    gripper = ActionAdapter(cfg.env.train.action_adapter, cfg.actor.model.action_dim).gripper_index
    episodes = int(demos.episode_index.max()) + 1
    # Sample t holds actions t .. t+C-1: its first action is step t's, once per recorded step.
    block = statistics(demos.actions[:, 0], demos.states, gripper, episodes)
    return {statistics_key([p.manifest.task_id for p in parts]): block}


@dataclass
class SFTSamples:
    """N samples on the actor: policy inputs (dict of [N, ...] tensors), the policy's action
    record of each expert action [N, ...] (PolicyOutput.action_record: what evaluate_actions
    scores) and the loss mask bool [N, L] over its L log-prob entries (False past an episode's end).
    With `actions` (the normalised expert actions, float [N, C*A]) and `record` (the policy's
    record of them), `select` can record noisy copies of the actions."""

    inputs: dict[str, Tensor]
    action_record: Tensor
    loss_mask: Tensor
    actions: Tensor | None = None
    record: Callable[[Tensor], Tensor] | None = None

    def __len__(self) -> int:
        return int(self.action_record.shape[0])

    @property
    def action_width(self) -> int:
        """C*A, the width of the normalised actions that noise is added to."""
        if self.actions is None:
            raise ValueError("these SFT samples keep no actions to add noise to (build them with build_samples)")
        return int(self.actions.shape[1])

    def select(self, index: Tensor, noise: Tensor | None = None) -> tuple[dict[str, Tensor], Tensor, Tensor]:
        """(inputs, action records, loss mask) of the samples at `index`; `noise` float
        [len(index), C*A] is added to their normalised actions (clamped to [-1, 1]) before they
        are recorded."""
        inputs = {k: v[index] for k, v in self.inputs.items()}
        if noise is None:
            return inputs, self.action_record[index], self.loss_mask[index]
        if self.actions is None or self.record is None:
            raise ValueError("these SFT samples keep no actions to add noise to (build them with build_samples)")
        noisy = (self.actions[index] + noise.to(self.actions.dtype)).clamp(-1.0, 1.0)
        return inputs, self.record(noisy), self.loss_mask[index]


def build_samples(policy, demos: DemoChunks) -> SFTSamples:
    """Every demo sample as `policy` records its own actions (its statistics must be the SFT ones)."""
    obs = EnvObservation(main_images=demos.main_images, states=demos.states,
                         task_descriptions=list(demos.instructions), wrist_images=demos.wrist_images)
    inputs = policy.prepare_inputs(obs)
    actions = policy.normalize_actions(torch.as_tensor(demos.actions))
    a = demos.actions.shape[-1]
    mask = torch.as_tensor(demos.action_mask).repeat_interleave(a, dim=1)
    return SFTSamples(inputs, policy.record_actions(actions), mask, actions=actions, record=policy.record_actions)


class EpochSampler:
    """Global minibatches of sample indices, epoch after epoch, each epoch a fresh permutation.

    Every rank holds the same generator state, so all ranks draw the same global batch and each
    takes its slice. The state (generator, permutation, position) goes into checkpoints."""

    def __init__(self, num_samples: int, generator: torch.Generator) -> None:
        self.n, self.generator = num_samples, generator
        self.perm = torch.randperm(num_samples, generator=generator)
        self.pos = 0
        self.epoch = 0

    def next(self, batch: int) -> Tensor:
        out = []
        while batch > 0:
            if self.pos == self.n:
                self.perm, self.pos, self.epoch = torch.randperm(self.n, generator=self.generator), 0, self.epoch + 1
            take = min(batch, self.n - self.pos)
            out.append(self.perm[self.pos:self.pos + take])
            self.pos, batch = self.pos + take, batch - take
        return torch.cat(out)

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "perm": self.perm, "pos": self.pos, "epoch": self.epoch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if int(state["perm"].numel()) != self.n:
            raise ValueError(f"SFT sampler state is for {int(state['perm'].numel())} demo samples, these demos have {self.n}")
        self.generator.set_state(state["generator"])
        self.perm, self.pos, self.epoch = state["perm"], int(state["pos"]), int(state["epoch"])
