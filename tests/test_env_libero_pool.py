"""LIBERO through the shared subprocess pool and ChunkedVectorEnv (at most 2 simulator processes)."""
from __future__ import annotations

import os
import signal
from dataclasses import dataclass

import numpy as np
import pytest

from embodied_rl.config.schema.env import ActionAdapterConfig, EnvConfig, GripperConfig
from embodied_rl.configure import load_config
from embodied_rl.envs import make_env
from embodied_rl.envs.libero.params import LiberoParams
from embodied_rl.envs.libero.sub_env import LiberoSubEnv
from embodied_rl.envs.libero.suites import suite_tasks
from embodied_rl.envs.subproc_backend import SubprocBackend
from embodied_rl.envs.vector_env import ChunkedVectorEnv
from embodied_rl.errors import ConfigError

pytestmark = [pytest.mark.libero, pytest.mark.slow]
# Small, fast pictures (render-only meshes clustered): these tests are about the pool, not pixels.
SMALL = ["env.train.init_params.camera_heights=64", "env.train.init_params.camera_widths=64",
         "env.train.init_params.visual_mesh_cell=0.008", "env.train.init_params.num_steps_wait=2",
         "env.train.video_cfg.save_video=false"]


def _env_cfg(*overrides: str) -> EnvConfig:
    return load_config("libero_grpo_tiny", [*SMALL, *overrides], plan=False).env.train


@pytest.fixture(scope="module")
def vec():
    # libero_goal task 3, a group of 2 sub-envs sharing reset ids (2 LIBERO processes)
    cfg = _env_cfg("env.train=libero_goal", "env.train.init_params.task_ids=[3]", "env.train.max_episode_steps=16")
    env = make_env(cfg, num_envs=2)
    yield env
    env.close()


def _chunk(n: int = 2, c: int = 8) -> np.ndarray:
    a = np.zeros((n, c, 7), np.float32)
    a[..., 2] = 0.3  # move up
    a[..., -1] = -1.0  # gripper open (binarize at 0 -> -1)
    return a


def test_group_shares_the_initial_state_and_steps_a_chunk(vec):
    obs = vec.reset()
    assert vec.reset_ids[0] == vec.reset_ids[1] and 0 <= vec.reset_ids[0] < 50
    assert obs.main_images.shape == (2, 64, 64, 3) and obs.main_images.dtype == np.uint8
    assert obs.wrist_images.shape == (2, 64, 64, 3) and obs.states.shape == (2, 8)
    assert np.array_equal(obs.main_images[0], obs.main_images[1])
    assert np.array_equal(obs.wrist_images[0], obs.wrist_images[1])
    assert np.array_equal(obs.states[0], obs.states[1])
    assert obs.task_descriptions == [suite_tasks("libero_goal")[3].language] * 2
    res = vec.chunk_step(_chunk())
    assert res.rewards.shape == (2, 8) and res.rewards.dtype == np.float32
    assert res.obs.main_images.shape == (2, 64, 64, 3)
    assert not res.successes.any() and not res.done_mask.any()
    assert res.obs.states[0, 2] > obs.states[0, 2]  # the eef went up


def test_different_reset_ids_differ(vec):
    vec.set_reset_ids([0, 1])
    try:
        obs = vec.reset()
    finally:
        vec.set_reset_ids(None)
    assert not np.array_equal(obs.main_images[0], obs.main_images[1])
    assert not np.array_equal(obs.states[0], obs.states[1])


def test_killed_simulator_is_restarted_and_its_episode_fails(vec):
    vec.set_reset_ids([5, 5])
    first = vec.reset()
    pool = vec.backend.pool
    victim = pool.pids()[1]
    restarts = pool.num_restarts
    os.kill(victim, signal.SIGKILL)
    res = vec.chunk_step(_chunk())
    assert pool.num_restarts == restarts + 1 and pool.pids()[1] != victim
    (summary,) = res.episodes
    assert summary.env_index == 1 and summary.failed and not summary.success_once
    assert summary.task_id == "libero_goal_task3" and summary.reset_id == 5
    assert res.terminations[1, 0] and not res.terminations[0].any()
    # the rebuilt simulator reproduces the same initial state
    again = vec.reset()
    vec.set_reset_ids(None)
    assert np.array_equal(again.main_images[1], first.main_images[0])
    assert np.array_equal(again.main_images[0], again.main_images[1])


def test_task_description_is_rejected_for_libero():
    cfg = _env_cfg("env.train.task_description=pick it up")
    with pytest.raises(ConfigError, match="task_description"):
        make_env(cfg, num_envs=2)  # raised before any simulator process starts


# ---------------------------------------------------------------- success path
class BowlOnPlateSubEnv(LiberoSubEnv):
    """libero_spatial task 0 with the bowl placed just above the plate after every reset."""

    def reset(self, reset_id: int):
        obs = super().reset(reset_id)
        inner, sim = self._env.env, self.sim
        joint = inner.get_object("akita_black_bowl_1").joints[0]
        qpos = sim.data.get_joint_qpos(joint).copy()
        qpos[:3] = sim.data.body_xpos[inner.obj_body_id["plate_1"]] + np.array([0.0, 0.0, 0.03])
        sim.data.set_joint_qpos(joint, qpos)
        sim.data.set_joint_qvel(joint, np.zeros(6))
        sim.forward()
        return obs


@dataclass(frozen=True)
class BowlOnPlateFactory:
    params: LiberoParams

    def __call__(self, rank: int) -> BowlOnPlateSubEnv:
        return BowlOnPlateSubEnv(self.params)


@pytest.fixture(scope="module")
def bowl_backend(vec):
    vec.close()  # keep at most two LIBERO processes alive
    params = LiberoParams(task_suite_name="libero_spatial", task_ids=[0], camera_heights=64, camera_widths=64,
                          num_steps_wait=2, visual_mesh_cell=0.008)
    backend = SubprocBackend(BowlOnPlateFactory(params), 1, num_reset_ids=50, action_dim=7)
    yield backend
    backend.close()


@pytest.mark.parametrize("use_rel_reward", [False, True])
def test_success_pays_reward_coef_once_with_rel_reward(bowl_backend, use_rel_reward):
    cfg = EnvConfig(env_type="libero", max_episode_steps=8, reward_coef=5.0, ignore_terminations=True,
                    use_rel_reward=use_rel_reward,
                    action_adapter=ActionAdapterConfig(gripper=GripperConfig(convention="flip_binarize")))
    env = ChunkedVectorEnv(bowl_backend, cfg, reset_id_space=range(50))
    env.set_reset_ids([0])
    env.reset()
    actions = np.zeros((1, 8, 7), np.float32)
    actions[..., -1] = 1.0  # OFT "open" -> flip_binarize -> LIBERO -1 (open)
    res = env.chunk_step(actions)
    succ = res.successes[0]
    assert succ.any()
    k = int(np.argmax(succ))
    assert res.rewards[0, k] == pytest.approx(5.0)
    assert np.all(res.rewards[0, :k] == 0)
    held = res.rewards[0, k + 1:][succ[k + 1:]]
    assert held.size > 0  # the bowl stays on the plate
    assert np.all(held == (0.0 if use_rel_reward else 5.0))
    (summary,) = res.episodes  # truncated at max_episode_steps, ignore_terminations keeps it running
    assert summary.success_once and summary.episode_len == 8
    assert summary.episode_return == pytest.approx(5.0 if use_rel_reward else 5.0 * held.size + 5.0)
