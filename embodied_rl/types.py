"""Data types several layers share: what an env reports (observations, step results, episode
summaries) and the per-episode outcome the runner pairs across evaluations. Plain numpy, so
that they can live in shared memory; no import of any embodied_rl layer.

Shapes use N = number of sub-envs, C = num_action_chunks, H/W = camera size, D = state dim.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np


@dataclass
class EnvObservation:
    """One observation of all N sub-envs.

    main_images:       uint8 [N, H, W, 3], third-person camera, upright.
    wrist_images:      uint8 [N, H, W, 3] or None when the task has no wrist camera.
    states:            float32 [N, D] proprioception (simulator-specific layout, see env docs).
    task_descriptions: N natural-language instructions (the policy prompt).
    privileged_states: float32 [N, P] or None: simulator state the policy must not see (object
                       and goal poses), then the episode clock (elapsed steps / max_episode_steps)
                       as the last column; only an asymmetric critic reads it.
    """

    main_images: np.ndarray
    states: np.ndarray
    task_descriptions: list[str]
    wrist_images: np.ndarray | None = None
    privileged_states: np.ndarray | None = None

    @property
    def num_envs(self) -> int:
        return int(self.main_images.shape[0])

    @classmethod
    def concat(cls, parts: Sequence[EnvObservation]) -> EnvObservation:
        """Join observations along N, in the given order."""
        wrist = None if parts[0].wrist_images is None else np.concatenate([p.wrist_images for p in parts])
        privileged = None if parts[0].privileged_states is None else np.concatenate([p.privileged_states for p in parts])
        return cls(main_images=np.concatenate([p.main_images for p in parts]),
                   states=np.concatenate([p.states for p in parts]),
                   task_descriptions=[d for p in parts for d in p.task_descriptions], wrist_images=wrist,
                   privileged_states=privileged)

    def rows(self, index: np.ndarray | Sequence[int]) -> EnvObservation:
        """The sub-envs `index` (integer indices or a bool mask over N), as new arrays."""
        index = np.asarray(index)
        picked = np.flatnonzero(index) if index.dtype == bool else index
        return EnvObservation(main_images=self.main_images[picked], states=self.states[picked],
                              task_descriptions=[self.task_descriptions[int(i)] for i in picked],
                              wrist_images=None if self.wrist_images is None else self.wrist_images[picked],
                              privileged_states=None if self.privileged_states is None else self.privileged_states[picked])

    def copy(self) -> EnvObservation:
        return self.rows(np.arange(self.num_envs))

    def set_rows(self, rows: np.ndarray | Sequence[int], src: EnvObservation) -> None:
        """self[rows] = src in place (src holds exactly those rows, in order)."""
        rows = np.asarray(rows)
        self.main_images[rows] = src.main_images
        self.states[rows] = src.states
        if self.wrist_images is not None and src.wrist_images is not None:
            self.wrist_images[rows] = src.wrist_images
        if self.privileged_states is not None and src.privileged_states is not None:
            self.privileged_states[rows] = src.privileged_states
        for k, r in enumerate(rows):
            self.task_descriptions[int(r)] = src.task_descriptions[k]


@dataclass
class EpisodeSummary:
    """Metrics of one finished episode (emitted when it ends inside a chunk step)."""

    env_index: int
    task_id: str
    instruction: str
    reset_id: int
    episode_return: float
    episode_len: int
    success_once: bool
    success_at_end: bool
    failed: bool = False  # the sub-env crashed or hung and was restarted; counts as a failure


@dataclass
class ChunkStepResult:
    """What `chunk_step` returns after executing C actions in each of N sub-envs.

    obs:            observation after the chunk (already the new episode's first
                    observation for sub-envs that auto-reset inside the chunk).
    rewards:        float32 [N, C] per-step rewards (zero after an episode end inside the chunk
                    when auto_reset is off); chunk_level reward = rewards.sum(-1).
    terminations:   bool [N, C] per-step termination flags.
    truncations:    bool [N, C] per-step truncation flags.
    successes:      bool [N, C] per-step success flags.
    final_obs:      observation at the end of the finished episode for sub-envs that
                    auto-reset in this chunk (rows of other envs repeat `obs`); None if none did.
                    Used to bootstrap truncated episodes from V(final_obs).
    done_mask:      bool [N] any episode end (termination or truncation) inside the chunk.
    episodes:       summaries of episodes that ended in this chunk.
    active_mask:    bool [N, C] the sub-env was inside an episode at that step (False after an
                    episode end when auto_reset is off): the loss mask of the step.
    """

    obs: EnvObservation
    rewards: np.ndarray
    terminations: np.ndarray
    truncations: np.ndarray
    successes: np.ndarray
    final_obs: EnvObservation | None = None
    done_mask: np.ndarray | None = None
    episodes: list[EpisodeSummary] = field(default_factory=list)
    active_mask: np.ndarray | None = None

    @property
    def chunk_rewards(self) -> np.ndarray:
        """float32 [N] sum of the chunk's step rewards."""
        return self.rewards.sum(axis=-1)


@dataclass(frozen=True)
class EpisodeOutcome:
    """One finished episode of a rollout epoch, as an env worker reports it to the runner.

    sub_env: the run-wide sub-env index, (env rank * stages + stage) * sub-envs per stage +
    index in the stage: with the same config (placement, env.<mode>.total_num_envs) the same
    sub-env of another evaluation starts from the same reset id under use_fixed_reset_state_ids.
    episode: the episode's index on its sub-env within the epoch (0 unless auto_reset).
    """

    sub_env: int
    episode: int
    reset_id: int
    task_id: str
    success_once: bool
    success_at_end: bool
    episode_return: float
    episode_len: int
    failed: bool = False
