"""`SubprocBackend`: a SimulatorBackend made of one `SubEnv` per process (ManiSkill CPU, LIBERO).

A simulator with one process per sub-env only writes a `SubEnv` and a picklable factory; this
class turns the pool's per-env dicts into batched `EnvObservation`s and `BackendStep`s.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from embodied_rl.envs.backend import BackendStep, SimulatorBackend
from embodied_rl.envs.subproc_pool import PoolOptions, SubEnvFactory, SubprocEnvPool
from embodied_rl.types import EnvObservation


def stack_observations(obs: Sequence[dict[str, np.ndarray]], tasks: Sequence[tuple[str, str]]) -> EnvObservation:
    """Batch SubEnv observation dicts ("main_image", "state", optional "wrist_image" and "privileged_state")."""
    wrist = privileged = None
    if "wrist_image" in obs[0]:
        wrist = np.stack([o["wrist_image"] for o in obs])
    if "privileged_state" in obs[0]:
        privileged = np.stack([o["privileged_state"] for o in obs]).astype(np.float32, copy=False)
    return EnvObservation(
        main_images=np.stack([o["main_image"] for o in obs]),
        states=np.stack([o["state"] for o in obs]).astype(np.float32, copy=False),
        task_descriptions=[t[1] for t in tasks],
        wrist_images=wrist,
        privileged_states=privileged,
    )


class SubprocBackend(SimulatorBackend):
    """N sub-envs in a `SubprocEnvPool`; subclasses set `params_cls` and call this __init__."""

    def __init__(self, factory: SubEnvFactory, num_envs: int, options: PoolOptions | None = None,
                 num_reset_ids: int | None = None, action_dim: int | None = None) -> None:
        self.num_envs = num_envs
        self._num_reset_ids = num_reset_ids
        self.pool = SubprocEnvPool(factory, num_envs, options)
        dim = action_dim if action_dim is not None else self.pool.action_dim
        if dim is None:
            self.pool.close()
            raise TypeError("SubprocBackend: pass action_dim or set SubEnv.action_dim")
        self._action_dim = int(dim)
        self._last: list[dict[str, np.ndarray] | None] = [None] * num_envs

    @property
    def action_dim(self) -> int:
        return self._action_dim

    def num_reset_ids(self) -> int | None:
        return self._num_reset_ids

    def task_of(self, env_index: int) -> tuple[str, str]:
        return self.pool.tasks[env_index]

    def reset(self, env_ids: Sequence[int], reset_ids: Sequence[int]) -> EnvObservation:
        obs, _failed = self.pool.reset(env_ids, reset_ids)  # a failed reset was already rebuilt
        self._remember(env_ids, obs)
        return stack_observations(obs, [self.pool.tasks[int(i)] for i in env_ids])

    @property
    def renders_on_demand(self) -> bool:  # type: ignore[override]
        return self.pool.renders_on_demand

    def step(self, actions: np.ndarray, env_ids: Sequence[int] | None = None, render: bool = True) -> BackendStep:
        if actions.shape != (self.num_envs, self._action_dim):
            raise ValueError(f"step: actions shape {actions.shape}, expected {(self.num_envs, self._action_dim)}")
        n = self.num_envs
        ids = range(n) if env_ids is None else env_ids
        obs, r, term, succ, failed = self.pool.step(actions, ids, render)
        if env_ids is None:
            rewards, terminated, success, fail = r, term, succ, failed
        else:
            rewards, terminated = np.zeros(n, np.float32), np.zeros(n, bool)
            success, fail = np.zeros(n, bool), np.zeros(n, bool)
            idx = np.asarray(list(ids), dtype=np.int64)
            rewards[idx], terminated[idx], success[idx], fail[idx] = r, term, succ, failed
        self._remember(ids, obs)
        if any(o is None for o in self._last):
            raise RuntimeError("step before every sub-env was reset")
        return BackendStep(
            obs=stack_observations(self._last, self.pool.tasks),  # type: ignore[arg-type]
            rewards=rewards, terminated=terminated, success=success, failed=fail,
        )

    def observe(self, env_ids: Sequence[int]) -> EnvObservation:
        obs = self.pool.observe(env_ids)
        self._remember(env_ids, obs)
        return stack_observations(obs, [self.pool.tasks[int(i)] for i in env_ids])

    def _remember(self, env_ids: Sequence[int], obs: Sequence[dict[str, np.ndarray]]) -> None:
        """Keep each sub-env's latest observation; one without images (a step that did not
        render) keeps the images of the last one that had them."""
        for i, o in zip(env_ids, obs):
            last = self._last[int(i)]
            self._last[int(i)] = o if last is None or "main_image" in o else {**last, **o}

    def close(self) -> None:
        self.pool.close()
