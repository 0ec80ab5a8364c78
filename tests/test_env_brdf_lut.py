"""The zero BRDF table given to cameras of scenes without an environment map changes no pixel.

SAPIEN builds its own table once per process, so each side runs in a fresh process: one env
made by make_gym_env (the table given), one by a bare gym.make (SAPIEN's table), the same
reset seeds and actions, every camera's pictures compared byte for byte.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = [pytest.mark.slow, pytest.mark.maniskill]

SCRIPT = """
import sys
import numpy as np
from embodied_rl.process_env import configure_process_env
configure_process_env()
import gymnasium as gym
import mani_skill.envs  # noqa: F401 - registers the tasks
from embodied_rl.envs.maniskill import brdf_lut
from embodied_rl.envs.maniskill.make import make_gym_env
from embodied_rl.envs.maniskill.params import ManiSkillParams

task, ours, out = sys.argv[1], sys.argv[2] == "1", sys.argv[3]
params = ManiSkillParams(id=task, camera_heights=64, camera_widths=64)
if ours:
    env = make_gym_env(params)
    assert brdf_lut._zero_table.cache_info().currsize, "the cameras got no table while gym.make built the scene"
    assert brdf_lut.give_cameras_a_table(env.unwrapped.scene) >= 1
else:
    env = gym.make(task, obs_mode="rgb", control_mode=params.control_mode, num_envs=1,
                   sensor_configs={"width": 64, "height": 64})
rng = np.random.default_rng(0)
pictures = []
for seed in (3, 4):
    obs, _ = env.reset(seed=seed)
    for _ in range(4):
        obs, *_ = env.step(rng.uniform(-1, 1, size=env.action_space.shape).astype(np.float32))
        pictures += [cam["rgb"].numpy() for cam in obs["sensor_data"].values()]
np.save(out, np.stack(pictures))
"""


@pytest.mark.parametrize("task", ["PickCube-v1", "PushCube-v1"])
def test_pictures_are_those_of_sapiens_own_table(task: str, tmp_path: Path) -> None:
    pictures = {}
    for ours in (True, False):
        out = tmp_path / f"{int(ours)}.npy"
        run = subprocess.run([sys.executable, "-c", SCRIPT, task, str(int(ours)), str(out)], check=False, timeout=300,
                             capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-2000:]
        pictures[ours] = np.load(out)
    assert pictures[True].shape == pictures[False].shape and pictures[True].std() > 10  # a real scene
    assert np.array_equal(pictures[True], pictures[False])
