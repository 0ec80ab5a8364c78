"""Mixtures of tasks in one rollout (`env.<mode>.tasks`): the split of sub-envs at any machine
size, the config errors, and real ManiSkill3 tasks side by side, each drawing exactly the
initial states a single-task run of it draws."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from embodied_rl.configure import load_config
from embodied_rl.distributed.resources import Resources
from embodied_rl.envs import ChunkedVectorEnv, MixtureVectorEnv, make_env
from embodied_rl.envs.mixture import apportion, task_counts
from embodied_rl.errors import ConfigError

MIXTURE = "maniskill_ppo_multitask_tiny"
IDS = ("PushCube-v1", "PickCube-v1", "StackCube-v1")


@pytest.mark.parametrize("shares", [[1, 1, 1], [2, 1, 1], [5, 3, 1, 1], [0.7, 0.3], [1]])
@pytest.mark.parametrize("groups", [3, 4, 8, 16, 32, 64, 128, 257])
def test_apportion_keeps_each_share_within_one_group(shares: list[float], groups: int) -> None:
    counts = np.asarray(task_counts(shares, groups))
    exact = groups * np.asarray(shares) / sum(shares)
    assert counts.sum() == groups and np.all(np.abs(counts - exact) < 1)
    order = apportion(shares, groups)
    for end in range(1, groups + 1):  # every prefix (a worker stage's neighbours) is mixed too
        prefix = np.bincount(order[:end], minlength=len(shares))
        assert np.all(np.abs(prefix - end * np.asarray(counts) / groups) < 2)


@pytest.mark.parametrize("slots", [2, 4, 16, 64])
def test_shipped_mixture_split_at_any_machine_size(slots: int) -> None:
    """Each task's sub-envs (whole groups of one) stay within one of its share of the count
    derived for the machine, and every task reads the section's sizes."""
    cfg = load_config(MIXTURE, resources=Resources(1, slots, "cpu"))
    for mode in ("train", "eval"):
        env = getattr(cfg.env, mode)
        assert env.total_num_envs >= 2 * slots  # grows with the machine: 2 groups per stage of every env worker
        counts = task_counts([t.share for t in env.tasks], env.total_num_envs)
        assert sum(counts) == env.total_num_envs and all(abs(c - env.total_num_envs / 3) < 1 for c in counts), counts
        assert [t.init_params["id"] for t in env.tasks] == list(IDS)
        assert all(t.total_num_envs == env.total_num_envs and t.init_params["camera_heights"] == 64 for t in env.tasks)


def test_task_keys_resolve_in_order() -> None:
    """Env config < the section's keys < the entry's own; the section's rollout keys reach every task."""
    cfg = load_config(MIXTURE, ["env.train.max_episode_steps=30", "env.train.seed=7",
                                ("env.train.tasks=[{config: maniskill_push_cube, max_episode_steps: 20, task_description: shove it},"
                                "{config: maniskill_pick_cube, share: 2}]")], resources=Resources(1, 2, "cpu"))
    push, pick = cfg.env.train.tasks
    assert (push.max_episode_steps, pick.max_episode_steps) == (20, 30)
    assert (push.task_description, pick.task_description) == ("shove it", "pick up the red cube")
    assert (push.seed, pick.seed, pick.share) == (7, 7, 2.0)
    assert pick.init_params["append_goal_to_state"] is False  # the section's, over the env config's true


@pytest.mark.parametrize(("overrides", "message"), [
    (["env.train.tasks=[{config: maniskill_push_cube, share: 0}]"], "env.train.tasks[0].share: must be a positive number"),
    (["env.train.tasks=[{config: maniskill_push_cube, test_size: 5}]"], "env.train.tasks[0].test_size: env.train draws from the train split"),
    (["env.eval.tasks=[{config: maniskill_push_cube, train_size: 5}]"], "env.eval.tasks[0].train_size: env.eval draws from the eval split"),
    (["env.train.tasks=[{config: maniskill_push_cube, train_size: 0}]"], "env.train.tasks[0].train_size: must be >= 1"),
    (["env.train.tasks=[{config: maniskill_push_cube, group_size: 2}]"], "env.train.tasks[0].group_size=2 differs from env.train.group_size=1"),
    (["env.train.tasks=[{config: maniskill_push_cube}, {config: nowhere_cube}]"], "env.train.tasks[1]: unknown env config 'nowhere_cube'"),
    (["env.train.tasks=[{share: 1}]"], "env.train.tasks[0]: no simulator"),
    (["env.train.env_type=maniskill"], "env.train.env_type='maniskill' beside tasks"),
    (["env.train.init_params.wrist_camera=auto"], "env.train.tasks[2] gives cameras per observation 2 but env.train.tasks[0] gives 1"),
    ([("env.train.tasks=[{config: maniskill_push_cube}, {config: maniskill_pick_cube}, {config: maniskill_stack_cube}, "
      "{config: maniskill_push_cube}, {config: maniskill_pick_cube}]"), "env.train.groups_per_stage=1"],
     "env.train.tasks[4] (share 1.0) gets none of the 4 sub-env groups of env.train on this machine"),
])
def test_bad_mixtures_fail_before_start(overrides: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(MIXTURE, overrides, resources=Resources(1, 2, "cpu"))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_an_env_config_and_tasks_together_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"env.train: both an env config .* and tasks are given"):
        load_config(MIXTURE, ["env.train=maniskill_push_cube"], resources=Resources(1, 2, "cpu"))


@pytest.fixture(scope="module")
def configured_process():
    from embodied_rl.process_env import configure_process_env

    configure_process_env()


@pytest.mark.maniskill
def test_mixture_tasks_step_side_by_side_like_single_task_runs(configured_process) -> None:
    """One stage of 4 sub-envs over three real tasks: rows keep their task's instruction, episodes
    and metrics name their task, and the PushCube rows draw the initial states of a 2-sub-env
    PushCube run, step for step the same rewards under the same actions."""
    cfg = load_config(MIXTURE, ["env.train.auto_reset=false", "env.train.ignore_terminations=true", "env.train.max_episode_steps=16"],
                      resources=Resources(1, 2, "cpu"))
    section = cfg.env.train
    mix = make_env(section, 4, seed_offset=0)
    single = None
    try:
        assert isinstance(mix, MixtureVectorEnv)
        rows = {env.cfg.init_params["id"]: r.tolist() for r, env in mix.parts}
        assert rows == {"PushCube-v1": [0, 3], "PickCube-v1": [1], "StackCube-v1": [2]}  # groups cycle through the tasks
        push = dataclasses.replace(section.tasks[0], tasks=[], total_num_envs=2)
        single = make_env(push, 2, seed_offset=0)
        assert isinstance(single, ChunkedVectorEnv)
        obs, ref = mix.reset(), single.reset()
        assert [obs.task_descriptions[i] for i in (0, 1, 2)] == [t.task_description for t in section.tasks]
        np.testing.assert_array_equal(obs.main_images[[0, 3]], ref.main_images)
        rng = np.random.default_rng(0)
        for _ in range(2):
            actions = rng.uniform(-1, 1, (4, 8, 7)).astype(np.float32)
            res, res_single = mix.chunk_step(actions), single.chunk_step(actions[[0, 3]])
            np.testing.assert_allclose(res.rewards[[0, 3]], res_single.rewards, rtol=1e-5)
        episodes = {(e.env_index, e.task_id): e for e in mix.pop_episodes()}
        assert set(episodes) == {(0, "PushCube-v1"), (1, "PickCube-v1"), (2, "StackCube-v1"), (3, "PushCube-v1")}
        singles = single.pop_episodes()
        assert [episodes[(i, "PushCube-v1")].reset_id for i in (0, 3)] == [e.reset_id for e in singles]
        assert [episodes[(i, "PushCube-v1")].episode_return for i in (0, 3)] == pytest.approx([e.episode_return for e in singles])
    finally:
        mix.close()
        if single is not None:
            single.close()


def test_grpo_groups_never_mix_tasks(example_plugin: None) -> None:
    """Groups of 2 over three tasks of the example plug-in's point simulator (real sub-env processes):
    in the second stage of an 8-sub-env run, each group's two rows belong to one task and start
    from one reset id."""
    from embodied_rl.config.schema.env import MixtureTask

    tasks = [MixtureTask(env_type="point_reach", init_params={"step_size": s}, share=w, group_size=2, total_num_envs=8)
             for s, w in ((0.1, 1.0), (0.2, 1.0), (0.3, 2.0))]
    section = dataclasses.replace(tasks[0], env_type="mixture", tasks=tasks, init_params={})
    env = make_env(section, 4, seed_offset=1)
    try:
        obs_rows = {float(e.cfg.init_params["step_size"]): rows.tolist() for rows, e in env.parts}
        env.reset()
        ids = np.empty(4, np.int64)
        for rows, part in env.parts:
            ids[rows] = part.reset_ids
            assert len(rows) % 2 == 0 and all(rows[i] % 2 == 0 and rows[i + 1] == rows[i] + 1 for i in range(0, len(rows), 2))
        assert np.array_equal(ids[0::2], ids[1::2])
        assert sum(len(r) for r in obs_rows.values()) == 4 and set(obs_rows) <= {0.1, 0.2, 0.3}
    finally:
        env.close()
