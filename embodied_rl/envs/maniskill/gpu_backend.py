"""ManiSkill3 GPU sim: all N sub-envs batched in one process (`sim_backend: gpu`, needs CUDA).

ManiSkill's GPU sim steps every parallel env at once, so sub-envs that are done (auto_reset off)
are stepped with zero actions and their rows keep the last observation.

Resets go one sub-env at a time, so that a sub-env's initial state follows its reset id alone
(see `_reset_seeds`); each call renders every sub-env's observation once, so resetting k
sub-envs costs k batched renders.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs.backend import BackendStep, SimulatorBackend
from embodied_rl.envs.maniskill.backend import instruction_of
from embodied_rl.envs.maniskill.make import (
    camera_names,
    check_goal_state,
    make_gym_env,
    privileged_state,
    proprio_state,
)
from embodied_rl.envs.maniskill.params import ManiSkillParams
from embodied_rl.errors import ConfigError
from embodied_rl.types import EnvObservation


class ManiSkillGPUBackend(SimulatorBackend):
    params_cls: ClassVar[type] = ManiSkillParams

    def __init__(self, cfg: EnvConfig, params: ManiSkillParams, num_envs: int, *, seed: int, env: Any = None) -> None:
        """`env`: the batched ManiSkill env, when the caller built it (a CUDA-less test passes a
        stand-in with the same reset API); None builds it from `params`."""
        import torch

        if env is None and not torch.cuda.is_available():
            raise ConfigError("env.init_params.sim_backend='gpu' needs CUDA, which is not available here; use 'cpu'")
        self.num_envs, self.params = num_envs, params
        self.instruction = instruction_of(cfg, params)
        self.env = make_gym_env(params, num_envs=num_envs) if env is None else env
        self.main_cam, self.wrist_cam = camera_names(self.env, params)
        check_goal_state(self.env, params)
        self._action_dim = int(self.env.action_space.shape[-1])
        self._seeds = np.random.default_rng(seed).integers(0, 2**31 - 1, num_envs).tolist()
        self._obs: EnvObservation | None = None
        self._first_reset = True

    @property
    def action_dim(self) -> int:
        return self._action_dim

    def num_reset_ids(self) -> int | None:
        return None

    def task_of(self, env_index: int) -> tuple[str, str]:
        return self.params.id, self.instruction

    def _convert(self, obs: dict) -> EnvObservation:
        sensors = obs["sensor_data"]
        return EnvObservation(
            main_images=sensors[self.main_cam]["rgb"].cpu().numpy(),
            states=proprio_state(obs, self.params.append_goal_to_state),
            task_descriptions=[self.instruction] * self.num_envs,
            wrist_images=None if self.wrist_cam is None else sensors[self.wrist_cam]["rgb"].cpu().numpy(),
            privileged_states=privileged_state(obs) if self.params.privileged_state else None,
        )

    def reset(self, env_ids: Sequence[int], reset_ids: Sequence[int]) -> EnvObservation:
        import torch

        ids = [int(i) for i in env_ids]
        for i, rid in zip(ids, reset_ids):
            self._seeds[i] = int(rid)
        if self._first_reset and len(ids) != self.num_envs:
            raise RuntimeError("the first reset of the ManiSkill GPU sim must reset all sub-envs")
        obs: dict = {}
        for i in ids:
            env_idx = torch.tensor([i], device=self.env.unwrapped.device)
            obs, _ = self.env.reset(seed=self._reset_seeds(i), options={"env_idx": env_idx})
        self._first_reset = False
        full = self._convert(obs)  # the last call's observation holds every reset sub-env's row
        if self._obs is None:
            self._obs = full
        else:
            self._obs.set_rows(ids, full.rows(ids))
        return full.rows(ids)

    def _reset_seeds(self, env_index: int) -> list[int]:
        """The seed list of a reset of sub-env `env_index` alone: every sub-env's own seed, with
        the reset one's also first. ManiSkill 3.0 seeds a reset's torch draws and `_episode_rng`
        from the list's first entry whatever `env_idx` holds, and a batched draw hands rows out
        by position; a reset of one sub-env with its seed first draws what its seed alone gives,
        seeded as the CPU sim's `reset(seed=id)` is. Only that sub-env is re-initialised; the
        list also re-seeds the per-env numpy RNGs, which tasks read only while initialising."""
        seeds = list(self._seeds)
        seeds[0] = seeds[env_index]
        return seeds

    def step(self, actions: np.ndarray, env_ids: Sequence[int] | None = None, render: bool = True) -> BackendStep:
        import torch

        # render is not honoured: the batched GPU renderer is cheap next to the policy
        active = np.ones(self.num_envs, bool) if env_ids is None else np.isin(np.arange(self.num_envs), env_ids)
        act = torch.as_tensor(np.where(active[:, None], actions, 0.0), dtype=torch.float32, device=self.env.unwrapped.device)
        obs, reward, terminated, _trunc, info = self.env.step(act)
        new = self._convert(obs)
        assert self._obs is not None, "step before reset"
        self._obs.set_rows(np.flatnonzero(active), new.rows(active))
        success = info["success"].cpu().numpy().astype(bool) if "success" in info else np.zeros(self.num_envs, bool)
        return BackendStep(
            obs=self._obs.copy(),
            rewards=np.where(active, reward.cpu().numpy().astype(np.float32), 0.0).astype(np.float32),
            terminated=terminated.cpu().numpy().astype(bool) & active,
            success=success & active,
            failed=np.zeros(self.num_envs, bool),
        )

    def close(self) -> None:
        self.env.close()
