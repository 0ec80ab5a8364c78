"""Reset ids fix initial states under the ManiSkill GPU sim (`sim_backend: gpu`), shown on the CPU.

The GPU sim needs CUDA, so `BatchedTask` stands in for it: ManiSkill 3.0's own `BaseEnv.reset`
and RNG seeding code (the part that decides what a reset draws) run unchanged on an object that
replaces the physics with a table of initial states and draws them like ManiSkill's tasks do
(PushCube: `torch.rand` over the reset batch; PegInsertionSide: the per-env numpy RNGs).
`ManiSkillGPUBackend.reset` drives it exactly as it drives the real batched env.
"""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs.maniskill.gpu_backend import ManiSkillGPUBackend
from embodied_rl.envs.maniskill.params import ManiSkillParams

BaseEnv = pytest.importorskip("mani_skill.envs.sapien_env").BaseEnv

N = 4
PARAMS = ManiSkillParams(id="PushCube-v1", sim_backend="gpu", camera_heights=8, camera_widths=8)


class BatchedTask:
    """N batched sub-envs whose initial state is a 3-vector: two `torch.rand` values drawn for
    the reset batch at once and one from each sub-env's numpy episode RNG. Records every reset."""

    # ManiSkill's reset and seeding, run as they are
    reset = BaseEnv.reset
    _set_main_rng = BaseEnv._set_main_rng
    _set_episode_rng = BaseEnv._set_episode_rng
    _batched_rng_backend = BaseEnv._batched_rng_backend

    def __init__(self, num_envs: int) -> None:
        self.num_envs, self.device = num_envs, torch.device("cpu")
        self.unwrapped = self
        self.reconfiguration_freq, self._reconfig_counter, self._enhanced_determinism = 0, 0, False
        self._main_seed = self._batched_episode_rng = self._episode_seed = None
        self.scene = SimpleNamespace(_reset_mask=None)
        self.agent, self.gpu_sim_enabled = None, False
        self._elapsed_steps = torch.zeros(num_envs, dtype=torch.int32)
        self._sensors = {"base_camera": None}
        self.action_space = SimpleNamespace(shape=(num_envs, 7))
        self.state = torch.zeros(num_envs, 3)
        self.calls: list[tuple[list[int], list[int]]] = []  # (seed list, env_idx) of each reset
        BaseEnv.reset(self, seed=[2022 + i for i in range(num_envs)])  # what gym.make does

    def _clear_sim_state(self) -> None:
        pass

    def _initialize_episode(self, env_idx: torch.Tensor, options: dict) -> None:
        xy = torch.rand((len(env_idx), 2))
        z = torch.as_tensor(self._batched_episode_rng[env_idx].uniform(0.0, 1.0), dtype=torch.float32)
        self.state[env_idx] = torch.cat([xy, z[:, None]], dim=1)

    def get_info(self) -> dict:
        return {}

    def get_obs(self, info: dict) -> dict[str, Any]:
        # the state shows in the image and in the TCP position, so rows can be compared
        rgb = (self.state * 255).to(torch.uint8)[:, None, None, :].expand(self.num_envs, 8, 8, 3).clone()
        tcp = torch.cat([self.state, torch.zeros(self.num_envs, 4)], dim=1)
        return {"sensor_data": {"base_camera": {"rgb": rgb}}, "agent": {"qpos": torch.zeros(self.num_envs, 9)},
                "extra": {"tcp_pose": tcp}}

    def step(self, action: torch.Tensor) -> tuple[dict, torch.Tensor, torch.Tensor, torch.Tensor, dict]:
        done = torch.zeros(self.num_envs, dtype=torch.bool)
        return self.get_obs({}), torch.zeros(self.num_envs), done, done, {}

    def record(self, seed: list[int] | None, options: dict | None) -> tuple[dict, dict]:
        idx = (options or {}).get("env_idx", torch.arange(self.num_envs))
        self.calls.append((list(seed or []), [int(i) for i in idx]))
        return BaseEnv.reset(self, seed=seed, options=options)

    def close(self) -> None:
        pass


class RecordingTask(BatchedTask):
    def reset(self, seed: list[int] | None = None, options: dict | None = None) -> tuple[dict, dict]:
        return self.record(seed, options)


def backend() -> tuple[ManiSkillGPUBackend, RecordingTask]:
    task = RecordingTask(N)
    cfg = EnvConfig(env_type="maniskill", task_description="push the cube", init_params=dataclasses.asdict(PARAMS))
    return ManiSkillGPUBackend(cfg, PARAMS, N, seed=0, env=task), task


def test_maniskill_draws_a_batched_partial_reset_from_the_first_sub_envs_seed() -> None:
    """Why the backend resets one sub-env at a time: with one batched call, the state sub-env 3
    gets for seed 9 changes with sub-env 0's seed and with who resets beside it."""
    states = []
    for first_seed, ids in ((100, [1, 3]), (200, [1, 3]), (100, [3])):
        task = BatchedTask(N)
        task.reset(seed=[first_seed, 7, 50, 9], options={"env_idx": torch.tensor(ids)})
        states.append(task.state[3].clone())
    assert not torch.equal(states[0], states[1]) and not torch.equal(states[0], states[2])


def test_each_reset_sub_env_starts_from_the_state_of_its_own_reset_id() -> None:
    gpu, task = backend()
    first = gpu.reset(range(N), [11, 12, 13, 14])
    assert [c[1] for c in task.calls] == [[0], [1], [2], [3]]
    for (seeds, (i,)), rid in zip(task.calls, [11, 12, 13, 14]):
        assert seeds[0] == seeds[i] == rid  # the seed ManiSkill draws from is the sub-env's own
    np.testing.assert_allclose(first.states[:, :3], task.state.numpy())
    before = task.state.clone()

    task.calls.clear()
    part = gpu.reset([1, 3], [7, 9])
    # one call per reset sub-env, its reset id first and at its own place; sub-env 2 keeps its seed
    assert task.calls == [([7, 7, 13, 9], [1]), ([9, 7, 13, 9], [3])]
    # the others are not re-initialised: their states and observation rows stay
    assert torch.equal(task.state[[0, 2]], before[[0, 2]])
    assert part.states.shape[0] == 2
    np.testing.assert_allclose(part.states[:, :3], task.state[[1, 3]].numpy())
    step = gpu.step(np.zeros((N, 7), np.float32), env_ids=[])  # steps nobody: the backend's rows as they are
    np.testing.assert_allclose(step.obs.states[:, :3], task.state.numpy())

    # a sub-env's state follows its reset id alone: not sub-env 0's seed, not who resets with it,
    # not its position; each reset id gives what a one-env reset with that seed gives
    alone = BatchedTask(1)
    for rid, i in ((7, 1), (9, 3)):
        alone.reset(seed=[rid])
        assert torch.equal(task.state[i], alone.state[0]), (rid, i)
    other, other_task = backend()
    other.reset(range(N), [99, 9, 98, 97])
    assert torch.equal(other_task.state[1], task.state[3])
    other.reset([2], [7])
    assert torch.equal(other_task.state[2], task.state[1])


def test_the_first_reset_must_cover_every_sub_env() -> None:
    gpu, _ = backend()
    with pytest.raises(RuntimeError, match="must reset all sub-envs"):
        gpu.reset([0, 1], [1, 2])
