"""Distribution-shift env configs (env_configs/*_shift_*.yaml): each changes what it says it
changes, seen on pixels or simulator state, and nothing else of the task's initial state.

Every shift config is loaded as `embodied-rl eval CONFIG env.eval=<name>` loads it (64 px
images), its env built through the real ManiSkillSubEnv / make_gym_env in this process (after
the first ManiSkill env, ~15 s for Vulkan and shaders, a build takes under a second) and reset
with the same reset ids as its unshifted base config; the checks (tests/shift_observations.py) compare the two. A shift key
without a check here fails the test, so a new factor cannot ship untested.
"""
from __future__ import annotations

import dataclasses
import functools
import warnings
from pathlib import Path

import numpy as np
import pytest

from embodied_rl.config.loader import (
    ENV_CONFIG_DIR,
    available,
    read_env_config,
    read_yaml,
)
from embodied_rl.config.schema.env import EnvConfig
from embodied_rl.config.typecheck import build
from embodied_rl.configure import load_config
from embodied_rl.envs.maniskill.params import (
    ManiSkillParams,
    ShiftParams,
    shift_keys,
)
from embodied_rl.errors import ConfigError
from tests.shift_observations import CHECKS, RESET_IDS, Seen, observe

SHIFTS = [n for n in available(ENV_CONFIG_DIR) if "_shift_" in n]
EXPERIMENT = "maniskill_ppo_from_sft"  # 64 px eval images


def test_shift_suites_cover_every_task_and_family() -> None:
    """Every shipped ManiSkill task has at least 3 shifts; PickCube and PushCube (the learning
    tasks) have vision, semantics and execution all present, the others vision and execution."""
    for task in ("maniskill_pick_cube", "maniskill_push_cube", "maniskill_stack_cube", "maniskill_peg_insertion"):
        mine = [n for n in SHIFTS if n.startswith(f"{task}_shift_")]
        families = {ShiftParams.family(k) for n in mine for k in changed_keys(n)}
        wanted = {"vision", "semantics", "execution"} if task in ("maniskill_pick_cube", "maniskill_push_cube") else {"vision", "execution"}
        assert len(mine) >= 3 and wanted <= families, (task, mine, families)


# ----------------------------------------------------------------------------- config level


def base_of(name: str) -> str:
    base = read_yaml(ENV_CONFIG_DIR / f"{name}.yaml").get("base")
    assert isinstance(base, str) and "_shift_" not in base, f"{name}: a shift config builds on its unshifted task config"
    return base


def changed_keys(name: str) -> set[str]:
    """Shift keys (and task_description) in which a shift config differs from its base."""
    shifted, base = read_env_config(ENV_CONFIG_DIR / f"{name}.yaml"), read_env_config(ENV_CONFIG_DIR / f"{base_of(name)}.yaml")
    assert {k: v for k, v in shifted.items() if k not in ("init_params", "task_description")} == \
        {k: v for k, v in base.items() if k not in ("init_params", "task_description")}, f"{name} changes keys outside the shift"
    assert {k: v for k, v in shifted["init_params"].items() if k != "shift"} == base["init_params"], f"{name} changes init_params outside shift"
    return shift_keys(shifted, base)


@functools.cache
def eval_env(name: str) -> tuple[EnvConfig, ManiSkillParams]:
    """env.eval of the eval command with this env config, and its params as make_env parses them
    (read-only: cached, as the loader's plan checks take a fraction of a second per load)."""
    cfg = load_config(EXPERIMENT, [f"env.eval={name}"])
    env_cfg = cfg.env.eval
    return env_cfg, build(ManiSkillParams, dict(env_cfg.init_params), "env.init_params")


@pytest.mark.parametrize("name", SHIFTS)
def test_shift_config_loads_and_changes_one_factor(name: str) -> None:
    _, params = eval_env(name)
    keys = changed_keys(name)
    assert keys and keys <= CHECKS.keys(), f"{name}: changed {keys}, checked here: {sorted(CHECKS)}"
    assert params.shift.changed() == keys - {"task_description"}
    families = {ShiftParams.family(k) for k in keys}
    assert len(families) == 1, f"{name} mixes families {families}"
    _, base_params = eval_env(base_of(name))
    assert dataclasses.replace(params, shift=ShiftParams()) == base_params


@pytest.mark.parametrize(("overrides", "expected"), [
    (["+env.eval.init_params.shift.light_scale=0"], "env.eval.init_params.shift: light_scale=0.0 must be in (0, 4]"),
    (["+env.eval.init_params.shift.table_color=mauve"], "env.eval.init_params.shift: table_color='mauve' is not a colour"),
    (["+env.eval.init_params.shift.object_color=1.5,0,0"], "env.eval.init_params.shift: object_color='1.5,0,0' is not a colour"),
    (["+env.eval.init_params.shift.object_scale=3"], "env.eval.init_params.shift: object_scale=3.0 must be in [0.5, 2]"),
    (["+env.eval.init_params.shift.robot_init_qpos_noise=-0.1"], "robot_init_qpos_noise=-0.1 must be in [0, 0.5]"),
    (["+env.eval.init_params.shift.camera_offset=[0.1, 0.0]"], "env.eval.init_params.shift: camera_offset=[0.1, 0.0] must be 3 numbers"),
    (["env.eval=maniskill_push_cube_shift_xy_offset", "env.eval.init_params.shift.object_xy_offset=[0.3, 0.0]"],
     "env.eval.init_params.shift: object_xy_offset=[0.3, 0.0] must be 2 numbers, each within ±0.2 m"),
    (["+env.eval.init_params.shift.distractors=7"], "env.eval.init_params: shift.distractors=7: PushCube-v1 has 6 free table slots"),
    (["+env.eval.init_params.shift.distractors=many"], "env.eval.init_params.shift.distractors: expected int, got 'many'"),
    (["env.eval=maniskill_stack_cube", "+env.eval.init_params.shift.object_scale=1.5"],
     "env.eval.init_params: shift.object_scale is not supported: StackCube-v1 does not support it"),
    (["env.eval=maniskill_peg_insertion", "+env.eval.init_params.shift.distractors=1"],
     "env.eval.init_params: shift.distractors is not supported: PegInsertionSide-v1 does not support it"),
    (["+env.eval.init_params.shift.light_scal=0.5"], "unknown key 'env.eval.init_params.shift.light_scal'; did you mean 'env.eval.init_params.shift.light_scale'?"),
])
def test_bad_shift_is_one_line_naming_the_key(overrides: list[str], expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(EXPERIMENT, overrides, plan=False)
    assert "\n" not in str(err.value) and expected in str(err.value), str(err.value)


def test_env_config_base(tmp_path: Path) -> None:
    """`base:` chains merge mappings key by key (lists replaced); a missing base or a cycle is one line naming the file."""
    (tmp_path / "a.yaml").write_text("env_type: maniskill\ntask_description: a\ninit_params: {id: PushCube-v1, camera_heights: 32}\n")
    (tmp_path / "b.yaml").write_text("base: a\ninit_params: {camera_heights: 48, shift: {camera_offset: [0.0, 0.1, 0.0]}}\n")
    (tmp_path / "c.yaml").write_text("base: b.yaml\ntask_description: c\ninit_params: {shift: {camera_offset: [0.0, 0.0, 0.1]}}\n")
    assert read_env_config(tmp_path / "c.yaml", []) == {
        "env_type": "maniskill", "task_description": "c",
        "init_params": {"id": "PushCube-v1", "camera_heights": 48, "shift": {"camera_offset": [0.0, 0.0, 0.1]}}}
    # A repo config as base, found through the lookup dirs; and through load_config with a path.
    (tmp_path / "d.yaml").write_text("base: maniskill_push_cube\ntask_description: d\n")
    cfg = load_config(EXPERIMENT, [f"env.eval={tmp_path / 'd.yaml'}"], plan=False)
    assert cfg.env.eval.task_description == "d" and cfg.env.eval.init_params["id"] == "PushCube-v1"
    (tmp_path / "e.yaml").write_text("base: no_such_task\n")
    with pytest.raises(ConfigError, match=r"e.yaml: base: unknown env config 'no_such_task'; available: .*maniskill_push_cube"):
        read_env_config(tmp_path / "e.yaml")
    (tmp_path / "f.yaml").write_text("base: g\n")
    (tmp_path / "g.yaml").write_text("base: f\n")
    with pytest.raises(ConfigError, match=r"g.yaml: base: f makes a cycle \(f -> g -> f\)"):
        read_env_config(tmp_path / "f.yaml", [])
    (tmp_path / "h.yaml").write_text("base: [a]\n")
    with pytest.raises(ConfigError, match="base must name an env config"):
        read_env_config(tmp_path / "h.yaml", [])


def test_unshifted_params_make_the_registered_task() -> None:
    """No shift: gym.make of ManiSkill's own id with no extra kwargs (the task exactly as before)."""
    from embodied_rl.envs.maniskill.shifts import SHIFT_NAMESPACE, gym_make_args

    plain = ManiSkillParams(id="PushCube-v1")
    assert gym_make_args(plain) == ("PushCube-v1", {})
    noise = ManiSkillParams(id="PushCube-v1", shift={"robot_init_qpos_noise": 0.1})
    assert gym_make_args(noise) == ("PushCube-v1", {"robot_init_qpos_noise": 0.1})
    env_id, kwargs = gym_make_args(ManiSkillParams(id="PushCube-v1", shift={"light_scale": 0.5}))
    assert env_id == f"{SHIFT_NAMESPACE}/PushCube-v1" and kwargs["shift"].shift.light_scale == 0.5


# ----------------------------------------------------------------------------- simulator level (tests/shift_observations.py)


@functools.cache
def seen(name: str) -> Seen:
    """The env of `env.eval=<name>` (as the eval command builds it) after each of RESET_IDS."""
    from embodied_rl.envs.maniskill.backend import instruction_of

    env_cfg, params = eval_env(name)
    return observe(params, instruction_of(env_cfg, params))


@pytest.mark.slow
@pytest.mark.maniskill
@pytest.mark.parametrize("name", SHIFTS)
def test_shift_changes_what_it_says_and_nothing_else(name: str) -> None:
    warnings.filterwarnings("ignore", message="Failed to find system libvulkan")
    env_cfg, params = eval_env(name)
    base, shifted = seen(base_of(name)), seen(name)
    keys = changed_keys(name)
    for key in sorted(keys):
        value = env_cfg.task_description if key == "task_description" else getattr(params.shift, key)
        CHECKS[key](value, base, shifted)
    # Everything the factor does not touch starts as in the unshifted task.
    task_actors = {base.obj, *base.moved} - {""}  # "": the task registers no object
    if not keys & {"object_xy_offset", "object_scale"}:
        for n in task_actors:
            np.testing.assert_allclose(shifted.poses[n], base.poses[n], atol=1e-6, err_msg=n)
    if "robot_init_qpos_noise" not in keys:
        np.testing.assert_allclose(shifted.qpos, base.qpos, atol=1e-6)
    if "camera_offset" not in keys:
        np.testing.assert_allclose(shifted.camera, base.camera, atol=1e-6)
    if "task_description" not in keys:
        assert shifted.instruction == base.instruction
    if keys == {"task_description"}:  # a paraphrase shows the same scene
        assert all(np.array_equal(a, b) for a, b in zip(shifted.images, base.images))


# Every factor a registry entry claims, on the tasks without shipped shift configs: all at once
# (their effects do not overlap), checked by the same functions. Lighting and camera offset
# do not depend on the registry (and would overlap the pixel checks): PickCube/PushCube check them.
OTHER_TASKS = {
    "StackCube-v1": {"table_color": "gray", "distractors": 4, "object_color": "yellow", "robot_init_qpos_noise": 0.1,
                     "object_xy_offset": [-0.05, 0.05]},
    "PegInsertionSide-v1": {"table_color": "gray", "object_xy_offset": [-0.05, 0.05]},
}
GENERIC = ("light_scale", "light_color", "camera_offset")


def test_other_tasks_cover_their_registry_entries() -> None:
    for task, shift in OTHER_TASKS.items():
        unsupported = {k for k in ShiftParams().__dataclass_fields__ if k not in shift}
        for key in unsupported:  # what is left out is refused by the registry
            value = {"object_color": "gray", "object_scale": 1.5, "distractors": 1, "robot_init_qpos_noise": 0.1,
                     "light_scale": 0.5, "light_color": "cool", "table_color": "gray", "camera_offset": [0.0, 0.0, 0.1],
                     "object_xy_offset": [0.0, 0.1]}[key]
            try:
                ManiSkillParams(id=task, shift={key: value})
            except ValueError as err:
                assert f"shift.{key} is not supported" in str(err)
            else:
                assert key in GENERIC, f"{task} supports {key} but the test does not check it"


@pytest.mark.slow
@pytest.mark.maniskill
@pytest.mark.parametrize("task", sorted(OTHER_TASKS))
def test_other_registered_tasks_apply_their_shifts(task: str) -> None:
    warnings.filterwarnings("ignore", message="Failed to find system libvulkan")
    shift = OTHER_TASKS[task]
    params = ManiSkillParams(id=task, camera_heights=64, camera_widths=64)
    ids = RESET_IDS[:2] if "robot_init_qpos_noise" not in shift else RESET_IDS
    base = observe(params, "task", ids)
    shifted = observe(dataclasses.replace(params, shift=ShiftParams(**shift)), "task", ids)
    for key, value in shift.items():
        if key == "robot_init_qpos_noise":
            spread, before = shifted.qpos[:, :7].std(axis=0).mean(), base.qpos[:, :7].std(axis=0).mean()
            assert spread > 2 * before, (before, spread)
            continue
        if key == "object_xy_offset":
            for n in shifted.moved:
                np.testing.assert_allclose(shifted.poses[n][:, :2] - base.poses[n][:, :2], np.tile(value, (len(ids), 1)), atol=1e-5)
            continue
        CHECKS[key](value, base, shifted)
