"""Several tasks in one rollout: which sub-env runs which task, and `MixtureVectorEnv`.

A mixture section (`env.<mode>.tasks`) gives each task a share of the run's sub-env groups.
`apportion` fixes the task of every run-wide group from the shares and the group count alone,
so each task's count is within one group of its share at any machine size, and neighbouring
groups (which land on the same env worker stage) cycle through the tasks. A group never mixes
tasks, so GRPO only compares episodes of one task.

`MixtureVectorEnv` is one env worker stage of a mixture: a `ChunkedVectorEnv` per task present
in the stage, each with that task's own episode semantics, reset ids and video, behind the
interface of a single one. Rows keep their run-wide order; a task's groups are numbered within
the task, so its sub-envs draw exactly the reset ids a single-task run of the same task with
that many sub-envs would draw.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs.vector_env import FIXED_EPOCH, ChunkedVectorEnv
from embodied_rl.errors import ConfigError
from embodied_rl.types import ChunkStepResult, EnvObservation, EpisodeSummary


def apportion(shares: Sequence[float], num_groups: int) -> np.ndarray:
    """Task index int64 [num_groups] of each run-wide group.

    Counts are the largest-remainder rounding of num_groups * share / sum(shares) (each within
    one group of its exact share); the order places each next group on the task furthest behind
    its share so far, so any run of consecutive groups is mixed as evenly as the counts allow."""
    w = np.asarray(shares, np.float64)
    if w.ndim != 1 or w.size == 0 or not np.all(w > 0):
        raise ValueError(f"shares must be a non-empty list of positive numbers, got {list(shares)}")
    quota = num_groups * w / w.sum()
    counts = np.floor(quota).astype(np.int64)
    for i in np.argsort(-(quota - counts), kind="stable")[: num_groups - int(counts.sum())]:
        counts[i] += 1
    out, given = np.empty(num_groups, np.int64), np.zeros(w.size, np.int64)
    for g in range(num_groups):
        task = int(np.argmax(counts * (g + 1) / num_groups - given))
        out[g], given[task] = task, given[task] + 1
    return out


def task_counts(shares: Sequence[float], num_groups: int) -> list[int]:
    """Groups per task (apportion's counts)."""
    return np.bincount(apportion(shares, num_groups), minlength=len(shares)).tolist()


class MixtureVectorEnv:
    """One env worker stage of N sub-envs over several tasks, stepped as one `ChunkedVectorEnv`.

    parts: (rows int64 [n_i] of this stage, the task's ChunkedVectorEnv over those rows); the
    rows of all parts partition range(N)."""

    def __init__(self, parts: Sequence[tuple[np.ndarray, ChunkedVectorEnv]], names: Sequence[str]) -> None:
        self.parts, self.names = list(parts), list(names)
        self.num_envs = sum(len(rows) for rows, _ in self.parts)
        stacked = np.concatenate([rows for rows, _ in self.parts])
        if not np.array_equal(np.sort(stacked), np.arange(self.num_envs)):
            raise ValueError("MixtureVectorEnv: the parts' rows must partition the stage's sub-envs")
        self._order = np.argsort(stacked, kind="stable")  # the parts' rows, concatenated -> the stage's order

    # ------------------------------------------------------------------ rows
    def _join(self, obs: Sequence[EnvObservation]) -> EnvObservation:
        return EnvObservation.concat(obs).rows(self._order)

    def _check_shapes(self, obs: Sequence[EnvObservation]) -> None:
        """At each reset (shapes cannot change within an epoch): the tasks' observations must stack."""
        shapes = {(o.main_images.shape[1:], o.states.shape[1:], None if o.privileged_states is None else o.privileged_states.shape[1:],
                   o.wrist_images is None) for o in obs}
        if len(shapes) > 1:
            raise ConfigError(f"env mixture: tasks {', '.join(self.names)} give observations of different shapes "
                              "(image size, cameras, state or privileged-state size); give every task the same")

    def _scatter(self, parts: Sequence[np.ndarray]) -> np.ndarray:
        out = np.empty((self.num_envs, *parts[0].shape[1:]), parts[0].dtype)
        for (rows, _), value in zip(self.parts, parts):
            out[rows] = value
        return out

    def _episodes(self, eps: Sequence[EpisodeSummary], rows: np.ndarray) -> list[EpisodeSummary]:
        for e in eps:
            e.env_index = int(rows[e.env_index])
        return list(eps)

    # ------------------------------------------------------------------ ChunkedVectorEnv's surface
    @property
    def epoch(self) -> int:
        return self.parts[0][1].epoch

    @epoch.setter
    def epoch(self, value: int) -> None:
        for _, env in self.parts:
            env.epoch = value

    def backends(self) -> list:
        """Every task's simulator backend, in task order."""
        return [b for _, env in self.parts for b in env.backends()]

    @property
    def used_reset_ids(self) -> set[int]:
        """Every reset id an episode started from, over all tasks (each id names a state of its own task)."""
        return set().union(*(env.used_reset_ids for _, env in self.parts))

    def finite_reset_id_space(self) -> list[int] | None:
        """None: each task draws its fixed evaluation states from its own stream."""
        return None

    def set_reset_ids(self, ids: Sequence[int] | None) -> None:
        for rows, env in self.parts:
            env.set_reset_ids(None if ids is None else np.asarray(ids)[rows])

    def reset(self, fixed_epoch: int = FIXED_EPOCH, *, repeat: bool = False) -> EnvObservation:
        obs = [env.reset(fixed_epoch, repeat=repeat) for _, env in self.parts]
        self._check_shapes(obs)
        return self._join(obs)

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """Execute actions float32 [N, C, A]: each task's rows in its own env."""
        if actions.ndim != 3 or actions.shape[0] != self.num_envs:
            raise ValueError(f"chunk_step: actions must be [N={self.num_envs}, C, A], got {actions.shape}")
        results = [env.chunk_step(actions[rows]) for rows, env in self.parts]
        obs = self._join([r.obs for r in results])
        final = None
        if any(r.final_obs is not None for r in results):
            final = self._join([r.obs if r.final_obs is None else r.final_obs for r in results])
        return ChunkStepResult(
            obs=obs, rewards=self._scatter([r.rewards for r in results]),
            terminations=self._scatter([r.terminations for r in results]),
            truncations=self._scatter([r.truncations for r in results]),
            successes=self._scatter([r.successes for r in results]), final_obs=final,
            done_mask=self._scatter([r.done_mask for r in results]),
            episodes=[e for (rows, _), r in zip(self.parts, results) for e in self._episodes(r.episodes, rows)],
            active_mask=self._scatter([r.active_mask for r in results]),
        )

    @property
    def active(self) -> np.ndarray:
        return self._scatter([env.active for _, env in self.parts])

    def pop_episodes(self) -> list[EpisodeSummary]:
        """Finished episodes of every task (env_index = the row in this stage). Each task's env
        already renumbered the episodes it returned from chunk_step; pop returns the same objects."""
        return [e for _, env in self.parts for e in env.pop_episodes()]

    def begin_video(self, global_step: int, policy_version: int, mode: str, run_name: str) -> None:
        for _, env in self.parts:
            env.begin_video(global_step, policy_version, mode, run_name)

    def end_video(self) -> list[str | None]:
        return [env.end_video() for _, env in self.parts]

    def close(self) -> None:
        for _, env in self.parts:
            env.close()


def build_mixture(cfg: EnvConfig, num_envs: int, seed_offset: int,
                  make_single: Callable[[EnvConfig, int, np.ndarray, int], ChunkedVectorEnv]) -> MixtureVectorEnv:
    """The stage `seed_offset` (its sub-envs are the run's seed_offset*num_envs .. +num_envs-1) of the
    mixture section `cfg`: `make_single(task config, its sub-envs here, their task-wide groups, task index)`
    builds each task present in the stage."""
    gs = cfg.group_size
    if not cfg.total_num_envs or cfg.total_num_envs % gs or num_envs % gs:
        raise ConfigError(f"env mixture: total_num_envs={cfg.total_num_envs} and the stage's {num_envs} sub-envs must be multiples "
                          f"of group_size={gs}")
    tasks = apportion([t.share for t in cfg.tasks], cfg.total_num_envs // gs)
    # each group's number among its task's groups: what a single-task run would call it
    local = np.empty_like(tasks)
    for t in np.unique(tasks):
        where = np.flatnonzero(tasks == t)
        local[where] = np.arange(where.size)
    first = seed_offset * num_envs // gs
    stage_groups = np.arange(first, first + num_envs // gs)
    row_group = np.repeat(stage_groups, gs)  # group of each row of this stage
    parts, names = [], []
    try:
        for i, task in enumerate(cfg.tasks):
            rows = np.flatnonzero(tasks[row_group] == i)
            if rows.size:
                parts.append((rows, make_single(task, int(rows.size), local[row_group[rows]], i)))
                names.append(f"tasks[{i}] ({task.config or task.env_type})")
        return MixtureVectorEnv(parts, names)
    except BaseException:
        for _, env in parts:
            env.close()
        raise
