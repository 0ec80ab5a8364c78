"""Creating ManiSkill3 gym envs from `ManiSkillParams`, never reaching the asset download prompt.

ManiSkill asks `(y|n)` on stdin when a task's assets are missing (and calls `exit()` on "n").
We replace that prompt, for the duration of `gym.make`, by an exception carrying its message,
and turn it (and missing-file errors) into a one-line `MissingAssetError` naming task and asset.
"""
from __future__ import annotations

import contextlib
import dataclasses
import re
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from embodied_rl.envs.maniskill.brdf_lut import install as install_brdf_table
from embodied_rl.envs.maniskill.params import ManiSkillParams
from embodied_rl.envs.maniskill.shifts import gym_make_args
from embodied_rl.envs.maniskill.visual_lod import simplify_robot_visuals
from embodied_rl.errors import ConfigError, UserError

# `import sapien` warns when no system libvulkan.so.1 exists and loads the Vulkan loader it bundles,
# which finds the software driver (VK_ICD_FILENAMES) just as well: harmless, yet said by every
# process that imports it, first each env worker's fork server preloading mani_skill.envs. Any
# module of this package runs this line before its first sapien import (the package imports this
# module through its backend, and the fork server preloads the sub-env module before ManiSkill).
warnings.filterwarnings("ignore", message="Failed to find system libvulkan", category=UserWarning)

OFFLINE_TASKS = "PickCube-v1, PushCube-v1, StackCube-v1, PegInsertionSide-v1, PullCube-v1, PlugCharger-v1"


class MissingAssetError(UserError):
    """A ManiSkill task needs assets that are not installed."""


class _AssetPrompt(Exception):
    pass


@contextlib.contextmanager
def _no_download_prompt() -> Iterator[None]:
    from mani_skill.utils import download_asset

    def refuse(message: str) -> bool:
        raise _AssetPrompt(message)

    original = download_asset.prompt_yes_no
    download_asset.prompt_yes_no = refuse
    try:
        yield
    finally:
        download_asset.prompt_yes_no = original


def _missing_asset_error(task: str, detail: str) -> MissingAssetError:
    found = re.search(r"asset\(s\) (.+?) which could not", detail) or re.search(r"Robot (\S+) has assets", detail)
    asset = found.group(1) if found else detail.strip().splitlines()[0][:200]
    return MissingAssetError(
        f"ManiSkill task {task} needs asset {asset}, which is not installed and cannot be downloaded "
        f"offline; run `python -m mani_skill.utils.download_asset {task}` on a machine with network, "
        f"or use an offline task ({OFFLINE_TASKS})"
    )


def make_gym_env(params: ManiSkillParams, num_envs: int = 1) -> Any:
    """gym.make the task (its shifted subclass with `params.shift`, see shifts.py); one env on
    the CPU sim, `num_envs` batched envs on the GPU sim."""
    import gymnasium as gym
    import mani_skill.envs  # noqa: F401 - registers the tasks
    from mani_skill.utils.registration import REGISTERED_ENVS

    if params.id not in REGISTERED_ENVS:
        raise ConfigError(
            f"env.init_params.id={params.id!r} is not a ManiSkill task; e.g. {OFFLINE_TASKS}"
        )
    kwargs: dict[str, Any] = {
        # state_dict beside the images: the privileged extras (object and goal poses) a critic may read
        "obs_mode": params.obs_mode + ("+state_dict" if params.privileged_state else ""),
        "control_mode": params.control_mode,
        "reward_mode": params.reward_mode,
        "render_backend": params.render_backend,
        "sim_backend": "physx_cuda" if params.sim_backend == "gpu" else "physx_cpu",
        "num_envs": num_envs,
        "sensor_configs": {"width": params.camera_widths, "height": params.camera_heights},
    }
    if params.robot_uids is not None:
        kwargs["robot_uids"] = params.robot_uids
    env_id, shift_kwargs = gym_make_args(params)
    if params.render_backend == "cpu":
        install_brdf_table()  # software Vulkan would spend ~6.5 s of CPU on SAPIEN's own table
    try:
        with _no_download_prompt():
            env = gym.make(env_id, **kwargs, **shift_kwargs)
    except _AssetPrompt as err:
        raise _missing_asset_error(params.id, str(err)) from None
    except FileNotFoundError as err:
        raise _missing_asset_error(params.id, f"file {err.filename or err}") from None
    except RuntimeError as err:
        if "download_asset" in str(err):
            raise _missing_asset_error(params.id, str(err)) from None
        raise
    refresh_visuals(env, params)
    return env


def refresh_visuals(env: Any, params: ManiSkillParams) -> bool:
    """Apply `robot_visual_cell` to the env's robot (gym.make builds the scene; a task that
    reconfigures on reset rebuilds it): True when a body was replaced, i.e. when an observation
    rendered before the call shows the full meshes."""
    if params.robot_visual_cell is None:
        return False
    return simplify_robot_visuals(env.unwrapped, params.robot_visual_cell)


def camera_names(env: Any, params: ManiSkillParams) -> tuple[str, str | None]:
    """(main sensor, wrist sensor or None) after checking they exist in the task."""
    sensors = list(env.unwrapped._sensors.keys())
    if params.main_camera not in sensors:
        raise ConfigError(f"env.init_params.main_camera={params.main_camera!r} not in {params.id} sensors {sensors}")
    if params.wrist_camera == "auto":
        return params.main_camera, ("hand_camera" if "hand_camera" in sensors else None)
    if params.wrist_camera == "none":
        return params.main_camera, None
    if params.wrist_camera not in sensors:
        raise ConfigError(f"env.init_params.wrist_camera={params.wrist_camera!r} not in {params.id} sensors {sensors} (or use auto/none)")
    return params.main_camera, params.wrist_camera


def check_goal_state(env: Any, params: ManiSkillParams) -> None:
    """`append_goal_to_state` needs `extra/goal_pos` in the task's rgb observation."""
    if not params.append_goal_to_state:
        return
    if params.privileged_state:  # its state_dict extras hold the goal of every task: ask the rgb observation
        plain = make_gym_env(dataclasses.replace(params, privileged_state=False))
        try:
            check_goal_state(plain, dataclasses.replace(params, privileged_state=False))
        finally:
            plain.close()
        return
    extra = env.observation_space.spaces.get("extra")
    if extra is None or "goal_pos" not in extra.spaces:
        raise ConfigError(
            f"env.init_params.append_goal_to_state=true but {params.id} has no extra/goal_pos in its "
            "observation (its goal is visible or implied by the scene); set it to false"
        )


def proprio_state(obs: dict, with_goal: bool = False) -> np.ndarray:
    """float32 [B, D]: TCP pose (xyz + quaternion wxyz) and the two gripper finger joints,
    then with `with_goal` the goal position (xyz), see `proprio_layout`.

    Tasks without `extra/tcp_pose` fall back to the full robot qpos.
    """
    import torch

    extra = obs.get("extra", {})
    qpos = obs["agent"]["qpos"]
    tcp = extra.get("tcp_pose")
    parts = [qpos] if tcp is None else [tcp, qpos[:, -2:]]
    if with_goal:
        parts.append(extra["goal_pos"])
    return torch.cat(parts, dim=-1).cpu().numpy().astype(np.float32)


def privileged_state(obs: dict) -> np.ndarray:
    """float32 [B, P]: the `state_dict` observation (agent, then extra) flattened in ManiSkill's
    own order, i.e. what its `state` obs mode gives; needs `privileged_state` in the params."""
    from mani_skill.utils.common import flatten_state_dict

    return flatten_state_dict({"agent": obs["agent"], "extra": obs["extra"]}, use_torch=True).cpu().numpy().astype(np.float32)


def proprio_layout(obs: dict, with_goal: bool = False) -> tuple[str, ...]:
    """Names of the `proprio_state` entries, in order (e.g. for a dataset manifest)."""
    if obs.get("extra", {}).get("tcp_pose") is None:
        names = [f"qpos_{i}" for i in range(obs["agent"]["qpos"].shape[-1])]
    else:
        names = ["tcp_x", "tcp_y", "tcp_z", "tcp_qw", "tcp_qx", "tcp_qy", "tcp_qz", "finger_left", "finger_right"]
    if with_goal:
        names += ["goal_x", "goal_y", "goal_z"]
    return tuple(names)
