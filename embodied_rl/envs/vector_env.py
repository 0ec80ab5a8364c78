"""`ChunkedVectorEnv`: the episode semantics shared by every simulator (RLinf's env keys).

Choices (documented in docs/CONFIG.md as well):
- An episode end inside a chunk: the sub-env is not stepped for the rest of the chunk (those
  actions were computed for the finished episode), pays zero reward and has `active_mask` False
  there. With `auto_reset` it is reset at the chunk boundary: `obs` holds the new episode's first
  observation (what the next chunk is computed from) and `final_obs` the terminal one (for
  bootstrapping). So every chunk's actions act on the episode they were computed for, and the
  loss masks of embodied_rl.algorithms (steps after an end inside a chunk) match what ran.
  Without `auto_reset` the sub-env stays done until the next `reset()`.
- Termination/truncation flags are set at the step where the episode ended (not folded onto the
  chunk's last index); `done_mask` says whether any step of the chunk ended an episode.
- Reset ids: episode k (counted from the last `reset()`) of group g in rollout epoch e (the
  number of `reset()` calls) uses the id at the index drawn by `default_rng([seed, e, g, k])`
  among the ids of `reset_id_split` (envs/reset_split.py: train and eval disjoint), g counted over
  all sub-envs of the run (env worker/stage `seed_offset` holds sub-envs seed_offset*N .. +N-1):
  reproducible across runs, independent of the order in which sub-envs finish and of how the
  sub-envs are split over workers and stages (2 or 64 cores draw the same states). A group is
  `group_size` consecutive sub-envs; its members always share ids (GRPO compares them). With
  `use_fixed_reset_state_ids` every epoch draws as epoch 0, so each rollout epoch (or
  evaluation) starts from the same states; without, every epoch starts from fresh ones.
  `reset(repeat=True)` starts the previous epoch over (same ids, same draws for auto-resets,
  the stream does not advance): the second scoring of an evaluation replays the first's states.
- `use_rel_reward` pays r_t - r_{t-1} within an episode (r_{-1} = 0), after `reward_coef`.
- A sub-env whose process crashed or hung ends its episode as a failure (terminated, not a
  success, `EpisodeSummary.failed`).
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs.action_adapter import ActionAdapter
from embodied_rl.envs.backend import SimulatorBackend
from embodied_rl.envs.metrics import episode_metrics
from embodied_rl.errors import ConfigError
from embodied_rl.types import ChunkStepResult, EnvObservation, EpisodeSummary

# use_fixed_reset_state_ids: every epoch draws the ids of the first one.
FIXED_EPOCH = 0


class ChunkedVectorEnv:
    """N sub-envs of one backend stepped in action chunks [N, C, A] (policy action space)."""

    def __init__(self, backend: SimulatorBackend, cfg: EnvConfig, *, reset_id_space: Sequence[int],
                 seed_offset: int = 0, recorder=None, groups: np.ndarray | None = None) -> None:
        n = backend.num_envs
        self.validate(cfg, n)
        if len(reset_id_space) == 0:
            raise ConfigError(f"env: reset_id_split={cfg.reset_id_split} has no initial states for these tasks")
        self.backend, self.cfg, self.num_envs = backend, cfg, n
        self.reset_id_space = reset_id_space  # the ids of cfg.reset_id_split (envs/reset_split.py)
        self.used_reset_ids: set[int] = set()  # every id an episode started from (the run records them)
        self.seed_offset = seed_offset
        self.adapter = ActionAdapter(cfg.action_adapter, backend.action_dim)
        self.recorder = recorder
        # run-wide group of each sub-env: by default this stage's place in the run (seed_offset);
        # a mixture passes each task's own numbering (envs/mixture.py)
        self._group = (np.arange(n) // cfg.group_size + (seed_offset * n) // cfg.group_size if groups is None
                       else np.asarray(groups, np.int64))
        if self._group.shape != (n,):
            raise ValueError(f"groups: expected one run-wide group per sub-env ({n}), got shape {self._group.shape}")
        self._epoch = -1
        self._fixed_epoch = FIXED_EPOCH
        self._explicit_ids: np.ndarray | None = None
        self._epoch_ids: np.ndarray | None = None  # the ids of the last reset(), for reset(repeat=True)
        self.reset_ids = np.zeros(n, np.int64)
        self._episode_k = np.zeros(n, np.int64)  # episode index since the last reset()
        self._elapsed = np.zeros(n, np.int64)
        self._return = np.zeros(n, np.float64)
        self._prev_reward = np.zeros(n, np.float32)
        self._success_once = np.zeros(n, bool)
        self._success_now = np.zeros(n, bool)
        self._active = np.zeros(n, bool)
        self._obs: EnvObservation | None = None
        self._finished: list[EpisodeSummary] = []

    @staticmethod
    def validate(cfg: EnvConfig, n: int | None, key: str = "env") -> None:
        """The episode keys, and with `n` their fit to an env worker stage of `n` sub-envs.

        The config checks call this before any simulator starts (`key` = env.train / env.eval)."""
        if cfg.max_episode_steps < 1:
            raise ConfigError(f"{key}.max_episode_steps: must be >= 1, got {cfg.max_episode_steps}")
        if cfg.group_size < 1:
            raise ConfigError(f"{key}.group_size: must be >= 1, got {cfg.group_size}")
        if not math.isfinite(cfg.reward_coef):
            raise ConfigError(f"{key}.reward_coef: must be a finite number, got {cfg.reward_coef}")
        if n is not None and n % cfg.group_size:
            raise ConfigError(
                f"{key}.group_size={cfg.group_size} must divide the {n} sub-envs of each stage of an env worker; "
                f"set {key}.total_num_envs: null to derive a count that fits"
            )

    # ------------------------------------------------------------------ reset ids
    def draw_reset_id(self, env_index: int, episode_k: int) -> int:
        """Reset id of episode `episode_k` of this sub-env's group in the current epoch."""
        epoch = self._fixed_epoch if self.cfg.use_fixed_reset_state_ids else self._epoch
        rng = np.random.default_rng([self.cfg.seed, epoch, int(self._group[env_index]), episode_k])
        return int(self.reset_id_space[int(rng.integers(0, len(self.reset_id_space)))])

    def set_reset_ids(self, ids: Sequence[int] | None) -> None:
        """Use these reset ids (one per sub-env) at every following `reset()` (None: draw again).

        For evaluation on fixed, reproducible states; auto-resets still draw from the stream.
        """
        if ids is None:
            self._explicit_ids = None
            return
        arr = np.asarray(ids, dtype=np.int64)
        if arr.shape != (self.num_envs,):
            raise ValueError(f"set_reset_ids: expected {self.num_envs} ids, got shape {arr.shape}")
        outside = [int(i) for i in arr if int(i) not in self.reset_id_space]
        if outside:
            raise ValueError(f"set_reset_ids: ids {outside} are not in the {self.cfg.reset_id_split!r} split of reset ids")
        self._explicit_ids = arr

    @property
    def epoch(self) -> int:
        """Index of the current rollout epoch (reset() calls - 1); part of the reset ids' seed unless they are fixed."""
        return self._epoch

    @epoch.setter
    def epoch(self, value: int) -> None:  # resume: continue the reset-id stream where it stopped
        self._epoch = int(value)

    def finite_reset_id_space(self) -> list[int] | None:
        """The reset ids drawn from where the initial states are a finite set (LIBERO); None
        where they are seeds (ManiSkill)."""
        return None if self.backend.num_reset_ids() is None else list(self.reset_id_space)

    # ------------------------------------------------------------------ episodes
    def reset(self, fixed_epoch: int = FIXED_EPOCH, *, repeat: bool = False) -> EnvObservation:
        """Start a new rollout epoch: every sub-env begins a fresh episode.

        fixed_epoch: with use_fixed_reset_state_ids, the epoch the ids are drawn as: the k-th
        rollout epoch of every evaluation passes k, so an evaluation of several epochs covers
        distinct states and every evaluation covers the same ones.
        repeat: start the previous epoch over instead: its ids, and (the epoch not advancing)
        the same draws for auto-reset episodes (another scoring of the same states)."""
        if repeat and self._epoch_ids is None:
            raise RuntimeError("reset(repeat=True) before any reset(): there is no epoch to repeat")
        if not repeat:
            self._epoch += 1
            self._fixed_epoch = fixed_epoch
        self._episode_k[:] = 0
        if repeat:
            ids = self._epoch_ids.copy()
        elif self._explicit_ids is not None:
            ids = self._explicit_ids.copy()
        else:
            ids = np.array([self.draw_reset_id(i, 0) for i in range(self.num_envs)], np.int64)
        self._epoch_ids = ids.copy()
        all_ids = np.arange(self.num_envs)
        self._obs = self.backend.reset(all_ids, ids)
        self._start_episodes(all_ids, ids)
        self._active[:] = True
        if self.recorder is not None and self.recorder.recording:
            self.recorder.add_frame(self._obs, np.zeros(self.num_envs, np.float32), self._success_now, self._elapsed)
        return self._clocked(self._obs, self._elapsed)

    def _start_episodes(self, env_ids: np.ndarray, ids: np.ndarray) -> None:
        self.reset_ids[env_ids] = ids
        self.used_reset_ids.update(int(i) for i in ids)
        self._elapsed[env_ids] = 0
        self._return[env_ids] = 0.0
        self._prev_reward[env_ids] = 0.0
        self._success_once[env_ids] = False
        self._success_now[env_ids] = False
        if self.recorder is not None and self.recorder.recording:
            for i in env_ids:
                task_id, instruction = self.backend.task_of(int(i))
                self.recorder.episode_start(int(i), task_id, instruction, int(self.reset_ids[i]))

    def _summary(self, i: int, failed: bool) -> EpisodeSummary:
        task_id, instruction = self.backend.task_of(i)
        return EpisodeSummary(
            env_index=i, task_id=task_id, instruction=instruction, reset_id=int(self.reset_ids[i]),
            episode_return=float(self._return[i]), episode_len=int(self._elapsed[i]),
            success_once=bool(self._success_once[i]), success_at_end=bool(self._success_now[i]) and not failed,
            failed=failed,
        )

    def chunk_step(self, actions: np.ndarray) -> ChunkStepResult:
        """Execute actions float32 [N, C, A] (policy space); see the module docstring for semantics."""
        if self._obs is None:
            raise RuntimeError("chunk_step before reset()")
        n = self.num_envs
        if actions.ndim != 3 or actions.shape[0] != n:
            raise ValueError(f"chunk_step: actions must be [N={n}, C, A], got {actions.shape}")
        c = actions.shape[1]
        cfg = self.cfg
        ctrl = self.adapter(actions)
        rewards = np.zeros((n, c), np.float32)
        terms, truncs, succs, active_mask = (np.zeros((n, c), bool) for _ in range(4))
        final_rows: dict[int, tuple] = {}
        episodes: list[EpisodeSummary] = []
        obs = self._obs
        # Images are read at the chunk's end (the policy's next input), where an episode ends
        # (its final observation) and in every frame of a video: other steps need not render.
        recording = self.recorder is not None and self.recorder.recording
        lazy = self.backend.renders_on_demand and not recording
        for t in range(c):
            act = self._active.copy()
            if not act.any():
                break
            render = not lazy or t == c - 1
            step = self.backend.step(ctrl[:, t], None if act.all() else np.flatnonzero(act), render=render)
            obs = step.obs
            active_mask[:, t] = act
            r = step.rewards * np.float32(cfg.reward_coef)
            paid = r - self._prev_reward if cfg.use_rel_reward else r
            paid = np.where(act, paid, np.float32(0.0)).astype(np.float32)
            self._prev_reward = np.where(act, r, self._prev_reward).astype(np.float32)
            self._elapsed += act
            self._return += paid
            succ = step.success & act
            self._success_once |= succ
            self._success_now = np.where(act, succ, self._success_now)
            failed = act & step.failed if step.failed is not None else np.zeros(n, bool)
            term = failed | (act & step.terminated & (not cfg.ignore_terminations))
            trunc = act & ~term & (self._elapsed >= cfg.max_episode_steps)
            rewards[:, t], terms[:, t], truncs[:, t], succs[:, t] = paid, term, trunc, succ
            if self.recorder is not None and self.recorder.recording:
                self.recorder.add_frame(obs, paid, self._success_once, self._elapsed)
            done = np.flatnonzero(term | trunc)
            if done.size == 0:
                continue
            if not render:
                obs.set_rows(done, self.backend.observe(done))
            for i in done:
                summary = self._summary(int(i), bool(failed[i]))
                episodes.append(summary)
                if self.recorder is not None and self.recorder.recording:
                    self.recorder.episode_end(summary)
            self._active[done] = False
            if cfg.auto_reset:
                for i in done:
                    final_rows[int(i)] = (
                        obs.main_images[i].copy(), obs.states[i].copy(),
                        None if obs.wrist_images is None else obs.wrist_images[i].copy(),
                        None if obs.privileged_states is None else obs.privileged_states[i].copy(), int(self._elapsed[i]),
                    )
        if final_rows:  # auto_reset: new episodes start at the chunk boundary
            ended = np.array(sorted(final_rows), np.int64)
            self._episode_k[ended] += 1
            ids = np.array([self.draw_reset_id(int(i), int(self._episode_k[i])) for i in ended], np.int64)
            obs.set_rows(ended, self.backend.reset(ended, ids))
            self._start_episodes(ended, ids)
            self._active[ended] = True
            if self.recorder is not None and self.recorder.recording:  # the new episodes' first frame
                self.recorder.add_frame(obs, np.zeros(n, np.float32), self._success_now, self._elapsed)
        self._obs = obs
        self._finished.extend(episodes)
        return ChunkStepResult(
            obs=self._clocked(obs, self._elapsed), rewards=rewards, terminations=terms, truncations=truncs, successes=succs,
            final_obs=self._final_obs(obs, final_rows), done_mask=(terms | truncs).any(axis=1),
            episodes=episodes, active_mask=active_mask,
        )

    def _final_obs(self, obs: EnvObservation, rows: dict[int, tuple]) -> EnvObservation | None:
        if not rows:
            return None
        final, elapsed = obs.copy(), self._elapsed.copy()
        for i, (main, state, wrist, privileged, steps) in rows.items():
            final.main_images[i], final.states[i], elapsed[i] = main, state, steps
            if wrist is not None and final.wrist_images is not None:
                final.wrist_images[i] = wrist
            if privileged is not None and final.privileged_states is not None:
                final.privileged_states[i] = privileged
        return self._clocked(final, elapsed)

    def _clocked(self, obs: EnvObservation, elapsed: np.ndarray) -> EnvObservation:
        """obs with the episode clock (elapsed steps / max_episode_steps) appended to its
        privileged state: where the time limit ends the task, the return still to come depends
        on the time left, which no image shows."""
        if obs.privileged_states is None:
            return obs
        clock = (elapsed / self.cfg.max_episode_steps).astype(np.float32)[:, None]
        return dataclasses.replace(obs, privileged_states=np.concatenate([obs.privileged_states, clock], axis=1))

    # ------------------------------------------------------------------ metrics, video, close
    @property
    def active(self) -> np.ndarray:
        """bool [N]: sub-envs currently inside an episode."""
        return self._active.copy()

    def pop_episodes(self) -> list[EpisodeSummary]:
        """The episodes finished since the last pop_episodes/pop_metrics, in the order they ended."""
        eps, self._finished = self._finished, []
        return eps

    def pop_metrics(self) -> dict[str, float]:
        """Means over the episodes finished since the last call, overall and per task (envs/metrics.py)."""
        return episode_metrics(self.pop_episodes())

    def begin_video(self, global_step: int, policy_version: int, mode: str, run_name: str) -> None:
        """Start recording (no-op without `video_cfg.save_video`); call before the epoch's reset()."""
        if self.recorder is None:
            return
        self.recorder.begin(global_step, policy_version, mode, run_name)
        if self._obs is not None:  # episodes already running: they appear from this frame on
            self._start_recording_running()

    def _start_recording_running(self) -> None:
        for i in range(self.num_envs):
            task_id, instruction = self.backend.task_of(i)
            self.recorder.episode_start(i, task_id, instruction, int(self.reset_ids[i]))

    def end_video(self) -> str | None:
        """Finish the video and its JSON sidecar; returns the mp4 path (None when not recording)."""
        if self.recorder is None or not self.recorder.recording:
            return None
        return self.recorder.end()

    def backends(self) -> list[SimulatorBackend]:
        return [self.backend]

    def close(self) -> None:
        if self.recorder is not None:
            self.recorder.close()
        self.backend.close()
