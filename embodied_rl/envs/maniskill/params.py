"""`init_params` of `env_type: maniskill` env configs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from embodied_rl.errors import ConfigError


@dataclass
class ManiSkillParams:
    id: str = field(default="PickCube-v1", metadata={"help": "ManiSkill3 task id (any registered task whose assets are installed)."})
    obs_mode: Literal["rgb"] = field(default="rgb", metadata={"help": "Observation mode; only `rgb` (camera images + proprio state) is supported."})
    control_mode: str = field(default="pd_ee_delta_pose", metadata={"help": "Controller: pd_ee_delta_pose (normalised ±1 = ±0.1 m / ±0.1 rad, gripper -1 closed, +1 open) or another ManiSkill control mode."})
    sim_backend: Literal["cpu", "gpu"] = field(default="cpu", metadata={"help": "cpu: one process per sub-env; gpu: all sub-envs batched in one GPU process (needs CUDA)."})
    render_backend: Literal["cpu", "gpu"] = field(default="cpu", metadata={"help": "SAPIEN render device: cpu (software Vulkan) or gpu."})
    reward_mode: Literal["sparse", "dense", "normalized_dense"] = field(default="sparse", metadata={"help": "sparse | dense | normalized_dense (ManiSkill's reward modes)."})
    camera_heights: int = field(default=128, metadata={"help": "Height in pixels of the cameras (main and wrist)."})
    camera_widths: int = field(default=128, metadata={"help": "Width in pixels of the cameras (main and wrist)."})
    main_camera: str = field(default="base_camera", metadata={"help": "Sensor used as the main (third-person) image."})
    wrist_camera: str = field(default="auto", metadata={"help": "Wrist sensor: auto (hand_camera when the robot has one) | none | a sensor name."})
    robot_uids: str | None = field(default=None, metadata={"help": "Robot to load (null = the task's default, e.g. panda_wristcam for StackCube)."})
    append_goal_to_state: bool = field(default=False, metadata={"help": "Append the task's goal position (`extra/goal_pos`, xyz in metres, 3 values) to the state vector. Privileged information: PickCube-v1's goal is hidden from every camera, so an image policy can only solve it with this (and actor.model.use_proprio). Tasks without a goal position in their rgb observation (PushCube-v1, StackCube-v1) reject it."})

    def __post_init__(self) -> None:
        if self.obs_mode != "rgb":
            raise ConfigError(f"env.init_params.obs_mode={self.obs_mode!r} is not supported; use 'rgb'")
        if self.sim_backend not in ("cpu", "gpu"):
            raise ConfigError(f"env.init_params.sim_backend={self.sim_backend!r}; use 'cpu' or 'gpu'")
        if self.render_backend not in ("cpu", "gpu"):
            raise ConfigError(f"env.init_params.render_backend={self.render_backend!r}; use 'cpu' or 'gpu'")
        if self.reward_mode not in ("sparse", "dense", "normalized_dense"):
            raise ConfigError(f"env.init_params.reward_mode={self.reward_mode!r}; use sparse, dense or normalized_dense")
        for key in ("camera_heights", "camera_widths"):
            if not 8 <= getattr(self, key) <= 2048:
                raise ConfigError(f"env.init_params.{key}={getattr(self, key)} must be between 8 and 2048")
