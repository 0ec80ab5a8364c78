"""One ManiSkill3 CPU-sim env as a `SubEnv` (hosted in the subprocess pool)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from embodied_rl.envs.backend import SubEnv
from embodied_rl.envs.maniskill.make import (
    camera_names,
    check_goal_state,
    make_gym_env,
    privileged_state,
    proprio_layout,
    proprio_state,
    refresh_visuals,
)
from embodied_rl.envs.maniskill.params import ManiSkillParams


@contextlib.contextmanager
def _without_cameras(env: Any) -> Iterator[None]:
    """Inside, the env's observation is its state part only: ManiSkill renders the sensors only
    for visual observation modes (get_obs), while the task's extras keep following the mode the
    env was made with (obs_mode_struct), so the state the policy reads is the same."""
    mode = env._obs_mode
    env._obs_mode = "state_dict"
    try:
        yield
    finally:
        env._obs_mode = mode


class ManiSkillSubEnv(SubEnv):
    """Reset ids are ManiSkill reset seeds: `reset(k)` == `env.reset(seed=k)`, fully deterministic.
    Rendering is most of a CPU-sim step (64 px: ~28 ms with the robot's full meshes, ~7 ms
    clustered by `robot_visual_cell`; a control step's physics ~3 ms), so steps whose images
    nobody reads skip it (`renders_on_demand`)."""

    renders_on_demand = True

    def __init__(self, params: ManiSkillParams, instruction: str) -> None:
        self.params = params
        self.instruction = instruction
        self.env = make_gym_env(params, num_envs=1)
        self.main_cam, self.wrist_cam = camera_names(self.env, params)
        check_goal_state(self.env, params)
        self.action_dim = int(self.env.action_space.shape[-1])
        self.state_layout: tuple[str, ...] = ()  # names of the "state" entries, known after the first reset

    def _obs(self, obs: dict) -> dict[str, np.ndarray]:
        out = {"state": proprio_state(obs, self.params.append_goal_to_state)[0]}
        sensors = obs.get("sensor_data")
        if sensors is not None:  # absent after a step that did not render
            out["main_image"] = sensors[self.main_cam]["rgb"][0].cpu().numpy()
            if self.wrist_cam is not None:
                out["wrist_image"] = sensors[self.wrist_cam]["rgb"][0].cpu().numpy()
        if self.params.privileged_state:
            out["privileged_state"] = privileged_state(obs)[0]
        return out

    def reset(self, reset_id: int) -> dict[str, np.ndarray]:
        obs, _ = self.env.reset(seed=int(reset_id))
        if refresh_visuals(self.env, self.params):  # the scene was rebuilt: render it again
            obs = self.env.unwrapped.get_obs()
        self.state_layout = proprio_layout(obs, self.params.append_goal_to_state)
        return self._obs(obs)

    def step(self, action: np.ndarray, render: bool = True) -> tuple[dict[str, np.ndarray], float, bool, bool]:
        # ManiSkill's own time limit is ignored: ChunkedVectorEnv owns max_episode_steps.
        with contextlib.nullcontext() if render else _without_cameras(self.env.unwrapped):
            obs, reward, terminated, _truncated, info = self.env.step(action)
        success = bool(info["success"][0]) if "success" in info else False
        return self._obs(obs), float(reward[0]), bool(terminated[0]), success

    def observe(self) -> dict[str, np.ndarray]:
        return self._obs(self.env.unwrapped.get_obs())

    def task(self) -> tuple[str, str]:
        return self.params.id, self.instruction

    def close(self) -> None:
        self.env.close()


@dataclass(frozen=True)
class ManiSkillSubEnvFactory:
    """Picklable `(rank) -> SubEnv` for the subprocess pool (rank unused: reset ids carry the seed)."""

    params: ManiSkillParams
    instruction: str
    #: imported once by the pool's fork server (subproc_pool): most of a sub-env's import time
    preload: ClassVar[tuple[str, ...]] = ("mani_skill.envs",)

    def __call__(self, rank: int) -> ManiSkillSubEnv:
        return ManiSkillSubEnv(self.params, self.instruction)
