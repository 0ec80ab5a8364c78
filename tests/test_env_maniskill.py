"""Episode semantics and the subprocess pool on real ManiSkill3 (CPU sim, software Vulkan, 64 px).

One pool of 2 PickCube sub-envs is shared by the module; every test wraps it in its own
`ChunkedVectorEnv` (the episode semantics live there, not in the backend).
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal

import numpy as np
import pytest

from embodied_rl.config.schema.env import EnvConfig, SubprocConfig
from embodied_rl.envs import ChunkedVectorEnv, make_env
from embodied_rl.envs.maniskill import (
    ManiSkillBackend,
    ManiSkillParams,
    MissingAssetError,
)
from embodied_rl.envs.reset_split import seed_split

pytestmark = pytest.mark.maniskill

N = 2
PARAMS = ManiSkillParams(id="PickCube-v1", camera_heights=64, camera_widths=64, reward_mode="dense")


def env_cfg(**kw) -> EnvConfig:
    base = {"env_type": "maniskill", "task_description": "pick up the red cube", "seed": 3,
                "init_params": dataclasses.asdict(PARAMS)}
    base.update(kw)
    return EnvConfig(**base)


class PoolHolder:
    """The module's one ManiSkill backend, rebuildable (to compare separately created envs)."""

    def __init__(self) -> None:
        self._backend = None

    @property
    def backend(self):
        if self._backend is None:
            self._backend = ManiSkillBackend(env_cfg(), PARAMS, N, seed=0)
        return self._backend

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
            self._backend = None


@pytest.fixture(scope="module")
def holder():
    h = PoolHolder()
    yield h
    h.close()


def vec(holder, **kw) -> ChunkedVectorEnv:
    return ChunkedVectorEnv(holder.backend, env_cfg(**kw), reset_id_space=seed_split("train"))


def random_chunk(c: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (N, c, 7)).astype(np.float32)


def test_observation_shapes_and_dtypes(holder):
    env = vec(holder)
    obs = env.reset()
    assert obs.main_images.shape == (N, 64, 64, 3) and obs.main_images.dtype == np.uint8
    assert obs.wrist_images is None  # PickCube's panda has no hand camera
    assert obs.states.shape == (N, 9) and obs.states.dtype == np.float32  # tcp pose + 2 finger joints
    assert obs.task_descriptions == ["pick up the red cube"] * N
    res = env.chunk_step(random_chunk(3))
    assert res.rewards.shape == (N, 3) and res.rewards.dtype == np.float32
    for flags in (res.terminations, res.truncations, res.successes, res.active_mask):
        assert flags.shape == (N, 3) and flags.dtype == bool
    assert res.obs.main_images.shape == (N, 64, 64, 3) and res.chunk_rewards.shape == (N,)
    assert res.active_mask.all() and not res.done_mask.any() and res.final_obs is None


def test_episode_end_inside_chunk_with_auto_reset(holder):
    # max_episode_steps=3 with chunks of 4: the episode is truncated at index 2 of the first chunk
    env = vec(holder, max_episode_steps=3, auto_reset=True)
    env.reset()
    first_ids = env.reset_ids.copy()
    res = env.chunk_step(random_chunk(4))
    assert res.truncations[:, 2].all() and res.truncations.sum() == N and not res.terminations.any()
    assert res.done_mask.all() and res.active_mask[:, :3].all() and not res.active_mask[:, 3].any()
    assert (res.rewards[:, :3] != 0).all() and (res.rewards[:, 3] == 0).all()  # no stepping after the end
    assert [e.episode_len for e in res.episodes] == [3, 3]
    for e in res.episodes:  # the summary is the first 3 steps' rewards
        np.testing.assert_allclose(e.episode_return, res.rewards[e.env_index, :3].sum(), rtol=1e-5)
        assert e.reset_id == first_ids[e.env_index] and not e.failed
    # a new episode started at the chunk boundary: new reset ids, obs is its first observation
    assert (env.reset_ids != first_ids).all() and env.active.all()
    assert res.final_obs is not None
    assert not np.array_equal(res.final_obs.main_images, res.obs.main_images)
    fresh = vec(holder, max_episode_steps=3, auto_reset=False)
    fresh.set_reset_ids(env.reset_ids.copy())
    np.testing.assert_array_equal(fresh.reset().main_images, res.obs.main_images)
    assert env.pop_metrics()["num_trajectories"] == N
    # the final observation is the terminal one: replaying the episode reproduces it
    replay = vec(holder, max_episode_steps=3, auto_reset=False)
    replay.set_reset_ids(first_ids)
    replay.reset()
    again = replay.chunk_step(random_chunk(4))
    np.testing.assert_array_equal(again.obs.main_images, res.final_obs.main_images)
    np.testing.assert_allclose(again.rewards[:, :3], res.rewards[:, :3], rtol=1e-5)


def test_without_auto_reset_env_stays_done(holder):
    env = vec(holder, max_episode_steps=3, auto_reset=False)
    env.reset()
    res = env.chunk_step(random_chunk(4))
    assert res.truncations[:, 2].all() and (res.rewards[:, 3] == 0).all()
    assert res.active_mask[:, :3].all() and not res.active_mask[:, 3].any() and res.final_obs is None
    nxt = env.chunk_step(random_chunk(4, seed=1))
    assert not nxt.active_mask.any() and (nxt.rewards == 0).all() and not nxt.done_mask.any()
    np.testing.assert_array_equal(nxt.obs.main_images, res.obs.main_images)  # not stepped
    env.reset()
    assert env.active.all()


def test_rel_reward_and_reward_coef(holder):
    actions = random_chunk(5, seed=2)
    plain = vec(holder)
    plain.reset()
    raw = plain.chunk_step(actions).rewards
    rel = vec(holder, use_rel_reward=True, reward_coef=2.0)
    rel.reset()
    paid = rel.chunk_step(actions).rewards
    want = 2.0 * np.diff(np.concatenate([np.zeros((N, 1), np.float32), raw], axis=1), axis=1)
    np.testing.assert_allclose(paid, want, rtol=1e-4, atol=1e-5)


def test_groups_share_initial_states_and_groups_differ(holder):
    for fixed in (False, True):  # group members share their ids either way
        grouped = vec(holder, use_fixed_reset_state_ids=fixed, group_size=2)
        obs = grouped.reset()
        assert grouped.reset_ids[0] == grouped.reset_ids[1]
        np.testing.assert_array_equal(obs.main_images[0], obs.main_images[1])
    separate = vec(holder, group_size=1)
    obs = separate.reset()
    assert separate.reset_ids[0] != separate.reset_ids[1]
    assert not np.array_equal(obs.main_images[0], obs.main_images[1])


def test_fixed_reset_ids_repeat_every_epoch_fresh_ones_do_not(holder):
    fresh, fixed = vec(holder), vec(holder, use_fixed_reset_state_ids=True)
    firsts = []
    for env in (fresh, fixed):
        env.reset()
        firsts.append(env.reset_ids.copy())
        env.reset()
    np.testing.assert_array_equal(firsts[0], firsts[1])  # fixed ids are the first epoch's draw
    assert (fresh.reset_ids != firsts[0]).all()  # a new epoch draws new ids
    np.testing.assert_array_equal(fixed.reset_ids, firsts[1])  # the same states every epoch
    assert fixed.epoch == 1


def test_reset_ids_do_not_depend_on_the_split_over_workers_and_stages(holder):
    """The ids of the run's sub-envs 0..3 are the same whether one stage holds all four or four
    stages hold one each (2 cores or 64 evaluate the same states). Only id arithmetic runs here:
    the stand-in backend reports its size and is never stepped."""
    from embodied_rl.envs.vector_env import ChunkedVectorEnv

    class Sized:
        def __init__(self, n: int) -> None:
            self.num_envs, self.action_dim = n, 7

        def num_reset_ids(self):
            return None

    cfg, space = env_cfg(use_fixed_reset_state_ids=True), seed_split("train")
    one = ChunkedVectorEnv(Sized(4), cfg, reset_id_space=space, seed_offset=0)
    split = [ChunkedVectorEnv(Sized(1), cfg, reset_id_space=space, seed_offset=k) for k in range(4)]
    assert [one.draw_reset_id(i, 0) for i in range(4)] == [e.draw_reset_id(0, 0) for e in split]
    grouped_cfg = env_cfg(use_fixed_reset_state_ids=True, group_size=2)
    pairs = [ChunkedVectorEnv(Sized(2), grouped_cfg, reset_id_space=space, seed_offset=k) for k in range(2)]
    grouped = ChunkedVectorEnv(Sized(4), grouped_cfg, reset_id_space=space, seed_offset=0)
    assert [grouped.draw_reset_id(i, 0) for i in range(4)] == [p.draw_reset_id(i, 0) for p in pairs for i in range(2)]


def test_set_reset_ids_for_eval(holder):
    env = vec(holder)
    env.set_reset_ids([11, 11])
    obs = env.reset()
    assert env.reset_ids.tolist() == [11, 11]
    np.testing.assert_array_equal(obs.main_images[0], obs.main_images[1])
    with pytest.raises(ValueError, match="expected 2 ids"):
        env.set_reset_ids([1, 2, 3])


def test_same_seed_same_initial_observations_across_envs(holder):
    first = vec(holder, seed=5).reset()
    other_seed = vec(holder, seed=6).reset()
    old = holder.backend.pool.pids()
    holder.close()  # a separately created env: new processes, new simulators
    for pid in old:  # close() leaves no orphans
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    second = vec(holder, seed=5).reset()
    np.testing.assert_array_equal(first.main_images, second.main_images)
    np.testing.assert_array_equal(first.states, second.states)
    assert not np.array_equal(first.main_images, other_seed.main_images)


def test_killed_subprocess_is_restarted_and_episode_fails(holder, caplog):
    env = vec(holder)
    env.reset()
    pool = holder.backend.pool
    victim, rid = pool.pids()[1], int(env.reset_ids[1])
    env.chunk_step(random_chunk(2))
    os.kill(victim, signal.SIGKILL)
    with caplog.at_level(logging.WARNING, logger="embodied_rl.envs.subproc_pool"):
        res = env.chunk_step(random_chunk(3))
    assert f"sub-env 1 (task PickCube-v1, reset id {rid}) failed" in caplog.text
    assert res.terminations[1, 0] and not res.active_mask[1, 1:].any()
    assert res.active_mask[0].all() and not res.terminations[0].any()
    (ep,) = res.episodes
    assert ep.env_index == 1 and ep.failed and not ep.success_at_end and ep.episode_len == 3
    assert pool.pids()[1] != victim and env.pop_metrics()["fail_rate"] == 1.0
    env.reset()  # the rebuilt sub-env works
    assert env.chunk_step(random_chunk(2)).active_mask.all()


def test_hung_subprocess_times_out_and_is_restarted(holder, caplog):
    env = vec(holder, auto_reset=True)
    env.reset()
    pool = holder.backend.pool
    victim = pool.pids()[0]
    pool.options = dataclasses.replace(pool.options, step_timeout_s=2.0)
    os.kill(victim, signal.SIGSTOP)  # a real hang: the process stops answering
    try:
        with caplog.at_level(logging.WARNING, logger="embodied_rl.envs.subproc_pool"):
            res = env.chunk_step(random_chunk(2))
    finally:
        pool.options = dataclasses.replace(pool.options, step_timeout_s=SubprocConfig().step_timeout_s)
    assert "sub-env 0" in caplog.text and "hung" in caplog.text
    assert res.terminations[0, 0] and res.episodes[0].failed
    assert res.active_mask[1].all() and not res.active_mask[0, 1]  # the failed env idles for the chunk
    assert env.active.all()  # auto_reset: the rebuilt env starts a new episode at the chunk boundary
    assert pool.pids()[0] != victim


def test_missing_asset_task_gives_one_line_error():
    cfg = env_cfg(init_params={"id": "PutCarrotOnPlateInScene-v1", "camera_heights": 64, "camera_widths": 64})
    with pytest.raises(MissingAssetError) as err:
        make_env(cfg, 1)
    msg = str(err.value)
    assert "\n" not in msg and "PutCarrotOnPlateInScene-v1" in msg and "bridge_v2_real2sim" in msg
