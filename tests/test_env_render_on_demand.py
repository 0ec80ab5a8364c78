"""ManiSkill steps whose images nobody reads skip rendering, and nothing a consumer reads changes:
the same episodes, rendered on every step and on demand, give equal observations, final
observations, rewards and flags (real CPU sim, 64 px)."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.envs import ChunkedVectorEnv
from embodied_rl.envs.maniskill import ManiSkillBackend, ManiSkillParams
from embodied_rl.envs.maniskill.sub_env import ManiSkillSubEnv
from embodied_rl.envs.reset_split import seed_split

pytestmark = pytest.mark.maniskill

PUSH = ManiSkillParams(id="PushCube-v1", camera_heights=64, camera_widths=64, reward_mode="normalized_dense",
                       privileged_state=True)


def vector_env(eager: bool) -> ChunkedVectorEnv:
    cfg = EnvConfig(env_type="maniskill", task_description="push the cube", seed=5, init_params=dataclasses.asdict(PUSH),
                    max_episode_steps=6, auto_reset=True, ignore_terminations=False)
    backend = ManiSkillBackend(cfg, PUSH, 2, seed=0)
    if eager:
        backend.pool.renders_on_demand = False  # render every step, as a simulator without the feature does
    return ChunkedVectorEnv(backend, cfg, reset_id_space=seed_split("train"))


def assert_same_obs(a, b) -> None:
    for field in ("main_images", "states", "privileged_states"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)


def test_chunks_give_the_same_results_rendered_on_demand_and_on_every_step():
    lazy, eager = vector_env(eager=False), vector_env(eager=True)
    try:
        assert lazy.backend.renders_on_demand and not eager.backend.renders_on_demand
        assert_same_obs(lazy.reset(), eager.reset())
        rng = np.random.default_rng(0)
        ended = 0
        for _ in range(5):  # 6-step episodes in 4-step chunks: episodes end inside chunks and restart
            chunk = rng.uniform(-1, 1, (2, 4, 7)).astype(np.float32)
            a, b = lazy.chunk_step(chunk), eager.chunk_step(chunk)
            assert_same_obs(a.obs, b.obs)
            assert (a.final_obs is None) == (b.final_obs is None)
            if a.final_obs is not None:
                assert_same_obs(a.final_obs, b.final_obs)
                ended += 1
            for field in ("rewards", "terminations", "truncations", "successes", "active_mask"):
                np.testing.assert_array_equal(getattr(a, field), getattr(b, field), err_msg=field)
        assert ended >= 2
    finally:
        lazy.close()
        eager.close()


@pytest.mark.parametrize("params", [
    ManiSkillParams(id="PickCube-v1", camera_heights=64, camera_widths=64, append_goal_to_state=True),
    ManiSkillParams(id="StackCube-v1", camera_heights=64, camera_widths=64, reward_mode="normalized_dense"),
], ids=lambda p: p.id)
def test_a_step_without_images_keeps_the_state_and_reward_and_observe_renders_what_a_step_would(params):
    rendered, lazy = ManiSkillSubEnv(params, "task"), ManiSkillSubEnv(params, "task")
    try:
        for env in (rendered, lazy):
            env.reset(11)
        rng = np.random.default_rng(1)
        for _ in range(5):
            action = rng.uniform(-1, 1, 7).astype(np.float32)
            (full, r1, t1, s1), (part, r2, t2, s2) = rendered.step(action), lazy.step(action, render=False)
            assert "main_image" not in part  # nothing was rendered
            np.testing.assert_array_equal(full["state"], part["state"])
            assert (r1, t1, s1) == (r2, t2, s2)
        seen = lazy.observe()
        assert seen.keys() == full.keys()
        for key in full:
            np.testing.assert_array_equal(full[key], seen[key], err_msg=key)
    finally:
        rendered.close()
        lazy.close()
